//! jobscope-config: the site configuration file (`/etc/jobscope/jobscope.toml`), read by every
//! stage (the plugin, the Epilog, the commands).
//!
//! Every key is optional; see docs/configuration.md for the reference. Unknown keys are an error, so a
//! typo does not silently fall back to a default.

use jobscope_model::text::{escape_hidden, quoted};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use jobscope_model::params::Report;

pub const DEFAULT_CONFIG_PATH: &str = "/etc/jobscope/jobscope.toml";
/// A config file larger than this is refused (it is read by root inside slurmstepd).
const MAX_CONFIG_BYTES: u64 = 256 * 1024;

/// A path the configuration or the plugstack line names: absolute and without `..`, so that what
/// root opens does not depend on its current directory and cannot climb out of the directory an
/// admin reviewed. THE check for every path value (docs/configuration.md says so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbsPath(PathBuf);

/// The most characters of a refused value a message echoes (it is quoted and escaped: [`quoted`]).
pub const ECHO_CHARS: usize = 300;

/// Why a value was refused, one line: the value [`quoted`], so that a CR, LF, ESC or bidi
/// override in it shows escaped instead of breaking the line or the terminal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("must be an absolute path without '..': {}", quoted(.0, ECHO_CHARS))]
    NotAbsolute(String),
    #[error("{}: 1 to {MAX_LABEL_CHARS} of A-Z a-z 0-9 _ -{}", quoted(.0, ECHO_CHARS), .1)]
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

/// Read from the configuration, a path is an [`AbsPath`] or the file is refused: the check is the
/// type's, made while the file is parsed.
impl<'de> Deserialize<'de> for AbsPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AbsPath, D::Error> {
        AbsPath::new(PathBuf::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// The path keys of the configuration, read through [`AbsPath`] (`#[serde(deserialize_with)]`):
/// the fields stay `PathBuf`s for the code that uses and sets them.
mod abs_path {
    use super::AbsPath;
    use serde::{Deserialize, Deserializer};
    use std::path::PathBuf;

    pub fn required<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        AbsPath::deserialize(d).map(AbsPath::into_path_buf)
    }

    pub fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
        Ok(Option::<AbsPath>::deserialize(d)?.map(AbsPath::into_path_buf))
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
    pub alerts: Alerts,
    pub report: Report,
    pub mail: Mail,
    pub gpu: Gpu,
    pub postgres: Postgres,
    pub transport: Transport,
    pub run: Run,
    pub watch: Watch,
}

/// How a multi-node job's node summaries reach the one place that makes its report
/// (docs/cluster.md: the three modes and which one to choose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportMode {
    /// Nothing is shared between nodes: a one-node job is reported by its node; a multi-node job
    /// by its first node alone, with that node's figures and a note naming the nodes it could not
    /// see. Never one report per node.
    #[default]
    None,
    /// Every node of a job writes its summary into `paths.state_dir`, which all nodes share and
    /// whose root may write there (one host, or a small site's export without root squash); the
    /// last node makes the report.
    SharedDir,
    /// Each node inserts its summary into PostgreSQL (a role that may only insert); the
    /// collector service on one host makes every report (`jobscope collect`).
    Postgres,
}

impl TransportMode {
    /// The mode's name as the configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportMode::None => "none",
            TransportMode::SharedDir => "shared_dir",
            TransportMode::Postgres => "postgres",
        }
    }
}

/// `[watch]`: rules over running jobs (docs/watch.md), run on each node by `jobscope watch`.
/// Off unless the site turns it on, and a dry run until it says otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Watch {
    /// Whether `jobscope watch` acts at all (the service refuses to start without it).
    pub enabled: bool,
    /// List what would be done; mail nothing, cancel nothing, record nothing.
    pub dry_run: bool,
    /// Seconds between passes of `jobscope watch`.
    pub interval_s: u64,
    /// The most seconds one `scancel` or `scontrol` may take.
    pub slurm_timeout_s: u64,
    #[serde(rename = "rule")]
    pub rules: Vec<jobscope_model::watch::Rule>,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            enabled: false,
            dry_run: true,
            interval_s: 60,
            slurm_timeout_s: 10,
            rules: Vec::new(),
        }
    }
}

impl Watch {
    fn validate(&self) -> Result<(), String> {
        let mut names = std::collections::BTreeSet::new();
        for r in &self.rules {
            r.validate()?;
            if !names.insert(r.name.as_str()) {
                return Err(format!("watch.rule {:?} is named twice", r.name));
            }
        }
        if self.enabled && self.rules.is_empty() {
            return Err("watch.enabled = true needs at least one [[watch.rule]]".into());
        }
        Ok(())
    }
}

/// `[transport]`: how node summaries travel (docs/cluster.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Transport {
    pub mode: TransportMode,
    /// Node-local: summaries the transport has not confirmed yet; `jobscope reap` retries them.
    #[serde(deserialize_with = "abs_path::required")]
    pub outbox_dir: PathBuf,
    /// The most seconds an Epilog spends sending its summary (then it leaves it in the outbox).
    pub send_budget_s: u64,
    /// `jobscope reap` waits a random 0 to this many seconds before it retries the outbox, so
    /// that the nodes of a cluster whose database was down do not all reconnect at once.
    pub retry_jitter_s: u64,
    /// Seconds between the collector's passes (`jobscope collect`).
    pub collect_interval_s: u64,
    /// The node's connection (mode `postgres`): a role that may only insert node summaries
    /// (`jobscope pg node-role`). The collector connects with `[postgres]`.
    pub postgres: Postgres,
}

impl Default for Transport {
    fn default() -> Self {
        Transport {
            mode: TransportMode::None,
            outbox_dir: "/var/lib/jobscope/outbox".into(),
            send_budget_s: 5,
            retry_jitter_s: 30,
            collect_interval_s: 5,
            postgres: Postgres {
                connect_timeout_s: 3,
                ..Postgres::default()
            },
        }
    }
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
    #[serde(default, deserialize_with = "abs_path::optional")]
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
    #[serde(default, deserialize_with = "abs_path::optional")]
    pub nvml_lib_path: Option<PathBuf>,
    /// Read SM activity from DCGM's host engine for GPUs whose NVML has no GPM (before Hopper),
    /// where the site runs `nv-hostengine` (docs/gpu.md).
    pub dcgm: bool,
    /// DCGM's client library; unset: `libdcgm.so.4`, else `.3`, from the dynamic linker's path.
    #[serde(default, deserialize_with = "abs_path::optional")]
    pub dcgm_lib_path: Option<PathBuf>,
    /// The host engine: `127.0.0.1` (port 5555), `host:port`, or a Unix socket's absolute path.
    pub dcgm_address: String,
    /// Sample AMD GPUs through amdgpu sysfs.
    pub amd: bool,
    /// gres.conf, to map SLURM's gres indices to device files (identity, not ordinals).
    #[serde(deserialize_with = "abs_path::required")]
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
            dcgm: true,
            dcgm_lib_path: None,
            dcgm_address: "127.0.0.1".into(),
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
    #[serde(default, deserialize_with = "abs_path::optional")]
    pub template_dir: Option<PathBuf>,
    /// Node-local durable queue of undelivered mail, root only.
    #[serde(deserialize_with = "abs_path::required")]
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
    #[serde(default, deserialize_with = "abs_path::optional")]
    pub password_file: Option<PathBuf>,
    pub timeout_s: u64,
    #[serde(default, deserialize_with = "abs_path::optional")]
    pub ca_file: Option<PathBuf>,
    pub helo_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sendmail {
    #[serde(deserialize_with = "abs_path::required")]
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
    #[serde(deserialize_with = "abs_path::required")]
    pub spool_dir: PathBuf,
    /// Node-local hand-over from job_prolog to the extern step (tmpfs), root only.
    #[serde(deserialize_with = "abs_path::required")]
    pub handover_dir: PathBuf,
    /// Per-job state: the node summaries waiting for the job's other nodes and the markers of
    /// archived runs. Node-local, except in `transport.mode = "shared_dir"`, where every node of
    /// a job must share it (docs/cluster.md).
    #[serde(deserialize_with = "abs_path::required")]
    pub state_dir: PathBuf,
    /// The JSON archive.
    #[serde(deserialize_with = "abs_path::required")]
    pub archive_dir: PathBuf,
    /// Where the epilog logs (it has no terminal; SLURM discards its output).
    #[serde(deserialize_with = "abs_path::required")]
    pub log_file: PathBuf,
    /// Node-local live snapshots of running jobs (tmpfs): root's directory, one file per job and
    /// node that only the job's owner can read (`jobscope show`/`top` on a running job;
    /// sampler/src/snapshot.rs).
    #[serde(deserialize_with = "abs_path::required")]
    pub live_dir: PathBuf,
    /// The `jobscope` command the plugin runs as root at the batch script's end where
    /// `[report] admin_comment` is on (`plugin/src/admin_comment.rs`): root's alone or not run.
    #[serde(deserialize_with = "abs_path::required")]
    pub cli: PathBuf,
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
    #[serde(default, deserialize_with = "abs_path::optional")]
    pub keep_spools_dir: Option<PathBuf>,
}

/// `[audit]`: the Parquet index, `jobscope audit`, the peer percentile, history-based advice and
/// the OpenMetrics textfile (docs/audit.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Audit {
    /// Where the Parquet index lives; unset: `<archive_dir>/index`.
    #[serde(default, deserialize_with = "abs_path::optional")]
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
    #[serde(default, deserialize_with = "abs_path::optional")]
    pub metrics_file: Option<PathBuf>,
    /// Add a `user` label to the metrics (off: only cluster and partition).
    pub metrics_user_label: bool,
    /// Who gets the cluster report (`jobscope audit report --mail`, the weekly timer): bare
    /// addresses; empty: nobody, and the timer does nothing.
    pub report_to: Vec<String>,
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
            report_to: Vec::new(),
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

/// `[alerts]`: rules over each user's jobs in the index, each off until an admin enables it, and
/// the mail that tells the user (`jobscope alerts`; docs/audit.md "Alerts"). A user gets at most one
/// alert mail per `period_days`, listing every rule that fired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Alerts {
    /// At most one alert mail per user per this many days (periods of whole days from a Monday
    /// 00:00 UTC).
    pub period_days: u32,
    /// A summary of each `jobscope alerts send` (who was mailed, which rules, the waste) goes to
    /// this address; unset: none.
    pub admin_to: Option<String>,
    /// A rule's table in a mail lists at most this many jobs (the most wasteful first); the rest
    /// are counted.
    pub max_jobs_listed: u32,
    pub gpu_idle: GpuIdleRule,
    pub cpu_efficiency: CpuEfficiencyRule,
    pub mem_request: MemRequestRule,
    pub timeouts: TimeoutsRule,
    pub cpu_on_gpu: CpuOnGpuRule,
}

impl Default for Alerts {
    fn default() -> Self {
        Alerts {
            period_days: 7,
            admin_to: None,
            max_jobs_listed: 20,
            gpu_idle: GpuIdleRule::default(),
            cpu_efficiency: CpuEfficiencyRule::default(),
            mem_request: MemRequestRule::default(),
            timeouts: TimeoutsRule::default(),
            cpu_on_gpu: CpuOnGpuRule::default(),
        }
    }
}

/// `[alerts.gpu_idle]`: GPUs idle or never used (the jobs `jobscope audit gpu-idle` lists) for at
/// least `min_gpu_hours` GPU-hours in all over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuIdleRule {
    pub enabled: bool,
    pub window_days: u32,
    pub min_gpu_hours: f64,
}

impl Default for GpuIdleRule {
    fn default() -> Self {
        GpuIdleRule {
            enabled: false,
            window_days: 7,
            min_gpu_hours: 4.0,
        }
    }
}

/// `[alerts.cpu_efficiency]`: at least `min_jobs` jobs of at least `min_core_hours` core-hours
/// each whose CPU efficiency was under `max_cpu_eff_pct` over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CpuEfficiencyRule {
    pub enabled: bool,
    pub window_days: u32,
    pub max_cpu_eff_pct: f64,
    pub min_jobs: u32,
    pub min_core_hours: f64,
}

impl Default for CpuEfficiencyRule {
    fn default() -> Self {
        CpuEfficiencyRule {
            enabled: false,
            window_days: 7,
            max_cpu_eff_pct: 25.0,
            min_jobs: 3,
            min_core_hours: 1.0,
        }
    }
}

/// `[alerts.mem_request]`: at least `min_jobs` jobs over the window that asked for at least
/// `min_ratio` times the 95th percentile of the memory peak of the user's earlier runs of the same
/// batch script (else of the same name: the end-of-job advice's history, `audit.history_min_runs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemRequestRule {
    pub enabled: bool,
    pub window_days: u32,
    pub min_ratio: f64,
    pub min_jobs: u32,
}

impl Default for MemRequestRule {
    fn default() -> Self {
        MemRequestRule {
            enabled: false,
            window_days: 7,
            min_ratio: 4.0,
            min_jobs: 3,
        }
    }
}

/// `[alerts.timeouts]`: at least `min_jobs` jobs that ended TIMEOUT over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutsRule {
    pub enabled: bool,
    pub window_days: u32,
    pub min_jobs: u32,
}

impl Default for TimeoutsRule {
    fn default() -> Self {
        TimeoutsRule {
            enabled: false,
            window_days: 7,
            min_jobs: 3,
        }
    }
}

/// `[alerts.cpu_on_gpu]`: at least `min_jobs` jobs of at least `min_core_hours` core-hours each
/// without GPUs on a GPU partition while it was busy (`jobscope audit cpu-on-gpu`, `audit.busy_pct`)
/// over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CpuOnGpuRule {
    pub enabled: bool,
    pub window_days: u32,
    pub min_jobs: u32,
    pub min_core_hours: f64,
}

impl Default for CpuOnGpuRule {
    fn default() -> Self {
        CpuOnGpuRule {
            enabled: false,
            window_days: 7,
            min_jobs: 3,
            min_core_hours: 1.0,
        }
    }
}

impl Alerts {
    /// The longest window of the enabled rules, in days (0 when none is enabled).
    pub fn longest_window_days(&self) -> u32 {
        [
            (self.gpu_idle.enabled, self.gpu_idle.window_days),
            (self.cpu_efficiency.enabled, self.cpu_efficiency.window_days),
            (self.mem_request.enabled, self.mem_request.window_days),
            (self.timeouts.enabled, self.timeouts.window_days),
            (self.cpu_on_gpu.enabled, self.cpu_on_gpu.window_days),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, d)| *d)
        .max()
        .unwrap_or(0)
    }

    /// Every `[alerts]` number's range (called by [`Config::validate`]; docs/configuration.md
    /// lists the same ranges).
    fn validate(&self) -> Result<(), String> {
        const MOST_DAYS: u64 = 366;
        let ints: [(&str, u32, u64, u64); 11] = [
            ("alerts.period_days", self.period_days, 1, MOST_DAYS),
            ("alerts.max_jobs_listed", self.max_jobs_listed, 1, 10_000),
            (
                "alerts.gpu_idle.window_days",
                self.gpu_idle.window_days,
                1,
                MOST_DAYS,
            ),
            (
                "alerts.cpu_efficiency.window_days",
                self.cpu_efficiency.window_days,
                1,
                MOST_DAYS,
            ),
            (
                "alerts.cpu_efficiency.min_jobs",
                self.cpu_efficiency.min_jobs,
                1,
                1_000_000,
            ),
            (
                "alerts.mem_request.window_days",
                self.mem_request.window_days,
                1,
                MOST_DAYS,
            ),
            (
                "alerts.mem_request.min_jobs",
                self.mem_request.min_jobs,
                1,
                1_000_000,
            ),
            (
                "alerts.timeouts.window_days",
                self.timeouts.window_days,
                1,
                MOST_DAYS,
            ),
            (
                "alerts.timeouts.min_jobs",
                self.timeouts.min_jobs,
                1,
                1_000_000,
            ),
            (
                "alerts.cpu_on_gpu.window_days",
                self.cpu_on_gpu.window_days,
                1,
                MOST_DAYS,
            ),
            (
                "alerts.cpu_on_gpu.min_jobs",
                self.cpu_on_gpu.min_jobs,
                1,
                1_000_000,
            ),
        ];
        for (key, v, lo, hi) in ints {
            if !(lo..=hi).contains(&u64::from(v)) {
                return Err(format!("{key} = {v} is outside {lo}..={hi}"));
            }
        }
        let floats: [(&str, f64, f64, f64); 5] = [
            // Above 0: a threshold of nothing would call one idle second an alert.
            (
                "alerts.gpu_idle.min_gpu_hours",
                self.gpu_idle.min_gpu_hours,
                0.001,
                1e6,
            ),
            (
                "alerts.cpu_efficiency.max_cpu_eff_pct",
                self.cpu_efficiency.max_cpu_eff_pct,
                0.001,
                100.0,
            ),
            (
                "alerts.cpu_efficiency.min_core_hours",
                self.cpu_efficiency.min_core_hours,
                0.0,
                1e6,
            ),
            // At least 1: asking for less than the peak is no over-request.
            (
                "alerts.mem_request.min_ratio",
                self.mem_request.min_ratio,
                1.0,
                1000.0,
            ),
            (
                "alerts.cpu_on_gpu.min_core_hours",
                self.cpu_on_gpu.min_core_hours,
                0.0,
                1e6,
            ),
        ];
        for (key, v, lo, hi) in floats {
            if !(v.is_finite() && lo <= v && v <= hi) {
                return Err(format!("{key} = {v:?} is outside {lo:?}..={hi:?}"));
            }
        }
        if let Some(to) = &self.admin_to {
            // The address itself is parsed where the mail is built (jobscope_deliver); here only
            // what can never be one.
            if to.trim().is_empty()
                || to.chars().any(jobscope_model::text::is_hidden)
                || !to.contains('@')
                || to.len() > 254
            {
                return Err(format!(
                    "alerts.admin_to = {} is not a mail address (local@domain)",
                    quoted(to, ECHO_CHARS)
                ));
            }
        }
        Ok(())
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
            cli: "/usr/bin/jobscope".into(),
        }
    }
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler {
            cadence_s: 30,
            early_samples_s: vec![1, 5, 15],
            max_spool_bytes: jobscope_model::spool::DEFAULT_MAX_SPOOL_BYTES,
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

/// A configuration error, one line: the file's path and every value it echoes escaped
/// ([`escape_hidden`], [`quoted`]), whatever characters they hold.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: {source}", escape_hidden(&path.to_string_lossy()))]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {}", escape_hidden(&path.to_string_lossy()), escape_hidden(message))]
    Invalid { path: PathBuf, message: String },
}

/// toml's own message spans several lines (a source excerpt with a caret); an admin reading a log
/// or a terminal wants one: `line 2: sampler.cadence_s = "thirty": invalid type: string "thirty",
/// expected u32`, the line's key named in full ([`qualified_line`]). The line's text and toml's
/// words (which may name a key as written) are escaped.
fn one_line_toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = escape_hidden(e.message().trim()).into_owned();
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let line_no = text[..start].matches('\n').count() + 1;
            let line = qualified_line(text, line_no);
            let line: String = line.chars().take(80).collect();
            format!("line {line_no}: {}: {msg}", escape_hidden(&line))
        }
        None => msg,
    }
}

/// The least and the most seconds between two samples (`sampler.cadence_s`, the plugstack's
/// `cadence=`, `jobscope run --cadence`): every reader of a cadence holds it to this one range.
pub const CADENCE_S: std::ops::RangeInclusive<u32> = 1..=3600;

/// [`CADENCE_S`] as `u64`s (the integer checks' unit).
fn cadence_s_u64() -> std::ops::RangeInclusive<u64> {
    u64::from(*CADENCE_S.start())..=u64::from(*CADENCE_S.end())
}

/// `(key, value as u64, least, most)` for an integer key, the key's name spelled from the field
/// read, so the name in a message cannot drift from the value checked.
macro_rules! int {
    ($c:ident . $($f:ident).+, $range:expr) => {{
        let r: std::ops::RangeInclusive<u64> = $range;
        (stringify!($($f).+), $c.$($f).+ as u64, *r.start(), *r.end())
    }};
}

/// `(key, value, least, most)` for a float key, named as [`int!`] names it.
macro_rules! float {
    ($c:ident . $($f:ident).+, $lo:expr, $hi:expr) => {
        (stringify!($($f).+), $c.$($f).+, $lo, $hi)
    };
}

/// `key = v is outside lo..=hi` unless it is within.
fn check_int(key: &str, v: u64, lo: u64, hi: u64) -> Result<(), String> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(format!("{key} = {v} is outside {lo}..={hi}"))
    }
}

/// `key = v is outside lo..=hi` unless it is finite and within.
fn check_float(key: &str, v: f64, lo: f64, hi: f64) -> Result<(), String> {
    if v.is_finite() && lo <= v && v <= hi {
        Ok(())
    } else {
        // `{:?}`: 1e-300 as written, not three hundred zeros.
        Err(format!("{key} = {v:?} is outside {lo:?}..={hi:?}"))
    }
}

/// `archive.admin_group`: a group name (`A-Z a-z 0-9 _ - .`, not empty).
fn check_group_name(group: &str) -> Result<(), String> {
    if group.is_empty()
        || !group
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        return Err(format!(
            "archive.admin_group {} is not a valid group name",
            quoted(group, ECHO_CHARS)
        ));
    }
    Ok(())
}

/// Line `line_no` (from 1) of `text`, trimmed; a `key = value` line under a `[table]` header with
/// its key named in full (`port = 0` under `[mail.smtp]`: `mail.smtp.port = 0`), so a message
/// names the key whichever table it is in.
fn qualified_line(text: &str, line_no: usize) -> String {
    let line = text
        .lines()
        .nth(line_no.saturating_sub(1))
        .unwrap_or("")
        .trim();
    let bare_key = |k: &str| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    };
    let is_pair = line
        .split_once('=')
        .is_some_and(|(k, _)| bare_key(k.trim()));
    let table = text
        .lines()
        .take(line_no.saturating_sub(1))
        .map(str::trim)
        .filter(|l| l.starts_with('['))
        .last()
        .and_then(|h| h.trim_start_matches('[').split(']').next())
        .map(str::trim)
        .filter(|t| bare_key(t));
    match table {
        Some(t) if is_pair => format!("{t}.{line}"),
        _ => line.to_string(),
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

    /// The configuration of a command or of the Epilog: a file someone named must exist and parse
    /// ([`Config::load_named`]); the default path may be absent ([`Config::load`]: then the
    /// defaults apply, as on a node without a config).
    pub fn load_given(named: Option<&Path>) -> Result<Config, ConfigError> {
        match named {
            Some(p) => Config::load_named(p),
            None => Config::load(Path::new(DEFAULT_CONFIG_PATH)),
        }
    }

    /// Loads a configuration file someone named (`--config`, `JOBSCOPE_CONFIG`): it must exist and
    /// parse; silently using the defaults instead would report with thresholds nobody chose.
    pub fn load_named(path: &Path) -> Result<Config, ConfigError> {
        match jobscope_common::fsutil::read_limited(path, MAX_CONFIG_BYTES) {
            Ok(bytes) => {
                let text = String::from_utf8(bytes).map_err(|_| ConfigError::Invalid {
                    path: path.into(),
                    message: "not UTF-8".into(),
                })?;
                Config::parse(&text, path)
            }
            Err(jobscope_common::fsutil::FsError::Io { path, source }) => {
                Err(ConfigError::Io { path, source })
            }
            Err(jobscope_common::fsutil::FsError::Unsafe { path, why }) => {
                Err(ConfigError::Invalid { path, message: why })
            }
        }
    }

    /// Every numeric key's range and every name's form, checked here once, at parse time (a path
    /// key's form is its type's, [`AbsPath`], checked as it is read), so that no value reaches arithmetic that would panic or wrap (`Duration::from_secs_f64(1 /
    /// 1e-300)`, `keep_sent_days * 86_400`) and a typo is one line naming the key, the value and
    /// the range. docs/configuration.md lists the same ranges; the test
    /// `every_numeric_and_path_key_is_bounded` holds every key to them.
    fn validate(&self) -> Result<(), String> {
        Label::new(&self.run.cluster).map_err(|e| format!("run.cluster = {e}"))?;
        self.check_integers()?;
        self.check_floats()?;
        check_group_name(&self.archive.admin_group)?;
        Label::source(&self.postgres.source).map_err(|e| format!("postgres.source {e}"))?;
        if self.transport.mode == TransportMode::Postgres
            && self.transport.postgres.conninfo.is_none()
        {
            return Err("transport.mode = \"postgres\" needs transport.postgres.conninfo (the node role's connection)".into());
        }
        check_report_to(&self.audit.report_to)?;
        check_dcgm_address(&self.gpu.dcgm_address)?;
        self.alerts.validate()?;
        self.watch.validate()?;
        Ok(())
    }

    /// Every integer key's range, the early samples' and the backoffs' order.
    fn check_integers(&self) -> Result<(), String> {
        const DAY: u64 = 86_400;
        const YEAR: u64 = 365 * DAY;
        const MANY_CALLS: u64 = 1_000_000_000_000;
        let c = self;
        // (key, value, least, most).
        let ints: [(&str, u64, u64, u64); 38] = [
            int!(c.sampler.cadence_s, cadence_s_u64()),
            int!(c.watch.interval_s, 5..=DAY),
            int!(c.watch.slurm_timeout_s, 1..=600),
            int!(c.sampler.max_spool_bytes, 16 * 1024..=64 * 1024 * 1024),
            // A floor above the filesystem's size turns spooling off (a test of the floor does).
            int!(c.sampler.min_free_bytes, 0..=1 << 60),
            int!(c.archive.retention_days, 0..=36_500),
            int!(c.archive.node_wait_s, 0..=7 * DAY),
            int!(c.audit.compact_parts, 1..=10_000),
            int!(c.audit.lock_stale_s, 1..=7 * DAY),
            int!(c.audit.peer_window_days, 1..=3650),
            int!(c.audit.peer_min_jobs, 1..=1_000_000),
            int!(c.audit.history_min_runs, 1..=10_000),
            int!(c.report.min_elapsed_for_advice_s, 0..=YEAR),
            int!(c.report.idle_phase_min_s, 1..=YEAR),
            int!(c.report.lock_min_calls, 1..=MANY_CALLS),
            int!(c.report.small_io_warn_calls, 1..=MANY_CALLS),
            int!(c.mail.flush_budget_s, 0..=3600),
            int!(c.mail.initial_backoff_s, 1..=DAY),
            int!(c.mail.max_backoff_s, 1..=30 * DAY),
            int!(c.mail.max_age_s, 1..=YEAR),
            int!(c.mail.keep_sent_days, 0..=3650),
            int!(c.mail.min_elapsed_s, 0..=YEAR),
            int!(c.mail.chart_width, 64..=4096),
            int!(c.mail.chart_height, 32..=4096),
            int!(c.mail.max_chart_nodes, 0..=1024),
            int!(c.mail.smtp.port, 1..=65_535),
            int!(c.mail.smtp.timeout_s, 1..=600),
            int!(c.mail.sendmail.timeout_s, 1..=600),
            // The H100's buffer holds 14 s of samples: a drain at least every 13 s loses none.
            int!(c.gpu.drain_interval_s, 1..=13),
            int!(c.gpu.sample_timeout_s, 1..=60),
            int!(c.gpu.idle_min_s, 0..=YEAR),
            int!(c.postgres.connect_timeout_s, 1..=300),
            int!(c.transport.send_budget_s, 1..=60),
            int!(c.transport.retry_jitter_s, 0..=3600),
            int!(c.transport.collect_interval_s, 1..=3600),
            int!(c.transport.postgres.connect_timeout_s, 1..=60),
            // Above SLURM's largest MaxJobId (67,108,863), with room below u32::MAX to count.
            int!(c.run.first_job_id, 67_108_864..=4_000_000_000),
            (
                concat!(stringify!(sampler.early_samples_s), " (count)"),
                c.sampler.early_samples_s.len() as u64,
                0,
                16,
            ),
        ];
        for (key, v, lo, hi) in ints {
            check_int(key, v, lo, hi)?;
        }
        // An early sample after the latest a cadence can be is no early sample.
        for &t in &c.sampler.early_samples_s {
            check_int(
                "sampler.early_samples_s",
                t.into(),
                0,
                (*CADENCE_S.end()).into(),
            )?;
        }
        let m = &c.mail;
        if m.max_backoff_s < m.initial_backoff_s {
            return Err(format!(
                "mail.max_backoff_s = {} is below mail.initial_backoff_s = {}",
                m.max_backoff_s, m.initial_backoff_s
            ));
        }
        Ok(())
    }

    /// Every float key's range: finite (NaN and infinities are outside every range).
    fn check_floats(&self) -> Result<(), String> {
        let c = self;
        // (key, value, least, most).
        let floats: [(&str, f64, f64, f64); 12] = [
            float!(c.report.cpu_efficiency_warn_pct, 0.0, 1000.0),
            float!(c.report.mem_efficiency_warn_pct, 0.0, 1000.0),
            float!(c.report.mem_headroom_pct, 0.0, 1000.0),
            float!(c.report.time_margin_pct, 0.0, 1000.0),
            float!(c.report.time_efficiency_warn_pct, 0.0, 1000.0),
            float!(c.report.near_oom_pct, 0.0, 1000.0),
            float!(c.report.stall_warn_pct, 0.0, 100.0),
            float!(c.report.cpu_wait_warn_pct, 0.0, 100.0),
            float!(c.report.lock_share_warn_pct, 0.0, 100.0),
            float!(c.gpu.idle_util_pct, 0.0, 100.0),
            // Above 0: a share of zero would mark every partition busy.
            float!(c.audit.busy_pct, 0.001, 100.0),
            // 0 is "no limit"; below one attempt in 1000 s a flush would wait for ever.
            float!(c.mail.rate_per_s, 0.0, 1000.0),
        ];
        for (key, v, lo, hi) in floats {
            check_float(key, v, lo, hi)?;
        }
        let rate = c.mail.rate_per_s;
        if rate != 0.0 && rate < 0.001 {
            return Err(format!(
                "mail.rate_per_s = {rate:?} is outside 0 (no limit) or 0.001..=1000"
            ));
        }
        Ok(())
    }
}

/// `gpu.dcgm_address`: what `dcgmConnect_v2` takes, a host (with a port) or a socket path: at
/// most 255 bytes of printable ASCII, no blank.
fn check_dcgm_address(a: &str) -> Result<(), String> {
    if a.is_empty() || a.len() > 255 || !a.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "gpu.dcgm_address {} is not a host, host:port or socket path (printable ASCII, no blank, at most 255 bytes)",
            quoted(a, ECHO_CHARS)
        ));
    }
    Ok(())
}

/// The most addresses `audit.report_to` takes (a list for a team, not a mailing list).
pub const MAX_REPORT_TO: usize = 100;

/// `audit.report_to`: bare addresses (`local@domain`, no display name, at most 254 bytes, no
/// space, control, bidi or invisible character, not starting with `-`). The mail builder parses
/// each again when it sends; this catches a typo when the file is read, naming the key.
fn check_report_to(list: &[String]) -> Result<(), String> {
    if list.len() > MAX_REPORT_TO {
        return Err(format!(
            "audit.report_to has {} addresses, more than {MAX_REPORT_TO}",
            list.len()
        ));
    }
    for a in list {
        let ok = !a.is_empty()
            && a.len() <= 254
            && !a.starts_with('-')
            && !a
                .chars()
                .any(|c| jobscope_model::text::is_hidden(c) || c.is_whitespace())
            && a.split('@').count() == 2
            && a.split('@').all(|p| !p.is_empty());
        if !ok {
            return Err(format!(
                "audit.report_to {} is not a bare address (local@domain)",
                quoted(a, ECHO_CHARS)
            ));
        }
    }
    Ok(())
}

/// The GPU thresholds of the site configuration, as the report, the Epilog and the live snapshot
/// summarise GPUs with them.
pub fn gpu_params(cfg: &Config) -> jobscope_model::gpu::summary::GpuSummaryParams {
    jobscope_model::gpu::summary::GpuSummaryParams {
        idle_util_pct: cfg.gpu.idle_util_pct,
        idle_min_s: cfg.gpu.idle_min_s as f64,
        ..Default::default()
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
            assert_eq!(e, format!("must be an absolute path without '..': {bad:?}"));
        }
        let e = AbsPath::new("rel\r\n\u{1b}[2J\u{202E}")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "must be an absolute path without '..': \"rel\\r\\n\\u{1b}[2J\\u{202e}\""
        );
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
                "paths.spool_dir = \"/var/../x\": must be an absolute path",
            ),
            (
                "[audit]\nindex_dir = \"idx\"",
                "audit.index_dir = \"idx\": must be an absolute path",
            ),
            (
                "[postgres]\npassword_file = \"pw\"",
                "postgres.password_file = \"pw\": must be an absolute path",
            ),
            (
                "[mail.smtp]\npassword_file = \"pw\"",
                "mail.smtp.password_file = \"pw\": must be an absolute path",
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
    fn report_to_takes_bare_addresses_and_refuses_others_naming_the_key() {
        let c = Config::parse(
            "[audit]\nreport_to = [\"hpc-admins@example.org\", \"boss@lab.example.org\"]",
            Path::new("c"),
        )
        .unwrap();
        assert_eq!(
            c.audit.report_to,
            ["hpc-admins@example.org", "boss@lab.example.org"]
        );
        assert!(Config::default().audit.report_to.is_empty());
        for bad in [
            "\"\"",
            "\"admins\"",
            "\"Admins <a@example.org>\"",
            "\"a@b@c\"",
            "\"a@\"",
            "\"-oQ@example.org\"",
            "\"a@example.org\\r\\nBcc: x@y\"",
        ] {
            let text = format!("[audit]\nreport_to = [{bad}]");
            let e = Config::parse(&text, Path::new("c"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("audit.report_to"), "{bad}: {e}");
            assert!(!e.contains('\n') && !e.contains('\r'), "{e}");
        }
        let many: Vec<String> = (0..=MAX_REPORT_TO)
            .map(|i| format!("\"a{i}@x.org\""))
            .collect();
        let e = Config::parse(
            &format!("[audit]\nreport_to = [{}]", many.join(",")),
            Path::new("c"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("more than 100"), "{e}");
    }

    /// Every numeric key with a value below its least and above its most (None: the type's own
    /// limit is the bound, and toml refuses the value naming the key's line), from
    /// docs/configuration.md's table, written out here rather than read from `validate`.
    const NUMERIC_KEYS: &[(&str, Option<&str>, Option<&str>)] = &[
        ("sampler.cadence_s", Some("0"), Some("3601")),
        ("sampler.max_spool_bytes", Some("16383"), Some("67108865")),
        ("sampler.min_free_bytes", None, Some("1152921504606846977")),
        ("archive.retention_days", None, Some("36501")),
        ("archive.node_wait_s", None, Some("604801")),
        ("audit.compact_parts", Some("0"), Some("10001")),
        ("audit.lock_stale_s", Some("0"), Some("604801")),
        ("audit.busy_pct", Some("0.0"), Some("100.5")),
        ("audit.peer_window_days", Some("0"), Some("3651")),
        ("audit.peer_min_jobs", Some("0"), Some("1000001")),
        ("audit.history_min_runs", Some("0"), Some("10001")),
        (
            "report.cpu_efficiency_warn_pct",
            Some("-1.0"),
            Some("1000.5"),
        ),
        (
            "report.mem_efficiency_warn_pct",
            Some("-1.0"),
            Some("1000.5"),
        ),
        ("report.mem_headroom_pct", Some("-1.0"), Some("1000.5")),
        ("report.time_margin_pct", Some("-1.0"), Some("1000.5")),
        (
            "report.time_efficiency_warn_pct",
            Some("-1.0"),
            Some("1000.5"),
        ),
        ("report.near_oom_pct", Some("-1.0"), Some("1000.5")),
        ("report.min_elapsed_for_advice_s", None, Some("31536001")),
        ("report.idle_phase_min_s", Some("0"), Some("31536001")),
        ("report.stall_warn_pct", Some("-1.0"), Some("100.5")),
        ("report.cpu_wait_warn_pct", Some("-1.0"), Some("100.5")),
        ("report.lock_share_warn_pct", Some("-1.0"), Some("100.5")),
        ("report.lock_min_calls", Some("0"), Some("1000000000001")),
        (
            "report.small_io_warn_calls",
            Some("0"),
            Some("1000000000001"),
        ),
        ("mail.flush_budget_s", None, Some("9223372036854775807")),
        ("mail.rate_per_s", Some("1e-300"), Some("1000.5")),
        ("mail.initial_backoff_s", Some("0"), Some("86401")),
        ("mail.max_backoff_s", Some("0"), Some("2592001")),
        ("mail.max_age_s", Some("0"), Some("31536001")),
        ("mail.keep_sent_days", None, Some("213503982334601")),
        ("mail.min_elapsed_s", None, Some("31536001")),
        ("mail.chart_width", Some("63"), Some("4097")),
        ("mail.chart_height", Some("31"), Some("4097")),
        ("mail.max_chart_nodes", None, Some("1025")),
        ("mail.smtp.port", Some("0"), Some("65536")),
        ("mail.smtp.timeout_s", Some("0"), Some("601")),
        ("mail.sendmail.timeout_s", Some("0"), Some("601")),
        ("gpu.sample_timeout_s", Some("0"), Some("61")),
        ("gpu.drain_interval_s", Some("0"), Some("14")),
        ("gpu.idle_util_pct", Some("-0.5"), Some("100.5")),
        ("gpu.idle_min_s", None, Some("31536001")),
        ("postgres.connect_timeout_s", Some("0"), Some("301")),
        ("transport.send_budget_s", Some("0"), Some("61")),
        ("transport.retry_jitter_s", None, Some("3601")),
        ("transport.collect_interval_s", Some("0"), Some("3601")),
        (
            "transport.postgres.connect_timeout_s",
            Some("0"),
            Some("61"),
        ),
        ("run.first_job_id", Some("67108863"), Some("4000000001")),
        ("watch.interval_s", Some("4"), Some("86401")),
        ("watch.slurm_timeout_s", Some("0"), Some("601")),
        ("alerts.period_days", Some("0"), Some("367")),
        ("alerts.max_jobs_listed", Some("0"), Some("10001")),
        ("alerts.gpu_idle.window_days", Some("0"), Some("367")),
        (
            "alerts.gpu_idle.min_gpu_hours",
            Some("0.0"),
            Some("1000000.5"),
        ),
        ("alerts.cpu_efficiency.window_days", Some("0"), Some("367")),
        (
            "alerts.cpu_efficiency.max_cpu_eff_pct",
            Some("0.0"),
            Some("100.5"),
        ),
        ("alerts.cpu_efficiency.min_jobs", Some("0"), Some("1000001")),
        (
            "alerts.cpu_efficiency.min_core_hours",
            Some("-0.5"),
            Some("1000000.5"),
        ),
        ("alerts.mem_request.window_days", Some("0"), Some("367")),
        ("alerts.mem_request.min_ratio", Some("0.5"), Some("1000.5")),
        ("alerts.mem_request.min_jobs", Some("0"), Some("1000001")),
        ("alerts.timeouts.window_days", Some("0"), Some("367")),
        ("alerts.timeouts.min_jobs", Some("0"), Some("1000001")),
        ("alerts.cpu_on_gpu.window_days", Some("0"), Some("367")),
        ("alerts.cpu_on_gpu.min_jobs", Some("0"), Some("1000001")),
        (
            "alerts.cpu_on_gpu.min_core_hours",
            Some("-0.5"),
            Some("1000000.5"),
        ),
    ];

    const PATH_KEYS: &[&str] = &[
        "paths.spool_dir",
        "paths.handover_dir",
        "paths.state_dir",
        "paths.archive_dir",
        "paths.log_file",
        "paths.live_dir",
        "paths.cli",
        "archive.keep_spools_dir",
        "audit.index_dir",
        "audit.metrics_file",
        "mail.template_dir",
        "mail.queue_dir",
        "mail.smtp.password_file",
        "mail.smtp.ca_file",
        "mail.sendmail.path",
        "gpu.nvml_lib_path",
        "gpu.dcgm_lib_path",
        "gpu.gres_conf",
        "postgres.password_file",
        "transport.outbox_dir",
        "transport.postgres.password_file",
    ];

    /// `key = value` as a config file: `[mail.smtp]` and `port = 0` for `mail.smtp.port`.
    fn one_key(key: &str, value: &str) -> String {
        let (table, name) = key.rsplit_once('.').unwrap();
        format!("[{table}]\n{name} = {value}\n")
    }

    fn refused(key: &str, value: &str) {
        let text = one_key(key, value);
        let e = Config::parse(&text, Path::new("/etc/j.toml"))
            .map(|_| ())
            .expect_err(&format!("{key} = {value} accepted"))
            .to_string();
        let name = key.rsplit_once('.').unwrap().1;
        assert!(!e.contains('\n'), "{text}: {e}");
        assert!(e.starts_with("/etc/j.toml: "), "{text}: {e}");
        // Our own check names the whole key, the value and the range; toml's (a path's form is
        // checked as it is read) names the line, its key in full.
        assert!(
            (e.contains(key) && (e.contains("outside") || e.contains("must be an absolute")))
                || e.contains(&format!("{name} = {value}")),
            "{text}: {e}"
        );
    }

    #[test]
    fn every_numeric_and_path_key_is_bounded() {
        for (key, below, above) in NUMERIC_KEYS {
            for v in below.iter().chain(above) {
                refused(key, v);
            }
        }
        // The one list: each value, and how many.
        refused("sampler.early_samples_s", "[1, 3601]");
        refused("sampler.early_samples_s", &format!("{:?}", [1; 17]));
        // Floats: NaN and the infinities are outside every range.
        let floats = NUMERIC_KEYS
            .iter()
            .filter(|k| k.2.is_some_and(|v| v.contains('.')));
        let floats: Vec<_> = floats.map(|k| k.0).collect();
        assert!(floats.len() >= 10, "{floats:?}");
        for key in floats {
            for v in ["nan", "inf", "-inf"] {
                refused(key, v);
            }
        }
        for key in PATH_KEYS {
            for v in ["\"relative/q\"", "\"relative/q/../q\"", "\"/var/../etc\""] {
                refused(key, v);
            }
            // The key takes an absolute path.
            Config::parse(&one_key(key, "\"/abs/x\""), Path::new("c")).unwrap();
        }
        // A value at each end of a range is accepted (the bounds are inclusive where written).
        for (key, v) in [
            ("mail.rate_per_s", "0.0"),
            ("mail.rate_per_s", "0.001"),
            ("mail.flush_budget_s", "3600"),
            ("mail.keep_sent_days", "3650"),
            ("gpu.drain_interval_s", "13"),
        ] {
            Config::parse(&one_key(key, v), Path::new("c")).unwrap();
        }
    }

    /// Every numeric key and every path key of the defaults is in the tables above, so a key
    /// added without a bound (and without a row here) fails this test.
    #[test]
    fn the_bound_tables_cover_every_key() {
        let mut c = Config::default();
        // Optional paths are absent from the serialized defaults: set them.
        let some = || Some(PathBuf::from("/x"));
        c.archive.keep_spools_dir = some();
        c.audit.index_dir = some();
        c.audit.metrics_file = some();
        c.mail.template_dir = some();
        c.mail.smtp.password_file = some();
        c.mail.smtp.ca_file = some();
        c.gpu.nvml_lib_path = some();
        c.gpu.dcgm_lib_path = some();
        c.postgres.password_file = some();
        let v = toml::Value::try_from(&c).unwrap();
        let mut leaves = Vec::new();
        fn walk(prefix: &str, v: &toml::Value, out: &mut Vec<(String, toml::Value)>) {
            match v {
                toml::Value::Table(t) => {
                    for (k, v) in t {
                        let key = if prefix.is_empty() {
                            k.clone()
                        } else {
                            format!("{prefix}.{k}")
                        };
                        walk(&key, v, out);
                    }
                }
                _ => out.push((prefix.to_string(), v.clone())),
            }
        }
        walk("", &v, &mut leaves);
        let mut numeric = 0;
        for (key, v) in leaves {
            match v {
                toml::Value::Integer(_) | toml::Value::Float(_) => {
                    numeric += 1;
                    assert!(
                        NUMERIC_KEYS.iter().any(|k| k.0 == key),
                        "{key} has no bound in NUMERIC_KEYS"
                    );
                }
                toml::Value::String(s) if s.starts_with('/') => {
                    assert!(
                        PATH_KEYS.contains(&key.as_str()),
                        "{key} is not in PATH_KEYS"
                    )
                }
                _ => {}
            }
        }
        assert_eq!(numeric, NUMERIC_KEYS.len());
    }

    /// Every alert rule is off until an admin turns it on; an admin address that can never be
    /// one is refused in one line naming the key.
    #[test]
    fn alert_rules_are_off_by_default_and_admin_to_is_an_address() {
        let a = Config::default().alerts;
        assert!(
            !a.gpu_idle.enabled
                && !a.cpu_efficiency.enabled
                && !a.mem_request.enabled
                && !a.timeouts.enabled
                && !a.cpu_on_gpu.enabled
        );
        assert_eq!(a.longest_window_days(), 0);
        assert_eq!(a.mem_request.min_ratio, 4.0);
        let c = Config::parse(
            "[alerts]\nadmin_to = \"hpc@example.org\"\n[alerts.timeouts]\nenabled = true\nwindow_days = 14\n[alerts.gpu_idle]\nenabled = true\n",
            Path::new("c"),
        )
        .unwrap();
        assert_eq!(c.alerts.admin_to.as_deref(), Some("hpc@example.org"));
        assert_eq!(c.alerts.longest_window_days(), 14);
        for bad in ["\"\"", "\"hpc\"", "\"a@b\\nBcc: x@y\""] {
            let e = Config::parse(&format!("[alerts]\nadmin_to = {bad}\n"), Path::new("c"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("alerts.admin_to") && !e.contains('\n'),
                "{bad}: {e}"
            );
        }
    }

    /// Characters that break a one-line message or a terminal: CR, LF, ESC (a colour), a bidi
    /// override and isolate, an invisible filler.
    const HOSTILE: [&str; 6] = ["\r", "\n", "\u{1b}[31m", "\u{202E}", "\u{2066}", "\u{3164}"];

    /// `s` as a TOML basic string on one line: `"`, `\\` and every control, bidi or invisible
    /// character escaped (`\u202E`), so that the value itself holds them.
    fn toml_str(s: &str) -> String {
        let mut out = String::from('"');
        for c in s.chars() {
            match c {
                '"' | '\\' => {
                    out.push('\\');
                    out.push(c);
                }
                c if jobscope_model::text::is_hidden(c) => {
                    out.push_str(&format!("\\U{:08X}", u32::from(c)));
                }
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    /// An error a person reads: one line, no control, bidi or invisible character.
    fn assert_one_line(e: &str, what: &str) {
        assert!(
            !e.chars().any(jobscope_model::text::is_hidden),
            "{what}: a raw control, bidi or invisible character in {e:?}"
        );
    }

    /// Every error that echoes a value (path keys, labels, the admin group, mail addresses, a key
    /// as written, the file's own path) is one line, the value escaped so that what was there
    /// can still be read.
    #[test]
    fn every_echoed_value_is_escaped_in_one_line() {
        for h in HOSTILE {
            let shown = escape_hidden(h).into_owned();
            let mut cases: Vec<(String, String)> = Vec::new();
            for key in PATH_KEYS {
                for v in [format!("rel{h}/x"), format!("/var/{h}/../etc")] {
                    cases.push((one_key(key, &toml_str(&v)), key.to_string()));
                }
            }
            for (key, v) in [
                ("run.cluster", toml_str(&format!("c{h}"))),
                ("postgres.source", toml_str(&format!("s{h}"))),
                ("archive.admin_group", toml_str(&format!("adm{h}"))),
                ("alerts.admin_to", toml_str(&format!("a@b{h}"))),
                (
                    "audit.report_to",
                    format!("[{}]", toml_str(&format!("a@b{h}"))),
                ),
                ("sampler.cadence_s", toml_str(&format!("thirty{h}"))),
            ] {
                cases.push((one_key(key, &v), key.to_string()));
            }
            // A key as written (toml names it in its own words).
            cases.push((
                format!("[sampler]\n{} = 5\n", toml_str(&format!("cad{h}ence_s"))),
                "cad".into(),
            ));
            for (text, key) in cases {
                let e = Config::parse(&text, Path::new("/etc/j.toml"))
                    .map(|_| ())
                    .expect_err(&text)
                    .to_string();
                assert_one_line(&e, &text);
                let name = key.rsplit('.').next().unwrap();
                assert!(e.contains(name), "{text:?}: {e}");
                assert!(e.contains(&shown), "{text:?}: {e} does not show {shown}");
            }
            // The file's own path.
            let path = format!("/etc/j{h}.toml");
            let e = Config::parse("[sampler]\ncadence_s = 0\n", Path::new(&path))
                .unwrap_err()
                .to_string();
            assert_one_line(&e, &path);
            assert!(e.starts_with(&format!("/etc/j{shown}.toml: ")), "{e}");
            let e = Config::load_named(Path::new(&path))
                .unwrap_err()
                .to_string();
            assert_one_line(&e, &path);
        }
    }

    /// The shipped example with a hostile character put at a seeded random place, 4000 times:
    /// whatever the parser or the checks say, it is one line.
    #[test]
    fn mutated_configs_give_one_line_errors() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../slurm-conf");
        let example = std::fs::read_to_string(format!("{dir}/examples/jobscope.toml")).unwrap();
        let chars: Vec<char> = example.chars().collect();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut refused = 0;
        for _ in 0..4000 {
            let at = next() as usize % (chars.len() + 1);
            let h = HOSTILE[next() as usize % HOSTILE.len()];
            let mut text: String = chars[..at].iter().collect();
            text.push_str(h);
            text.extend(&chars[at..]);
            if let Err(e) = Config::parse(&text, Path::new("/etc/j.toml")) {
                refused += 1;
                assert_one_line(&e.to_string(), &text);
            }
        }
        assert!(refused > 1000, "{refused} refused");
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

    /// A key under a table header is named in full; a header line, a line in a multi-line value
    /// or a key before any header is shown as written.
    #[test]
    fn a_lines_key_is_named_with_its_table() {
        let text = "top = 1\n[mail.smtp]\n  port = 0\n[[x]]\nk = [\n \"a=b\",\n]\n";
        assert_eq!(qualified_line(text, 1), "top = 1");
        assert_eq!(qualified_line(text, 2), "[mail.smtp]");
        assert_eq!(qualified_line(text, 3), "mail.smtp.port = 0");
        assert_eq!(qualified_line(text, 5), "x.k = [");
        assert_eq!(qualified_line(text, 6), "\"a=b\",");
        assert_eq!(qualified_line(text, 99), "");
    }

    /// The cadence's one range holds `sampler.cadence_s` and the early samples.
    #[test]
    fn the_cadence_range_bounds_the_cadence_and_the_early_samples() {
        let (lo, hi) = (*CADENCE_S.start(), *CADENCE_S.end());
        for ok in [lo, hi] {
            Config::parse(&format!("[sampler]\ncadence_s = {ok}"), Path::new("c")).unwrap();
        }
        for bad in [lo - 1, hi + 1] {
            let e = Config::parse(&format!("[sampler]\ncadence_s = {bad}"), Path::new("c"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("outside {lo}..={hi}")), "{e}");
        }
        let e = Config::parse(
            &format!("[sampler]\nearly_samples_s = [{}]", hi + 1),
            Path::new("c"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(&format!("outside 0..={hi}")), "{e}");
    }
}
