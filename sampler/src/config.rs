//! The site configuration file (`/etc/jobscope/jobscope.toml`), shared by the plugin and the epilog.
//! Every key is optional; see docs/configuration.md for the reference. Unknown keys are an error, so a
//! typo does not silently fall back to a default.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use jobscope_model::params::Report;

pub const DEFAULT_CONFIG_PATH: &str = "/etc/jobscope/jobscope.toml";
/// A config file larger than this is refused (it is read by root inside slurmstepd).
const MAX_CONFIG_BYTES: u64 = 256 * 1024;

/// A path the configuration or the plugstack line names: absolute and without `..`, so that what
/// root opens does not depend on its current directory and cannot climb out of the directory an
/// admin reviewed. THE check for every path value (docs/configuration.md says so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbsPath(PathBuf);

/// Why a value was refused, one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("must be an absolute path without '..': {0}")]
    NotAbsolute(String),
    #[error("{0:?}: 1 to {MAX_LABEL_CHARS} of A-Z a-z 0-9 _ -{1}")]
    BadLabel(String, &'static str),
}

impl AbsPath {
    pub fn new(path: impl Into<PathBuf>) -> Result<AbsPath, ValueError> {
        let p = path.into();
        if p.is_absolute()
            && !p
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            Ok(AbsPath(p))
        } else {
            Err(ValueError::NotAbsolute(p.display().to_string()))
        }
    }

    pub fn into_path_buf(self) -> PathBuf {
        self.0
    }
}

impl std::ops::Deref for AbsPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

/// Most characters of a [`Label`].
pub const MAX_LABEL_CHARS: usize = 64;

/// A name that becomes part of a file name or a key: a cluster's name (`run.cluster`, the cluster
/// part of an archive file name) and `postgres.source`. 1 to [`MAX_LABEL_CHARS`] of
/// `A-Z a-z 0-9 _ -`; `postgres.source` also admits `.` (as it always has: refusing it now would
/// make a working configuration invalid), which a cluster label never has, since a cluster name
/// with a `.` has been archived with a `_` there and must keep naming the same files.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(String);

impl Label {
    /// A cluster label, as given.
    pub fn new(s: &str) -> Result<Label, ValueError> {
        Label::checked(s, "")
    }

    /// A `postgres.source` label: [`Label::new`]'s characters and `.`.
    pub fn source(s: &str) -> Result<Label, ValueError> {
        Label::checked(s, ".")
    }

    /// `s` made a cluster label: any other character becomes `_`, and it is cut at
    /// [`MAX_LABEL_CHARS`]; `None` when `s` is empty.
    pub fn sanitised(s: &str) -> Option<Label> {
        let l: String = s
            .chars()
            .take(MAX_LABEL_CHARS)
            .map(|c| if Label::allowed(c, "") { c } else { '_' })
            .collect();
        Label::new(&l).ok()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn allowed(c: char, extra: &str) -> bool {
        c.is_ascii_alphanumeric() || c == '_' || c == '-' || extra.contains(c)
    }

    fn checked(s: &str, extra: &'static str) -> Result<Label, ValueError> {
        let n = s.chars().count();
        if (1..=MAX_LABEL_CHARS).contains(&n) && s.chars().all(|c| Label::allowed(c, extra)) {
            Ok(Label(s.to_string()))
        } else {
            let more = if extra.is_empty() { "" } else { " ." };
            Err(ValueError::BadLabel(s.to_string(), more))
        }
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub paths: Paths,
    pub sampler: Sampler,
    pub archive: Archive,
    pub audit: Audit,
    pub report: Report,
    pub mail: Mail,
    pub gpu: Gpu,
    pub postgres: Postgres,
    pub run: Run,
}

/// `[postgres]`: the optional PostgreSQL sink and engine (`jobscope pg sync`, `jobscope audit
/// --engine postgres`; docs/postgres.md). Unset `conninfo`: PostgreSQL is not used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Postgres {
    /// libpq key=value connection string WITHOUT the password, e.g.
    /// `host=db.example.org port=5432 user=jobscope dbname=jobscope`.
    pub conninfo: Option<String>,
    /// File holding the password (first line), readable by root only.
    pub password_file: Option<PathBuf>,
    /// Connecting gives up after this many seconds.
    pub connect_timeout_s: u64,
    /// Name of this archive's sync checkpoint in the database: one per archive that pushes into
    /// the same database (one per cluster, usually).
    pub source: String,
}

impl Default for Postgres {
    fn default() -> Self {
        Postgres {
            conninfo: None,
            password_file: None,
            connect_timeout_s: 10,
            source: "default".into(),
        }
    }
}

/// GPU sampling (see docs/configuration.md). A node without GPUs or without a driver is normal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Gpu {
    pub enabled: bool,
    /// Sample NVIDIA GPUs through NVML.
    pub nvidia: bool,
    /// The NVML library; unset: `libnvidia-ml.so.1` from the dynamic linker's path.
    pub nvml_lib_path: Option<PathBuf>,
    /// Sample AMD GPUs through amdgpu sysfs.
    pub amd: bool,
    /// gres.conf, to map SLURM's gres indices to device files (identity, not ordinals).
    pub gres_conf: PathBuf,
    /// `ConstrainDevices=yes`: the extern step's NVML sees only the job's GPUs.
    pub constrained_devices: bool,
    /// Deadline of one GPU sample (a slow driver call misses that sample, nothing else).
    pub sample_timeout_s: u64,
    /// How often the GPU monitor drains the driver's utilization sample buffer between two
    /// samples; below the 14 s the buffer holds on an H100, so no sample is lost (docs/gpu.md).
    pub drain_interval_s: u64,
    /// At or below this utilization a GPU counts as idle.
    pub idle_util_pct: f64,
    /// Shortest idle period listed in the report.
    pub idle_min_s: u64,
}

impl Default for Gpu {
    fn default() -> Self {
        Gpu {
            enabled: true,
            nvidia: true,
            nvml_lib_path: None,
            amd: true,
            gres_conf: "/etc/slurm/gres.conf".into(),
            constrained_devices: false,
            sample_timeout_s: 5,
            drain_interval_s: 5,
            idle_util_pct: 5.0,
            idle_min_s: 600,
        }
    }
}

jobscope_model::vocabulary! {
    /// When a job's owner gets the report by mail (`--jobscope-mail=...`, or the site default).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
    pub enum MailPolicy {
        /// No mail.
        Never = "never",
        /// Only when the job did not complete (FAILED, TIMEOUT, OUT_OF_MEMORY, CANCELLED, …).
        Fail = "fail",
        /// At the end of every job, except jobs shorter than `mail.min_elapsed_s` and array tasks
        /// covered by an array digest.
        End = "end",
        /// At the end of every job, short ones and array tasks included.
        Always = "always",
    }
}

impl MailPolicy {
    /// The policy a person wrote (`--jobscope-mail`, `#SBATCH --comment`): any case, blanks
    /// around it ignored.
    pub fn parse(s: &str) -> Option<MailPolicy> {
        <MailPolicy as jobscope_model::vocab::Vocabulary>::parse(s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MailTransportKind {
    Smtp,
    Sendmail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmtpTls {
    None,
    Starttls,
    Tls,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Mail {
    /// Send mail at all (the archive is written either way).
    pub enabled: bool,
    /// Policy for jobs whose user gave neither `--jobscope-mail` nor SLURM's `--mail-type`.
    pub default_policy: MailPolicy,
    /// Sender address.
    pub from: String,
    /// Domain for `<user>@<domain>` and for bare `--mail-user` names. Unset: the user name alone
    /// is not mailed (no guessing).
    pub domain: Option<String>,
    /// Admin template overrides (`subject.hbs`, `report.html.hbs`); a bad one falls back to built-in.
    pub template_dir: Option<PathBuf>,
    /// Node-local durable queue of undelivered mail, root only.
    pub queue_dir: PathBuf,
    pub transport: MailTransportKind,
    /// Seconds the epilog may spend delivering before leaving the rest queued.
    pub flush_budget_s: u64,
    /// Deliveries per second at most.
    pub rate_per_s: f64,
    pub initial_backoff_s: u64,
    pub max_backoff_s: u64,
    /// Undelivered this long after queueing: moved to `dead/` (still in the archive).
    pub max_age_s: u64,
    pub keep_sent_days: u64,
    /// Under `End`, jobs shorter than this get no mail (too short to judge).
    pub min_elapsed_s: u64,
    /// One digest mail per job array when its last task ends, instead of one mail per task.
    pub array_digest: bool,
    /// Sites without mail: also write the text report into the job's working directory, as the
    /// user (`jobscope-<jobid>.txt`; never follows a symlink, never overwrites).
    pub workdir_report: bool,
    pub chart_width: u32,
    pub chart_height: u32,
    pub max_chart_nodes: usize,
    pub smtp: Smtp,
    pub sendmail: Sendmail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Smtp {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    pub user: Option<String>,
    /// File holding the password (root only), rather than the password in this world-readable file.
    pub password_file: Option<PathBuf>,
    pub timeout_s: u64,
    pub ca_file: Option<PathBuf>,
    pub helo_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sendmail {
    pub path: PathBuf,
    pub timeout_s: u64,
}

impl Default for Mail {
    fn default() -> Self {
        Mail {
            enabled: true,
            default_policy: MailPolicy::End,
            from: "jobscope@localhost".into(),
            domain: None,
            template_dir: None,
            queue_dir: "/var/spool/jobscope/mail".into(),
            transport: MailTransportKind::Sendmail,
            flush_budget_s: 3,
            rate_per_s: 5.0,
            initial_backoff_s: 60,
            max_backoff_s: 3600,
            max_age_s: 3 * 86_400,
            keep_sent_days: 30,
            min_elapsed_s: 60,
            array_digest: true,
            workdir_report: false,
            chart_width: 640,
            chart_height: 240,
            max_chart_nodes: 8,
            smtp: Smtp::default(),
            sendmail: Sendmail::default(),
        }
    }
}

impl Default for Smtp {
    fn default() -> Self {
        Smtp {
            host: "localhost".into(),
            port: 25,
            tls: SmtpTls::None,
            user: None,
            password_file: None,
            timeout_s: 10,
            ca_file: None,
            helo_name: None,
        }
    }
}

impl Default for Sendmail {
    fn default() -> Self {
        Sendmail {
            path: "/usr/sbin/sendmail".into(),
            timeout_s: 10,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Paths {
    /// Node-local spool, root only.
    pub spool_dir: PathBuf,
    /// Node-local hand-over from job_prolog to the extern step (tmpfs), root only.
    pub handover_dir: PathBuf,
    /// Node summaries waiting for the job's other nodes. Must be shared by all nodes of a job for
    /// multi-node jobs to get one report (same filesystem as the archive is typical).
    pub state_dir: PathBuf,
    /// The JSON archive.
    pub archive_dir: PathBuf,
    /// Where the epilog logs (it has no terminal; SLURM discards its output).
    pub log_file: PathBuf,
    /// Node-local live snapshots of running jobs (tmpfs): root's directory, one file per job and
    /// node that only the job's owner can read (`jobscope show`/`top` on a running job;
    /// sampler/src/snapshot.rs).
    pub live_dir: PathBuf,
}

/// `[run]`: `jobscope run -- CMD` outside SLURM (docs/run.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Run {
    /// The cluster name runs are archived under (`--archive`), apart from SLURM's clusters.
    pub cluster: String,
    /// The first job id of local runs: ids from here up never clash with SLURM's (at most
    /// 67,108,863 by SLURM's MaxJobId).
    pub first_job_id: u32,
}

impl Default for Run {
    fn default() -> Self {
        Run {
            cluster: "local".into(),
            first_job_id: 3_000_000_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sampler {
    /// Seconds between samples after the early ones.
    pub cadence_s: u32,
    /// Extra samples this many seconds after job start, so short jobs get data.
    pub early_samples_s: Vec<u32>,
    /// Cap for one node-job spool directory.
    pub max_spool_bytes: u64,
    /// Skip spooling (sampling continues in memory) when the spool filesystem has less free space.
    pub min_free_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Archive {
    /// Group that may read the archive (files are 0640 root:<group>).
    pub admin_group: String,
    /// Delete archived summaries older than this many days (`jobscope archive prune`); 0 keeps all.
    pub retention_days: u32,
    /// Seconds to wait for a multi-node job's missing nodes before a partial report is issued.
    pub node_wait_s: u64,
    /// If set, the epilog copies each node's raw spool here before deleting it (debugging, and how
    /// the recorded spools in the test data were captured). Root only; unset on production sites.
    pub keep_spools_dir: Option<PathBuf>,
}

/// `[audit]`: the Parquet index, `jobscope audit`, the peer percentile, history-based advice and
/// the OpenMetrics textfile (docs/audit.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Audit {
    /// Where the Parquet index lives; unset: `<archive_dir>/index`.
    pub index_dir: Option<PathBuf>,
    /// A month of the index with more part files than this is compacted into one.
    pub compact_parts: usize,
    /// An index lock older than this is taken over (its writer died on another host).
    pub lock_stale_s: u64,
    /// A CPU-only job on a GPU partition is marked when the partition had at least this share of
    /// its (observed) cores allocated at the job's start.
    pub busy_pct: f64,
    /// The peer percentile compares a job with its partition's jobs of the last this many days…
    pub peer_window_days: u32,
    /// …and only when at least this many jobs are there (no percentile on thin history).
    pub peer_min_jobs: u32,
    /// History-based advice needs at least this many earlier runs of the same job name.
    pub history_min_runs: u32,
    /// The OpenMetrics textfile written after each index update (node_exporter's textfile
    /// collector); unset: none.
    pub metrics_file: Option<PathBuf>,
    /// Add a `user` label to the metrics (off: only cluster and partition).
    pub metrics_user_label: bool,
}

impl Default for Audit {
    fn default() -> Self {
        Audit {
            index_dir: None,
            compact_parts: 16,
            lock_stale_s: 900,
            busy_pct: 80.0,
            peer_window_days: 30,
            peer_min_jobs: 20,
            history_min_runs: 3,
            metrics_file: None,
            metrics_user_label: false,
        }
    }
}

impl Audit {
    /// The index directory for an archive at `archive_dir`.
    pub fn index_dir(&self, archive_dir: &Path) -> PathBuf {
        self.index_dir
            .clone()
            .unwrap_or_else(|| archive_dir.join("index"))
    }
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            spool_dir: "/var/spool/jobscope".into(),
            handover_dir: "/run/jobscope".into(),
            state_dir: "/var/lib/jobscope/state".into(),
            archive_dir: "/var/lib/jobscope/archive".into(),
            log_file: "/var/log/jobscope/epilog.log".into(),
            live_dir: "/run/jobscope-live".into(),
        }
    }
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler {
            cadence_s: 30,
            early_samples_s: vec![1, 5, 15],
            max_spool_bytes: crate::spool::DEFAULT_MAX_SPOOL_BYTES,
            min_free_bytes: 64 * 1024 * 1024,
        }
    }
}

impl Default for Archive {
    fn default() -> Self {
        Archive {
            admin_group: "root".into(),
            retention_days: 0,
            node_wait_s: 600,
            keep_spools_dir: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// toml's own message spans several lines (a source excerpt with a caret); an admin reading a log
/// or a terminal wants one: `line 2: cadence_s = "thirty": invalid type: string "thirty", expected u32`.
fn one_line_toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let line_no = text[..start].matches('\n').count() + 1;
            let line = text.lines().nth(line_no - 1).unwrap_or("").trim();
            let line: String = line.chars().filter(|c| !c.is_control()).take(80).collect();
            format!("line {line_no}: {line}: {msg}")
        }
        None => msg,
    }
}

impl Config {
    /// Parses and validates config text; `path` is only used in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: path.into(),
            message: one_line_toml_error(text, &e),
        })?;
        c.validate().map_err(|message| ConfigError::Invalid {
            path: path.into(),
            message,
        })?;
        Ok(c)
    }

    /// Loads `path`; a missing file gives the defaults (a node without a config still works).
    /// For the default path only: a path someone named must exist ([`Config::load_named`]).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match Self::load_named(path) {
            Err(ConfigError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(Config::default())
            }
            r => r,
        }
    }

    /// Loads a configuration file someone named (`--config`, `JOBSCOPE_CONFIG`): it must exist and
    /// parse; silently using the defaults instead would report with thresholds nobody chose.
    pub fn load_named(path: &Path) -> Result<Config, ConfigError> {
        match crate::fsutil::read_limited(path, MAX_CONFIG_BYTES) {
            Ok(bytes) => {
                let text = String::from_utf8(bytes).map_err(|_| ConfigError::Invalid {
                    path: path.into(),
                    message: "not UTF-8".into(),
                })?;
                Config::parse(&text, path)
            }
            Err(crate::fsutil::FsError::Io { path, source }) => {
                Err(ConfigError::Io { path, source })
            }
            Err(crate::fsutil::FsError::Unsafe { path, why }) => {
                Err(ConfigError::Invalid { path, message: why })
            }
        }
    }

    fn validate(&self) -> Result<(), String> {
        Label::new(&self.run.cluster).map_err(|e| format!("run.cluster = {e}"))?;
        let s = &self.sampler;
        if !(1..=3600).contains(&s.cadence_s) {
            return Err(format!(
                "sampler.cadence_s = {} is outside 1..=3600",
                s.cadence_s
            ));
        }
        if s.early_samples_s.len() > 16 || s.early_samples_s.iter().any(|&t| t > 3600) {
            return Err("sampler.early_samples_s: at most 16 values, each <= 3600".into());
        }
        if !(16 * 1024..=64 * 1024 * 1024).contains(&s.max_spool_bytes) {
            return Err(format!(
                "sampler.max_spool_bytes = {} is outside 16 KiB..64 MiB",
                s.max_spool_bytes
            ));
        }
        for (name, p) in [
            ("spool_dir", &self.paths.spool_dir),
            ("handover_dir", &self.paths.handover_dir),
            ("state_dir", &self.paths.state_dir),
            ("archive_dir", &self.paths.archive_dir),
            ("log_file", &self.paths.log_file),
            ("live_dir", &self.paths.live_dir),
        ] {
            AbsPath::new(p).map_err(|e| format!("paths.{name} {e}"))?;
        }
        let a = &self.audit;
        for (name, p) in [
            ("index_dir", &a.index_dir),
            ("metrics_file", &a.metrics_file),
        ] {
            if let Some(p) = p {
                AbsPath::new(p).map_err(|e| format!("audit.{name} {e}"))?;
            }
        }
        if !(1..=10_000).contains(&a.compact_parts) {
            return Err(format!(
                "audit.compact_parts = {} is outside 1..=10000",
                a.compact_parts
            ));
        }
        if !(a.busy_pct > 0.0 && a.busy_pct <= 100.0) {
            return Err(format!(
                "audit.busy_pct = {} is outside (0, 100]",
                a.busy_pct
            ));
        }
        if !(1..=3650).contains(&a.peer_window_days) || a.history_min_runs == 0 {
            return Err(
                "audit.peer_window_days must be 1..=3650 and audit.history_min_runs at least 1"
                    .into(),
            );
        }
        // The H100's buffer holds 14 s of samples: a drain at least every 13 s loses none.
        if !(1..=13).contains(&self.gpu.drain_interval_s) {
            return Err(format!(
                "gpu.drain_interval_s = {} is outside 1..=13 (the driver's buffer holds about 14 s)",
                self.gpu.drain_interval_s
            ));
        }
        let r = &self.report;
        for (name, v) in [
            ("cpu_efficiency_warn_pct", r.cpu_efficiency_warn_pct),
            ("mem_efficiency_warn_pct", r.mem_efficiency_warn_pct),
            ("mem_headroom_pct", r.mem_headroom_pct),
            ("time_margin_pct", r.time_margin_pct),
            ("time_efficiency_warn_pct", r.time_efficiency_warn_pct),
            ("near_oom_pct", r.near_oom_pct),
        ] {
            if !(0.0..=1000.0).contains(&v) {
                return Err(format!("report.{name} = {v} is outside 0..1000"));
            }
        }
        if !self
            .archive
            .admin_group
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            || self.archive.admin_group.is_empty()
        {
            return Err(format!(
                "archive.admin_group {:?} is not a valid group name",
                self.archive.admin_group
            ));
        }
        let pg = &self.postgres;
        if let Some(p) = &pg.password_file {
            AbsPath::new(p).map_err(|e| format!("postgres.password_file {e}"))?;
        }
        if !(1..=300).contains(&pg.connect_timeout_s) {
            return Err(format!(
                "postgres.connect_timeout_s = {} is outside 1..=300",
                pg.connect_timeout_s
            ));
        }
        Label::source(&pg.source).map_err(|e| format!("postgres.source {e}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abs_path_accepts_absolute_paths_and_refuses_relative_or_dot_dot() {
        for ok in ["/", "/var/spool/jobscope", "/a/./b", "/a..b/c.."] {
            assert_eq!(&*AbsPath::new(ok).unwrap(), Path::new(ok));
        }
        for bad in ["", "relative", "./x", "../x", "/var/../etc", "/a/b/.."] {
            let e = AbsPath::new(bad).unwrap_err().to_string();
            assert_eq!(e, format!("must be an absolute path without '..': {bad}"));
        }
    }

    #[test]
    fn label_accepts_1_to_64_of_its_characters_and_refuses_others() {
        let max = "a".repeat(64);
        for ok in ["local", "cluster-A_9", "x", max.as_str()] {
            assert_eq!(Label::new(ok).unwrap().as_str(), ok);
        }
        let over = "a".repeat(65);
        for bad in ["", "a.b", "a b", "a/b", "..", "é", "x\n", over.as_str()] {
            let e = Label::new(bad).unwrap_err().to_string();
            assert_eq!(e, format!("{bad:?}: 1 to 64 of A-Z a-z 0-9 _ -"));
        }
        // postgres.source: the same, and dots.
        assert_eq!(Label::source("site.a").unwrap().as_str(), "site.a");
        assert!(Label::source("a b")
            .unwrap_err()
            .to_string()
            .ends_with("_ - ."));
        assert!(Label::source(&over).is_err());
    }

    #[test]
    fn label_sanitised_replaces_and_cuts() {
        assert_eq!(
            Label::sanitised("my cluster/../x").unwrap().as_str(),
            "my_cluster____x"
        );
        assert_eq!(Label::sanitised("é").unwrap().as_str(), "_");
        assert_eq!(
            Label::sanitised(&"b".repeat(70)).unwrap().as_str(),
            "b".repeat(64)
        );
        assert_eq!(Label::sanitised(""), None);
    }

    #[test]
    fn path_and_label_keys_are_refused_in_one_line_naming_the_key() {
        for (toml, key) in [
            (
                "[paths]\nspool_dir = \"/var/../x\"",
                "paths.spool_dir must be",
            ),
            ("[audit]\nindex_dir = \"idx\"", "audit.index_dir must be"),
            (
                "[postgres]\npassword_file = \"pw\"",
                "postgres.password_file must be",
            ),
            ("[run]\ncluster = \"a.b\"", "run.cluster = \"a.b\""),
            ("[postgres]\nsource = \"a b\"", "postgres.source \"a b\""),
        ] {
            let e = Config::parse(toml, Path::new("c")).unwrap_err().to_string();
            assert!(e.contains(key), "{toml}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let ok = "[run]\ncluster = \"c-1\"\n[postgres]\nsource = \"site.a\"";
        Config::parse(ok, Path::new("c")).unwrap();
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(
            Config::parse("", Path::new("c")).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn values_are_read() {
        let c = Config::parse(
            "[sampler]\ncadence_s = 5\n[archive]\nadmin_group = \"hpcadm\"\n",
            Path::new("c"),
        )
        .unwrap();
        assert_eq!(c.sampler.cadence_s, 5);
        assert_eq!(c.archive.admin_group, "hpcadm");
        assert_eq!(c.sampler.early_samples_s, vec![1, 5, 15]);
    }

    #[test]
    fn bad_input_is_a_clear_error_with_path() {
        for (text, needle) in [
            ("[sampler]\ncadense_s = 5\n", "cadense_s"),
            ("[sampler]\ncadence_s = 0\n", "cadence_s"),
            ("[paths]\nspool_dir = \"../x\"\n", "spool_dir"),
            ("[paths]\narchive_dir = \"/a/../../etc\"\n", "archive_dir"),
            ("[archive]\nadmin_group = \"x;rm -rf\"\n", "admin_group"),
            ("not toml [", "/etc/x.toml"),
        ] {
            let e = Config::parse(text, Path::new("/etc/x.toml"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(needle) && e.contains("/etc/x.toml"),
                "{text:?} -> {e}"
            );
        }
    }

    #[test]
    fn missing_file_is_defaults() {
        assert_eq!(
            Config::load(Path::new("/nonexistent/jobscope.toml")).unwrap(),
            Config::default()
        );
    }

    #[test]
    fn a_named_file_must_exist_and_parse() {
        let e = Config::load_named(Path::new("/nonexistent/jobscope.toml")).unwrap_err();
        assert!(
            e.to_string().starts_with("/nonexistent/jobscope.toml: "),
            "{e}"
        );
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j.toml");
        std::fs::write(&p, "[sampler]\ncadence_s = \"thirty\"\n").unwrap();
        let e = Config::load_named(&p).unwrap_err().to_string();
        assert!(
            e.contains("j.toml") && e.contains("cadence_s") && !e.contains('\n'),
            "{e}"
        );
        std::fs::write(&p, "[sampler]\ncadence_s = 10\n").unwrap();
        assert_eq!(Config::load_named(&p).unwrap().sampler.cadence_s, 10);
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;

    /// The shipped example and test-cluster configs must parse, and the example must state the defaults.
    #[test]
    fn shipped_configs_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../slurm-conf");
        let example = std::fs::read_to_string(format!("{dir}/examples/jobscope.toml")).unwrap();
        assert_eq!(
            Config::parse(&example, Path::new("example")).unwrap(),
            Config::default()
        );
        let test = std::fs::read_to_string(format!("{dir}/jobscope.toml")).unwrap();
        assert_eq!(
            Config::parse(&test, Path::new("test"))
                .unwrap()
                .sampler
                .cadence_s,
            5
        );
    }
}
