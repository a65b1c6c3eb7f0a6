//! Alerts to users across their jobs (docs/audit.md "Alerts"): rules an admin enables in
//! `[alerts]`, each over a window of the index, and one mail per user per period that lists every
//! rule that fired for them, the jobs, the hours wasted and the `#SBATCH` lines their history
//! supports.
//!
//! - this module: the rules ([`evaluate`]), over the index and the run history the end-of-job
//!   advice reads (`jobscope_archive::history`), with the user's mail opt-out from the index
//!   (`mail_never`, the record's `user_options.mail`);
//! - [`words`]: what is said, for people (the dry run), in the mail and to the admins;
//! - [`state`]: the record of what was sent, so the same finding is not sent twice;
//! - [`send`]: the mail queue (jobscope_deliver), then the record.
//!
//! Each rule is a test of one job and a threshold over the jobs that pass it: the jobs already
//! reported to the user for that rule ([`state`]) and the jobs the user asked not to be mailed
//! about (`--jobscope-mail=never`) never count, so what a mail lists is new, and the threshold is
//! met by those jobs alone. A user's alert holds only that user's jobs (by uid): the only figure in
//! it that other jobs shaped is a partition's busy share (`cpu_on_gpu`), an aggregate.

pub mod send;
pub mod state;
pub mod words;

#[cfg(test)]
mod tests;

use anyhow::Result;
use arrow_array::{Array, BooleanArray, Float64Array, Int64Array, RecordBatch};
use jobscope_archive::history::{advice_for, read_user, Run, UserHistory};
use jobscope_audit::arrow::{of, oi, Text, View};
use jobscope_audit::index::{KeepRows, ParquetEngine, RowPredicate};
use jobscope_audit::query::{Query, Report, Window};
use jobscope_config::Config;
use jobscope_model::job::JobState;
use jobscope_model::summary::analysis::HistoryBasis;
use jobscope_report::present::{clean, history as advice_words, AdviceView};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// The rules, in the order a mail lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    GpuIdle,
    CpuEfficiency,
    MemRequest,
    Timeouts,
    CpuOnGpu,
}

impl Rule {
    pub const ALL: [Rule; 5] = [
        Rule::GpuIdle,
        Rule::CpuEfficiency,
        Rule::MemRequest,
        Rule::Timeouts,
        Rule::CpuOnGpu,
    ];

    /// Its name in the configuration (`[alerts.<key>]`), the record and the JSON output.
    pub fn key(self) -> &'static str {
        match self {
            Rule::GpuIdle => "gpu_idle",
            Rule::CpuEfficiency => "cpu_efficiency",
            Rule::MemRequest => "mem_request",
            Rule::Timeouts => "timeouts",
            Rule::CpuOnGpu => "cpu_on_gpu",
        }
    }

    /// What its waste is counted in.
    pub fn unit(self) -> WasteUnit {
        match self {
            Rule::GpuIdle => WasteUnit::GpuHours,
            Rule::MemRequest => WasteUnit::MemGbHours,
            Rule::CpuEfficiency | Rule::Timeouts | Rule::CpuOnGpu => WasteUnit::CoreHours,
        }
    }

    fn enabled_in(self, cfg: &Config) -> Option<u32> {
        let a = &cfg.alerts;
        let (on, days) = match self {
            Rule::GpuIdle => (a.gpu_idle.enabled, a.gpu_idle.window_days),
            Rule::CpuEfficiency => (a.cpu_efficiency.enabled, a.cpu_efficiency.window_days),
            Rule::MemRequest => (a.mem_request.enabled, a.mem_request.window_days),
            Rule::Timeouts => (a.timeouts.enabled, a.timeouts.window_days),
            Rule::CpuOnGpu => (a.cpu_on_gpu.enabled, a.cpu_on_gpu.window_days),
        };
        on.then_some(days)
    }
}

/// The unit of a rule's waste (the names are the audit's column suffixes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WasteUnit {
    GpuHours,
    CoreHours,
    MemGbHours,
}

impl WasteUnit {
    pub fn words(self) -> &'static str {
        match self {
            WasteUnit::GpuHours => "GPU-hours",
            WasteUnit::CoreHours => "core-hours",
            WasteUnit::MemGbHours => "GB-hours of memory",
        }
    }
}

/// One job of a finding: the index row's figures an alert shows (units in the names; null: not
/// known), and its waste under the rule. `S` is how its text is held: owned (`String`) in a
/// finding, borrowed from the index's decoded columns (`&str`) while the rules test it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertJob<S = String> {
    pub cluster: Option<S>,
    pub job_id: u32,
    /// The archive's start second of the run (with `cluster` and `job_id`, the run's key).
    pub start_unix_s: u64,
    pub end_unix_s: i64,
    pub name: Option<S>,
    pub partition: Option<S>,
    pub state: S,
    pub elapsed_s: f64,
    pub alloc_cores: Option<u32>,
    pub alloc_gpus: Option<u32>,
    pub alloc_mem_per_node_bytes: Option<u64>,
    pub mem_peak_bytes: Option<u64>,
    pub cpu_eff_pct: Option<f64>,
    pub core_hours_alloc: Option<f64>,
    pub core_hours_wasted: Option<f64>,
    pub mem_gb_hours_wasted: Option<f64>,
    pub gpu_hours_wasted: Option<f64>,
    pub gpus_idle: Option<u32>,
    pub gpus_never_used: Option<u32>,
    /// `mem_request`: the 95th percentile of the memory peak of the user's runs of the same job.
    pub mem_peak_p95_bytes: Option<u64>,
    /// `cpu_on_gpu`: the partition's allocated share at the job's start (`audit cpu-on-gpu`).
    pub partition_busy_pct: Option<f64>,
    /// This job's part of the finding's waste, in the rule's unit.
    pub waste_hours: f64,
    #[serde(skip)]
    uid: u32,
    #[serde(skip)]
    user: S,
    #[serde(skip)]
    script_sha256: Option<S>,
    #[serde(skip)]
    start_unix_ms: u64,
    #[serde(skip)]
    end_unix_ms: u64,
    #[serde(skip)]
    cpu_usage_s: Option<f64>,
    /// Run with `--jobscope-mail=never` (the index's `mail_never`): left out, and said.
    #[serde(skip)]
    mail_never: bool,
}

/// A run's key in the record of sent alerts: `<cluster>/<job_id>/<start_s>`.
fn run_key(cluster: Option<&str>, job_id: u32, start_unix_s: u64) -> String {
    format!("{}/{job_id}/{start_unix_s}", cluster.unwrap_or(""))
}

impl<S: AsRef<str>> AlertJob<S> {
    /// The run's key in the record of sent alerts ([`run_key`]).
    pub fn key(&self) -> String {
        run_key(
            self.cluster.as_ref().map(S::as_ref),
            self.job_id,
            self.start_unix_s,
        )
    }

    /// The run as the history holds it (`jobscope_archive::history::Run::of`, the index's figures).
    fn run(&self) -> Run {
        Run::of(
            self.end_unix_ms as i64,
            self.mem_peak_bytes,
            self.elapsed_s,
            self.cpu_usage_s,
        )
    }
}

impl AlertJob<&str> {
    /// The job as a finding lists it: its text owned, and what the pass `p` gave it.
    fn owned(&self, p: Pass) -> AlertJob {
        let own = |t: Option<&str>| t.map(str::to_string);
        AlertJob {
            cluster: own(self.cluster),
            job_id: self.job_id,
            start_unix_s: self.start_unix_s,
            end_unix_s: self.end_unix_s,
            name: own(self.name),
            partition: own(self.partition),
            state: self.state.to_string(),
            elapsed_s: self.elapsed_s,
            alloc_cores: self.alloc_cores,
            alloc_gpus: self.alloc_gpus,
            alloc_mem_per_node_bytes: self.alloc_mem_per_node_bytes,
            mem_peak_bytes: self.mem_peak_bytes,
            cpu_eff_pct: self.cpu_eff_pct,
            core_hours_alloc: self.core_hours_alloc,
            core_hours_wasted: self.core_hours_wasted,
            mem_gb_hours_wasted: self.mem_gb_hours_wasted,
            gpu_hours_wasted: self.gpu_hours_wasted,
            gpus_idle: self.gpus_idle,
            gpus_never_used: self.gpus_never_used,
            mem_peak_p95_bytes: p.mem_peak_p95_bytes,
            partition_busy_pct: p.partition_busy_pct,
            waste_hours: p.waste_hours,
            uid: self.uid,
            user: self.user.to_string(),
            script_sha256: own(self.script_sha256),
            start_unix_ms: self.start_unix_ms,
            end_unix_ms: self.end_unix_ms,
            cpu_usage_s: self.cpu_usage_s,
            mail_never: self.mail_never,
        }
    }
}

/// A run of a finding and its waste: every job of the finding has one, listed in full or not
/// (what the record of sent alerts keeps, and what the totals sum).
#[derive(Debug, Clone, PartialEq)]
pub struct FoundRun {
    /// Shared by the runs of one cluster.
    pub cluster: Option<Arc<str>>,
    pub job_id: u32,
    pub start_unix_s: u64,
    pub end_unix_s: i64,
    pub waste_hours: f64,
}

impl FoundRun {
    /// The run's key in the record of sent alerts ([`run_key`]).
    pub fn key(&self) -> String {
        run_key(self.cluster.as_deref(), self.job_id, self.start_unix_s)
    }
}

/// Which jobs of a finding an evaluation makes in full ([`Finding::jobs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFull {
    /// Every one (`--json`).
    Every,
    /// The first so many (the tables of the dry run and the mail: `alerts.max_jobs_listed`).
    First(usize),
}

/// What one rule found for one user.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub rule: Rule,
    pub window_days: u32,
    /// Σ of the jobs' waste.
    pub waste_hours: f64,
    pub waste_unit: WasteUnit,
    /// The jobs in full, most wasteful first (then by end time, then job id): every one, or
    /// the first ones ([`Sources::in_full`]).
    pub jobs: Vec<AlertJob>,
    /// Every job's run and waste, in the same order.
    #[serde(skip)]
    pub runs: Vec<FoundRun>,
}

/// What is decided for one user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// A mail goes (`send`) or would go (dry run).
    Mail,
    /// The user was mailed in this period already: the findings wait for the next one.
    AlreadyMailed,
    /// Every job that made a rule fire was run with `--jobscope-mail=never`.
    OptedOut,
    /// No address for the user (no `mail.domain`, or a user name that is no mailbox).
    NoAddress,
}

/// One user's alert: findings, advice, and what is decided.
#[derive(Debug, Clone, Serialize)]
pub struct UserAlert {
    pub uid: u32,
    pub user: String,
    /// `<user>@<mail.domain>`.
    pub to: Option<String>,
    pub decision: Decision,
    /// The decision in words.
    pub reason: String,
    pub findings: Vec<Finding>,
    /// Resubmit-ready lines from the user's earlier runs of the jobs listed (the end-of-job
    /// advice's history), one block per batch script or job name.
    pub advice: Vec<AdviceBlock>,
    /// Jobs left out, and why.
    pub notes: Vec<String>,
}

impl UserAlert {
    /// Σ waste per unit over the findings, each job counted once per unit: a job two rules of
    /// one unit list (a TIMEOUT at 3 % CPU) adds the larger of its two figures, not both.
    pub fn waste(&self) -> BTreeMap<WasteUnit, f64> {
        // Each job's figure per unit, sorted by unit and run: a run in two findings of one unit
        // is then in two neighbouring entries, of which the larger is kept.
        type UnitRun<'a> = (WasteUnit, Option<&'a str>, u32, u64);
        let mut per_job: Vec<(UnitRun, f64)> = self
            .findings
            .iter()
            .flat_map(|f| {
                f.runs.iter().map(|j| {
                    let run = (j.cluster.as_deref(), j.job_id, j.start_unix_s);
                    ((f.waste_unit, run.0, run.1, run.2), j.waste_hours)
                })
            })
            .collect();
        per_job.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
        per_job.dedup_by(|later, first| later.0 == first.0);
        let mut w = BTreeMap::new();
        for ((unit, ..), h) in per_job {
            *w.entry(unit).or_insert(0.0) += h;
        }
        w
    }

    /// The runs this alert reports, per rule (what the record keeps once it is sent).
    pub fn reported(&self) -> BTreeMap<Rule, Vec<(String, i64)>> {
        self.findings
            .iter()
            .map(|f| {
                (
                    f.rule,
                    f.runs.iter().map(|j| (j.key(), j.end_unix_s)).collect(),
                )
            })
            .collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AdviceBlock {
    /// `Based on your last 7 runs of the same batch script:` (the end-of-job report's words).
    pub heading: String,
    pub lines: Vec<AdviceView>,
}

/// An enabled rule and its window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Enabled {
    pub rule: Rule,
    pub window_days: u32,
}

/// Everything one evaluation found.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    pub now_unix_s: i64,
    pub period_days: u32,
    /// The current period: `[period_start_unix_s, + period_days)`.
    pub period_start_unix_s: i64,
    /// The enabled rules and their windows.
    pub rules: Vec<Enabled>,
    /// Users with at least one finding, by uid.
    pub users: Vec<UserAlert>,
    /// For the person running it (a record that cannot be read, …).
    pub notes: Vec<String>,
}

/// Monday 1970-01-05 00:00 UTC: periods start on Mondays.
const FIRST_MONDAY_S: i64 = 4 * 86_400;

/// The start of the period of `period_days` days that holds `now_s`: whole periods counted from
/// a Monday 00:00 UTC (7 days: each week from Monday; 1 day: each UTC day).
pub fn period_start(now_s: i64, period_days: u32) -> i64 {
    let p = i64::from(period_days.max(1)) * 86_400;
    FIRST_MONDAY_S + (now_s - FIRST_MONDAY_S).div_euclid(p) * p
}

/// The columns an evaluation reads from the index.
const COLUMNS: &[&str] = &[
    "cluster",
    "job_id",
    "scheduler_start_unix_s",
    "start_unix_ms",
    "end_unix_ms",
    "name",
    "script_sha256",
    "user",
    "uid",
    "partition",
    "state",
    "elapsed_s",
    "alloc_cores",
    "alloc_gpus",
    "alloc_mem_per_node_bytes",
    "mem_peak_bytes",
    "cpu_usage_s",
    "cpu_eff_pct",
    "core_hours_alloc",
    "core_hours_wasted",
    "mem_gb_hours_wasted",
    "gpu_hours_wasted",
    "gpus_idle",
    "gpus_never_used",
    "mail_never",
];

/// Counts and sizes from the index are never negative; one that is (a damaged part) is unknown.
fn nonneg<T: TryFrom<i64>>(v: Option<i64>) -> Option<T> {
    v.and_then(|x| T::try_from(x).ok())
}

/// The rows of the index that ended in `window` and that `keep` keeps (the others' columns are
/// not decoded), as decoded ([`COLUMNS`], the low-cardinality text as dictionaries), in the
/// index's end order. Nothing is made per row here: the rules read the rows where they lie
/// ([`JobCols::job`]), and a finding makes in full only the jobs it lists.
fn scan_rows(
    eng: &ParquetEngine,
    window: &Window,
    keep: Option<RowPredicate>,
) -> Result<Vec<RecordBatch>> {
    let mut q = Query::new(Report::Jobs);
    q.window = window.clone();
    eng.scan_where_as(&q, COLUMNS, true, keep)
}

/// The columns of one batch of [`COLUMNS`], each looked up once per batch (not per row).
struct JobCols<'a> {
    cluster: Text<'a>,
    job_id: &'a Int64Array,
    sched_start: &'a Int64Array,
    start: &'a Int64Array,
    end: &'a Int64Array,
    name: Text<'a>,
    script: Text<'a>,
    user: Text<'a>,
    uid: &'a Int64Array,
    partition: Text<'a>,
    state: Text<'a>,
    elapsed: &'a Float64Array,
    cores: &'a Int64Array,
    gpus: &'a Int64Array,
    mem_req: &'a Int64Array,
    mem_peak: &'a Int64Array,
    cpu_usage: &'a Float64Array,
    cpu_eff: &'a Float64Array,
    core_alloc: &'a Float64Array,
    core_wasted: &'a Float64Array,
    mem_wasted: &'a Float64Array,
    gpu_wasted: &'a Float64Array,
    gpus_idle: &'a Int64Array,
    gpus_never: &'a Int64Array,
    mail_never: &'a BooleanArray,
}

impl<'a> JobCols<'a> {
    fn of(b: &'a RecordBatch) -> Result<JobCols<'a>> {
        let v = View::new(b);
        Ok(JobCols {
            cluster: v.t("cluster")?,
            job_id: v.i("job_id")?,
            sched_start: v.i("scheduler_start_unix_s")?,
            start: v.i("start_unix_ms")?,
            end: v.i("end_unix_ms")?,
            name: v.t("name")?,
            script: v.t("script_sha256")?,
            user: v.t("user")?,
            uid: v.i("uid")?,
            partition: v.t("partition")?,
            state: v.t("state")?,
            elapsed: v.f("elapsed_s")?,
            cores: v.i("alloc_cores")?,
            gpus: v.i("alloc_gpus")?,
            mem_req: v.i("alloc_mem_per_node_bytes")?,
            mem_peak: v.i("mem_peak_bytes")?,
            cpu_usage: v.f("cpu_usage_s")?,
            cpu_eff: v.f("cpu_eff_pct")?,
            core_alloc: v.f("core_hours_alloc")?,
            core_wasted: v.f("core_hours_wasted")?,
            mem_wasted: v.f("mem_gb_hours_wasted")?,
            gpu_wasted: v.f("gpu_hours_wasted")?,
            gpus_idle: v.i("gpus_idle")?,
            gpus_never: v.i("gpus_never_used")?,
            mail_never: v.b("mail_never")?,
        })
    }

    fn rows(&self) -> usize {
        self.end.len()
    }

    /// Row `r` as an alert shows it, its text borrowed; `None` without an end time, a uid or a
    /// user name (an alert has no one to go to), or a job id.
    fn job(&self, r: usize) -> Option<AlertJob<&'a str>> {
        let (Some(end_ms), Some(uid), Some(user), Some(job_id)) = (
            oi(self.end, r).and_then(|e| u64::try_from(e).ok()),
            nonneg::<u32>(oi(self.uid, r)),
            self.user.get(r),
            nonneg::<u32>(oi(self.job_id, r)),
        ) else {
            return None;
        };
        let start_ms = nonneg::<u64>(oi(self.start, r)).unwrap_or(0);
        Some(AlertJob {
            cluster: self.cluster.get(r),
            job_id,
            // The archive's key (jobscope_archive::Key::of): SLURM's start second, else the
            // summary's.
            start_unix_s: nonneg::<u64>(oi(self.sched_start, r)).unwrap_or(start_ms / 1000),
            end_unix_s: (end_ms / 1000) as i64,
            name: self.name.get(r),
            partition: self.partition.get(r),
            state: self.state.get(r).unwrap_or_default(),
            elapsed_s: of(self.elapsed, r).unwrap_or(0.0),
            alloc_cores: nonneg(oi(self.cores, r)),
            alloc_gpus: nonneg(oi(self.gpus, r)),
            alloc_mem_per_node_bytes: nonneg(oi(self.mem_req, r)),
            mem_peak_bytes: nonneg(oi(self.mem_peak, r)),
            cpu_eff_pct: of(self.cpu_eff, r),
            core_hours_alloc: of(self.core_alloc, r),
            core_hours_wasted: of(self.core_wasted, r),
            mem_gb_hours_wasted: of(self.mem_wasted, r),
            gpu_hours_wasted: of(self.gpu_wasted, r),
            gpus_idle: nonneg(oi(self.gpus_idle, r)),
            gpus_never_used: nonneg(oi(self.gpus_never, r)),
            mem_peak_p95_bytes: None,
            partition_busy_pct: None,
            waste_hours: 0.0,
            uid,
            user,
            script_sha256: self.script.get(r),
            start_unix_ms: start_ms,
            end_unix_ms: end_ms,
            cpu_usage_s: of(self.cpu_usage, r),
            // Never null as written; a null would be no wish.
            mail_never: !self.mail_never.is_null(r) && self.mail_never.value(r),
        })
    }
}

/// The runs of one job id and start second: each one's cluster and figure (several clusters can
/// share an index).
type ClusterFigures<V> = Vec<(Option<String>, V)>;

/// Runs an audit report lists, by their identity (`cluster`, `job_id`, start second), each with
/// a figure of the report: looked up by job id and start second, the cluster compared only for
/// those, so that no lookup allocates.
struct Runs<V> {
    /// (job id, start second) → (cluster, figure) of each run with them.
    by_id: HashMap<(i64, i64), ClusterFigures<V>>,
}

impl<V> Default for Runs<V> {
    fn default() -> Self {
        Runs {
            by_id: HashMap::new(),
        }
    }
}

impl<V> Runs<V> {
    fn insert(&mut self, (cluster, job_id, start_s): jobscope_audit::eval::RunKey, v: V) {
        self.by_id
            .entry((job_id, start_s))
            .or_default()
            .push((cluster, v));
    }

    fn get(&self, cluster: Option<&str>, job_id: i64, start_s: i64) -> Option<&V> {
        self.by_id
            .get(&(job_id, start_s))?
            .iter()
            .find(|(c, _)| c.as_deref() == cluster)
            .map(|(_, v)| v)
    }

    fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Whether some run has this job id and start second (of any cluster).
    fn has_id(&self, job_id: i64, start_s: i64) -> bool {
        self.by_id.contains_key(&(job_id, start_s))
    }

    /// The run of `j`, as the reports key it (the start second of the summary's start).
    fn of(&self, j: &AlertJob<&str>) -> Option<&V> {
        self.get(
            j.cluster,
            i64::from(j.job_id),
            (j.start_unix_ms / 1000) as i64,
        )
    }
}

/// Where an evaluation reads from, and when it runs.
pub struct Sources<'a> {
    pub cfg: &'a Config,
    pub engine: &'a ParquetEngine,
    /// The index directory (the run history is under it).
    pub index_dir: &'a Path,
    pub now_unix_s: i64,
    /// Which jobs of each finding are made in full.
    pub in_full: InFull,
}

/// The users' run histories, each read once (`None`: none, or not readable), shared by the
/// threads that decide for the users.
struct Histories<'a> {
    dir: &'a Path,
    /// The users with a history file: the others' are not looked for.
    users: Arc<HashSet<u32>>,
    read: std::sync::Mutex<HashMap<u32, Option<Arc<UserHistory>>>>,
}

impl<'a> Histories<'a> {
    /// The histories under the index directory `dir` (listed now, read when asked for).
    fn under(dir: &'a Path) -> Histories<'a> {
        let users = std::fs::read_dir(dir.join(jobscope_archive::history::HISTORY_DIR))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json")?.parse().ok())
            .collect();
        Histories {
            dir,
            users: Arc::new(users),
            read: Default::default(),
        }
    }

    fn of(&self, uid: u32) -> Option<Arc<UserHistory>> {
        if !self.users.contains(&uid) {
            return None;
        }
        if let Some(h) = self.read.lock().ok()?.get(&uid) {
            return h.clone();
        }
        // Read outside the lock: while the rows are tested, two threads may ask for one user's
        // at once and both read it (at worst once per thread); after, each user is one thread's.
        let h = read_user(self.dir, uid).ok().flatten().map(Arc::new);
        self.read.lock().ok()?.insert(uid, h.clone());
        h
    }
}

/// The end-of-job advice for the run `j` from its user's history (the same script, else the same
/// name; `audit.history_min_runs`), exactly as the Epilog would add it to `j`'s report.
fn advice(
    cfg: &Config,
    h: &UserHistory,
    j: &AlertJob<&str>,
) -> Option<jobscope_model::summary::analysis::HistoryAdvice> {
    advice_for(
        h,
        j.name,
        j.script_sha256,
        j.run(),
        cfg.audit.history_min_runs,
        &cfg.report,
    )
}

/// What a job that passes a rule's test of one job gets: its waste under the rule and the rule's
/// own figure.
#[derive(Debug, Clone, Copy)]
struct Pass {
    waste_hours: f64,
    mem_peak_p95_bytes: Option<u64>,
    partition_busy_pct: Option<f64>,
}

/// Whether `j` passes `rule`'s test of one job, and what it gets. `reports` holds the runs of the
/// audit's `gpu-idle` report and the busy ones of its `cpu-on-gpu` report with their busy share.
fn passes(
    cfg: &Config,
    rule: Rule,
    j: &AlertJob<&str>,
    reports: &ReportRuns,
    hist: &Histories,
) -> Option<Pass> {
    let a = &cfg.alerts;
    let (mut p95_found, mut busy_pct) = (None, None);
    let waste = match rule {
        Rule::GpuIdle => reports
            .gpu_idle
            .of(j)
            .and(j.gpu_hours_wasted)
            .filter(|w| *w > 0.0),
        Rule::CpuEfficiency => (j
            .cpu_eff_pct
            .is_some_and(|e| e < a.cpu_efficiency.max_cpu_eff_pct)
            && j.core_hours_alloc
                .is_some_and(|h| h >= a.cpu_efficiency.min_core_hours))
        .then(|| j.core_hours_wasted.unwrap_or(0.0)),
        Rule::MemRequest => {
            let (Some(req), true) = (
                j.alloc_mem_per_node_bytes,
                j.name.is_some() || j.script_sha256.is_some(),
            ) else {
                return None;
            };
            let p95 = hist
                .of(j.uid)
                .and_then(|h| advice(cfg, &h, j))
                .and_then(|adv| adv.mem_peak_p95_bytes)
                .filter(|p| *p > 0);
            match p95 {
                Some(p) if req as f64 >= a.mem_request.min_ratio * p as f64 => {
                    p95_found = Some(p);
                    Some(j.mem_gb_hours_wasted.unwrap_or(0.0))
                }
                _ => None,
            }
        }
        Rule::Timeouts => {
            (j.state == JobState::Timeout.as_str()).then(|| j.core_hours_alloc.unwrap_or(0.0))
        }
        Rule::CpuOnGpu => match reports.busy.of(j) {
            Some(pct)
                if j.core_hours_alloc
                    .is_some_and(|h| h >= a.cpu_on_gpu.min_core_hours) =>
            {
                busy_pct = Some(*pct);
                j.core_hours_alloc
            }
            _ => None,
        },
    };
    waste.map(|w| Pass {
        waste_hours: w,
        mem_peak_p95_bytes: p95_found,
        partition_busy_pct: busy_pct,
    })
}

/// Whether the jobs that passed `rule`'s test of one job meet its threshold.
fn meets(cfg: &Config, rule: Rule, hits: &[Hit]) -> bool {
    let a = &cfg.alerts;
    let n = hits.len() as u64;
    match rule {
        Rule::GpuIdle => {
            !hits.is_empty()
                && hits.iter().map(|h| h.pass.waste_hours).sum::<f64>() >= a.gpu_idle.min_gpu_hours
        }
        Rule::CpuEfficiency => n >= u64::from(a.cpu_efficiency.min_jobs),
        Rule::MemRequest => n >= u64::from(a.mem_request.min_jobs),
        Rule::Timeouts => n >= u64::from(a.timeouts.min_jobs),
        Rule::CpuOnGpu => n >= u64::from(a.cpu_on_gpu.min_jobs),
    }
}

/// The runs already reported to each user per rule (from the record of sent alerts), and the
/// period each user was last mailed in.
pub trait Reported {
    /// Whether run `j` was reported to its user for `rule`.
    fn was_reported(&self, rule: Rule, j: &AlertJob<&str>) -> bool;
    fn mailed_in(&self, uid: u32) -> Option<i64>;
}

/// At most this many `#SBATCH` blocks in one alert.
const MAX_ADVICE_BLOCKS: usize = 5;

/// The advice blocks for `jobs` (a user's findings' jobs, each finding's most wasteful first):
/// one per batch script or job name the history has enough runs of, for the most wasteful jobs
/// first (each as "this run"), worded as the end-of-job report words them and headed by the job
/// they were made for, job names cleaned.
fn advice_blocks<'a>(
    cfg: &Config,
    h: &UserHistory,
    jobs: impl Iterator<Item = AlertJob<&'a str>>,
) -> Vec<AdviceBlock> {
    let mut tried = BTreeSet::new();
    let mut given = BTreeSet::new();
    let mut out = Vec::new();
    for j in jobs {
        if !tried.insert((j.script_sha256, j.name)) {
            continue;
        }
        let Some(mut a) = advice(cfg, h, &j) else {
            continue;
        };
        // Two names of one script get the same advice: given once.
        let same = match a.basis {
            HistoryBasis::SameScript => (j.script_sha256, None),
            HistoryBasis::SameName => (None, j.name),
        };
        if !given.insert(same) {
            continue;
        }
        a.name = clean(&a.name, 64);
        let lines = advice_words::history_lines(&a);
        if lines.is_empty() {
            continue;
        }
        out.push(AdviceBlock {
            heading: format!(
                "\"{}\" (job {}): {}",
                a.name,
                j.job_id,
                advice_words::history_heading(&a)
            ),
            lines,
        });
        if out.len() == MAX_ADVICE_BLOCKS {
            break;
        }
    }
    out
}

/// Evaluates the enabled rules over the index as of `src.now_unix_s`, leaving out what `sent`
/// says was reported, and decides for each user with a finding. Phases: the enabled rules; what
/// the audit's own reports decide ([`ReportRuns::ask`]); the rows that can pass a rule
/// ([`candidates`], [`scan_rows`]); each of them against each rule ([`passing_jobs`]); then each
/// user's alert ([`Found::user_alert`]), the users split between the cores.
pub fn evaluate(src: &Sources, sent: &(dyn Reported + Sync)) -> Result<Evaluation> {
    let cfg = src.cfg;
    let now = src.now_unix_s;
    let rules = enabled_rules(cfg);
    let mut ev = Evaluation {
        now_unix_s: now,
        period_days: cfg.alerts.period_days,
        period_start_unix_s: period_start(now, cfg.alerts.period_days),
        rules: rules
            .iter()
            .map(|&(rule, window_days)| Enabled { rule, window_days })
            .collect(),
        users: Vec::new(),
        notes: Vec::new(),
    };
    if rules.is_empty() {
        ev.notes
            .push("no alert rule is enabled (`enabled = true` in an [alerts.<rule>] table)".into());
        return Ok(ev);
    }
    let longest = rules.iter().map(|r| r.1).max().unwrap_or(1);
    let reports = ReportRuns::ask(src, &rules)?;
    let hist = Histories::under(src.index_dir);
    let keep = candidates(src, &rules, &reports, &hist);
    let batches = scan_rows(src.engine, &rule_window(now, longest), Some(keep))?;
    let rows = batches
        .iter()
        .map(JobCols::of)
        .collect::<Result<Vec<JobCols>>>()?;
    let by_user: Vec<_> = passing_jobs(src, sent, &rules, &rows, &reports, &hist)
        .into_iter()
        .collect();
    let decided = ev.period_start_unix_s;
    ev.users = in_order_on_every_core(by_user, |users| {
        let mut clusters = Clusters::default();
        let found = Found {
            src,
            rules: &rules,
            rows: &rows,
            hist: &hist,
        };
        users
            .into_iter()
            .filter_map(|(uid, per_rule)| {
                found.user_alert(uid, per_rule, sent, decided, &mut clusters)
            })
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect();
    Ok(ev)
}

/// `f` over `items` in chunks, one per core, each chunk moved to its thread; the results in the
/// items' order.
pub(crate) fn in_order_on_every_core<T: Send, R: Send>(
    items: Vec<T>,
    f: impl Fn(Vec<T>) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = items.len().div_ceil(threads.max(1)).max(1);
    let mut chunks = Vec::new();
    let mut items = items.into_iter();
    loop {
        let chunk: Vec<T> = items.by_ref().take(per).collect();
        if chunk.is_empty() {
            break;
        }
        chunks.push(chunk);
    }
    let f = &f;
    std::thread::scope(|sc| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| sc.spawn(move || f(chunk)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// What one user's alert is made from, past the rules' tests.
struct Found<'s, 'r> {
    src: &'s Sources<'s>,
    rules: &'s [(Rule, u32)],
    rows: &'s [JobCols<'r>],
    hist: &'s Histories<'s>,
}

impl<'r> Found<'_, 'r> {
    /// Row `at` as an alert shows it (every hit is a row [`JobCols::job`] made before).
    fn job(&self, (b, r): At) -> Option<AlertJob<&'r str>> {
        self.rows.get(b as usize)?.job(r as usize)
    }

    /// The run of hit `h` as a finding holds it.
    fn run(&self, h: &Hit, clusters: &mut Clusters) -> FoundRun {
        let cluster = self
            .rows
            .get(h.at.0 as usize)
            .and_then(|c| c.cluster.get(h.at.1 as usize));
        FoundRun {
            cluster: clusters.of(cluster),
            job_id: h.job_id,
            start_unix_s: h.start_unix_s,
            end_unix_s: (h.end_unix_ms / 1000) as i64,
            waste_hours: h.pass.waste_hours,
        }
    }

    /// The alert of user `uid` from the jobs that passed each rule (`per_rule`): the rules still
    /// met, the opt-outs taken away ([`drop_opted_out`]), the advice, the findings
    /// ([`findings_of`]) and the decision ([`decide`]). `None`: no rule met.
    fn user_alert(
        &self,
        uid: u32,
        mut per_rule: BTreeMap<Rule, Vec<Hit>>,
        sent: &dyn Reported,
        period_start_s: i64,
        clusters: &mut Clusters,
    ) -> Option<UserAlert> {
        let cfg = self.src.cfg;
        for hits in per_rule.values_mut() {
            hits.sort_unstable_by(by_waste);
        }
        still_met(cfg, &mut per_rule);
        let user = self
            .job(per_rule.values().flatten().next()?.at)?
            .user
            .to_string();
        // Only the jobs of rules that fired: the user's wish can only take jobs away.
        let notes = drop_opted_out(&mut per_rule);
        still_met(cfg, &mut per_rule);
        // No history read for a user with nothing left to advise on.
        let history = (!per_rule.is_empty()).then(|| self.hist.of(uid)).flatten();
        let advice = match history {
            Some(h) => advice_blocks(
                cfg,
                &h,
                per_rule.values().flatten().filter_map(|h| self.job(h.at)),
            ),
            None => Vec::new(),
        };
        let findings = findings_of(
            self.rules,
            per_rule,
            self.src.in_full,
            &|h| Some(self.job(h.at)?.owned(h.pass)),
            &mut |h| self.run(h, clusters),
        );
        let to = jobscope_deliver::mail::message::choose_recipient(
            None,
            Some(&user),
            cfg.mail.domain.as_deref(),
        );
        let (decision, reason) = decide(
            &findings,
            to.as_ref().err().map(|e| e.to_string()),
            sent.mailed_in(uid),
            period_start_s,
        );
        Some(UserAlert {
            uid,
            user,
            to: to.ok().map(|r| r.mailbox.email.to_string()),
            decision,
            reason,
            findings,
            advice,
            notes,
        })
    }
}

/// The rows that can pass the test of one job of an enabled rule: what [`passes`] asks of a job,
/// less what needs more than its row (the user's history, beyond having one; the records), so
/// that the others' columns are never decoded. A year of 3 million jobs holds a few hundred
/// thousand such rows.
fn candidates(
    src: &Sources,
    rules: &[(Rule, u32)],
    reports: &ReportRuns,
    hist: &Histories,
) -> RowPredicate {
    let a = src.cfg.alerts.clone();
    let on: Vec<Rule> = rules.iter().map(|r| r.0).collect();
    // `mem_request` has nothing to compare with for users without a run history.
    let with_history = hist.users.clone();
    let busy = reports.busy.clone();
    // The rules a row can pass at all: `mem_request` needs a user with a history, `cpu_on_gpu` a
    // busy run. Each reads only its own columns: text columns, the costly ones to decode for
    // every job, only where a rule needs them.
    let on: Vec<Rule> = on
        .into_iter()
        .filter(|r| match r {
            Rule::MemRequest => !with_history.is_empty(),
            Rule::CpuOnGpu => !busy.is_empty(),
            _ => true,
        })
        .collect();
    let mut cols = vec!["uid"];
    for rule in &on {
        cols.extend_from_slice(match rule {
            Rule::GpuIdle => &["gpu_hours_wasted"][..],
            Rule::CpuEfficiency => &["cpu_eff_pct", "alloc_cores", "elapsed_s"],
            Rule::MemRequest => &["alloc_mem_per_node_bytes", "name", "script_sha256"],
            Rule::Timeouts => &["state"],
            // The cluster is compared when the job is tested ([`passes`]): here, any run with
            // the busy run's job id and start second is kept.
            Rule::CpuOnGpu => &["alloc_cores", "elapsed_s", "job_id", "start_unix_ms"],
        });
    }
    cols.sort_unstable();
    cols.dedup();
    let mut wanted = cols.clone();
    if on.contains(&Rule::CpuEfficiency) || on.contains(&Rule::CpuOnGpu) {
        wanted.push("core_hours_alloc");
    }
    let timeout = JobState::Timeout.as_str();
    let keep: KeepRows = Arc::new(move |b: &RecordBatch| {
        let b = jobscope_audit::arrow::with_derived(b, &wanted)?;
        let c = View::new(&b);
        let has = |r: Rule| on.contains(&r);
        let uid = c.i("uid")?;
        let alloc_h = if has(Rule::CpuEfficiency) || has(Rule::CpuOnGpu) {
            Some(c.f("core_hours_alloc")?)
        } else {
            None
        };
        let gpu_wasted = has(Rule::GpuIdle)
            .then(|| c.f("gpu_hours_wasted"))
            .transpose()?;
        let cpu_eff = has(Rule::CpuEfficiency)
            .then(|| c.f("cpu_eff_pct"))
            .transpose()?;
        let mem = if has(Rule::MemRequest) {
            Some((
                c.i("alloc_mem_per_node_bytes")?,
                c.t("name")?,
                c.t("script_sha256")?,
            ))
        } else {
            None
        };
        let state = has(Rule::Timeouts).then(|| c.t("state")).transpose()?;
        let run = if has(Rule::CpuOnGpu) {
            Some((c.i("job_id")?, c.i("start_unix_ms")?))
        } else {
            None
        };
        let mut out = vec![false; b.num_rows()];
        for (r, k) in out.iter_mut().enumerate() {
            let Some(uid) = nonneg::<u32>(oi(uid, r)) else {
                continue;
            };
            let alloc_h = alloc_h.and_then(|a| of(a, r));
            *k = on.iter().any(|rule| match rule {
                Rule::GpuIdle => gpu_wasted.and_then(|g| of(g, r)).is_some_and(|w| w > 0.0),
                Rule::CpuEfficiency => {
                    cpu_eff
                        .and_then(|e| of(e, r))
                        .is_some_and(|e| e < a.cpu_efficiency.max_cpu_eff_pct)
                        && alloc_h.is_some_and(|h| h >= a.cpu_efficiency.min_core_hours)
                }
                Rule::MemRequest => mem.is_some_and(|(req, name, script)| {
                    with_history.contains(&uid)
                        && !req.is_null(r)
                        && (name.get(r).is_some() || script.get(r).is_some())
                }),
                Rule::Timeouts => state.is_some_and(|s| s.get(r) == Some(timeout)),
                Rule::CpuOnGpu => {
                    alloc_h.is_some_and(|h| h >= a.cpu_on_gpu.min_core_hours)
                        && run.is_some_and(|(job_id, start)| {
                            let start_s = (nonneg::<u64>(oi(start, r)).unwrap_or(0) / 1000) as i64;
                            busy.has_id(oi(job_id, r).unwrap_or(-1), start_s)
                        })
                }
            });
        }
        Ok(out)
    });
    (cols, keep)
}

/// The enabled rules with their windows (days), in [`Rule::ALL`] order.
fn enabled_rules(cfg: &Config) -> Vec<(Rule, u32)> {
    Rule::ALL
        .iter()
        .filter_map(|r| r.enabled_in(cfg).map(|d| (*r, d)))
        .collect()
}

/// A rule's window: the `days` before `now_s`.
fn rule_window(now_s: i64, days: u32) -> Window {
    Window {
        since_unix_s: Some(now_s - i64::from(days) * 86_400),
        until_unix_s: Some(now_s),
    }
}

/// What the audit's own reports decide, over each rule's window: the jobs `audit gpu-idle` lists,
/// and those `audit cpu-on-gpu` marks busy, with the partition's busy share.
struct ReportRuns {
    gpu_idle: Runs<()>,
    /// Shared with the row filter ([`candidates`]).
    busy: std::sync::Arc<Runs<f64>>,
}

impl ReportRuns {
    /// Asks the reports the enabled `rules` rest on (none for the others).
    fn ask(src: &Sources, rules: &[(Rule, u32)]) -> Result<ReportRuns> {
        let mut gpu_idle = Runs::default();
        let mut busy = Runs::default();
        for (rule, days) in rules {
            let mut q = Query::new(match rule {
                Rule::GpuIdle => Report::GpuIdle,
                Rule::CpuOnGpu => Report::CpuOnlyOnGpu {
                    busy_pct: src.cfg.audit.busy_pct,
                },
                _ => continue,
            });
            q.window = rule_window(src.now_unix_s, *days);
            // The runs alone: the lists' rows read with their key columns, not made into tables.
            if *rule == Rule::GpuIdle {
                for b in src
                    .engine
                    .report_rows(&q, &["cluster", "job_id", "start_unix_ms"])?
                {
                    let c = View::new(&b);
                    let (cluster, job_id, start) =
                        (c.t("cluster")?, c.i("job_id")?, c.i("start_unix_ms")?);
                    for r in 0..b.num_rows() {
                        gpu_idle.insert(
                            (
                                cluster.get(r).map(str::to_string),
                                oi(job_id, r).unwrap_or(-1),
                                oi(start, r).map_or(-1, |ms| ms.div_euclid(1000)),
                            ),
                            (),
                        );
                    }
                }
            } else {
                for (k, pct) in src.engine.cpu_on_gpu_busy(&q)? {
                    busy.insert(k, pct);
                }
            }
        }
        Ok(ReportRuns {
            gpu_idle,
            busy: Arc::new(busy),
        })
    }
}

/// Where a row is: (batch, row in it) of [`scan_rows`]'s batches.
type At = (u32, u32);

/// A job that passed a rule's test of one job: what sorts and counts it, and where its row is.
#[derive(Debug, Clone, Copy)]
struct Hit {
    uid: u32,
    rule: Rule,
    end_unix_ms: u64,
    job_id: u32,
    /// The archive's start second (the run's key).
    start_unix_s: u64,
    at: At,
    pass: Pass,
    mail_never: bool,
}

/// uid → rule → the jobs that passed the rule's test, not reported before.
type PerUser = BTreeMap<u32, BTreeMap<Rule, Vec<Hit>>>;

/// The order of a finding's jobs: most wasteful first, then by end time, then job id (then the
/// index's order).
fn by_waste(a: &Hit, b: &Hit) -> std::cmp::Ordering {
    b.pass
        .waste_hours
        .total_cmp(&a.pass.waste_hours)
        .then((a.end_unix_ms, a.job_id, a.at).cmp(&(b.end_unix_ms, b.job_id, b.at)))
}

/// Each row of `rows` against each rule whose window holds its end: the ones that pass and were
/// not reported to their user for that rule, by user and rule, in the index's order (each
/// user's are put in [`by_waste`] order on the thread that decides for the user). A job two rules
/// take (a TIMEOUT at 3 % CPU) is a hit of each.
fn passing_jobs(
    src: &Sources,
    sent: &(dyn Reported + Sync),
    rules: &[(Rule, u32)],
    rows: &[JobCols],
    reports: &ReportRuns,
    hist: &Histories,
) -> PerUser {
    let windows: Vec<(Rule, Window)> = rules
        .iter()
        .map(|(rule, days)| (*rule, rule_window(src.now_unix_s, *days)))
        .collect();
    // The batches on every core: a hit is one row's alone.
    let numbered: Vec<(usize, &JobCols)> = rows.iter().enumerate().collect();
    let hits: Vec<Vec<Hit>> = in_order_on_every_core(numbered, |batches| {
        let mut hits = Vec::new();
        for (b, cols) in batches {
            for r in 0..cols.rows() {
                let Some(j) = cols.job(r) else {
                    continue;
                };
                for (rule, window) in &windows {
                    if !window.contains_end_ms(j.end_unix_ms as i64) || sent.was_reported(*rule, &j)
                    {
                        continue;
                    }
                    if let Some(pass) = passes(src.cfg, *rule, &j, reports, hist) {
                        hits.push(Hit {
                            uid: j.uid,
                            rule: *rule,
                            end_unix_ms: j.end_unix_ms,
                            job_id: j.job_id,
                            start_unix_s: j.start_unix_s,
                            at: (b as u32, r as u32),
                            pass,
                            mail_never: j.mail_never,
                        });
                    }
                }
            }
        }
        hits
    });
    let mut by_user = PerUser::new();
    for h in hits.into_iter().flatten() {
        by_user
            .entry(h.uid)
            .or_default()
            .entry(h.rule)
            .or_default()
            .push(h);
    }
    by_user
}

/// Keeps the rules whose jobs meet their threshold.
fn still_met(cfg: &Config, per_rule: &mut BTreeMap<Rule, Vec<Hit>>) {
    per_rule.retain(|rule, hits| meets(cfg, *rule, hits));
}

/// Takes out of `per_rule` the jobs run with `--jobscope-mail=never` and says how many (each job
/// once, though it be in several rules).
fn drop_opted_out(per_rule: &mut BTreeMap<Rule, Vec<Hit>>) -> Vec<String> {
    let mut opted = BTreeSet::new();
    for hits in per_rule.values_mut() {
        hits.retain(|h| {
            if h.mail_never {
                opted.insert(h.at);
            }
            !h.mail_never
        });
    }
    match opted.len() {
        0 => vec![],
        1 => vec!["1 job left out: run with --jobscope-mail=never".into()],
        n => vec![format!("{n} jobs left out: run with --jobscope-mail=never")],
    }
}

/// The clusters' names, each held once for all the runs of the findings.
#[derive(Default)]
struct Clusters(BTreeSet<Arc<str>>);

impl Clusters {
    fn of(&mut self, c: Option<&str>) -> Option<Arc<str>> {
        let c = c?;
        if let Some(a) = self.0.get(c) {
            return Some(a.clone());
        }
        let a: Arc<str> = c.into();
        self.0.insert(a.clone());
        Some(a)
    }
}

/// The findings of the rules in `per_rule` (those met), each's jobs in [`by_waste`] order: every
/// run with its waste (`run`), and in full (`job`) the jobs `in_full` asks for.
fn findings_of(
    rules: &[(Rule, u32)],
    per_rule: BTreeMap<Rule, Vec<Hit>>,
    in_full: InFull,
    job: &dyn Fn(&Hit) -> Option<AlertJob>,
    run: &mut dyn FnMut(&Hit) -> FoundRun,
) -> Vec<Finding> {
    per_rule
        .into_iter()
        .map(|(rule, mut hits)| {
            // In this order already when they come from `passing_jobs`: then a pass that moves
            // nothing.
            hits.sort_by(by_waste);
            let full = match in_full {
                InFull::Every => hits.len(),
                InFull::First(n) => n.min(hits.len()),
            };
            let jobs = hits[..full].iter().filter_map(job).collect();
            let runs: Vec<FoundRun> = hits.iter().map(&mut *run).collect();
            Finding {
                rule,
                window_days: rules.iter().find(|r| r.0 == rule).map_or(0, |r| r.1),
                waste_hours: runs.iter().map(|r| r.waste_hours).sum(),
                waste_unit: rule.unit(),
                jobs,
                runs,
            }
        })
        .collect()
}

/// What is done for a user with a rule that fired, and why: nothing left after the opt-outs, no
/// address (`no_address`: why), mailed already in the period that starts at `period_start_s`
/// (`mailed_in`: the period of the last mail), else a mail. In that order.
fn decide(
    findings: &[Finding],
    no_address: Option<String>,
    mailed_in: Option<i64>,
    period_start_s: i64,
) -> (Decision, String) {
    if findings.is_empty() {
        (
            Decision::OptedOut,
            "every job that made a rule fire was run with --jobscope-mail=never".to_string(),
        )
    } else if let Some(e) = no_address {
        (Decision::NoAddress, format!("no address: {e}"))
    } else if let Some(p) = mailed_in.filter(|p| *p == period_start_s) {
        (
            Decision::AlreadyMailed,
            format!(
                "already mailed in this period (from {}); these wait for the next one",
                jobscope_model::time::utc_time(p.max(0) as u64)
            ),
        )
    } else {
        (
            Decision::Mail,
            match findings.len() {
                1 => "1 rule fired over jobs not reported before".to_string(),
                n => format!("{n} rules fired over jobs not reported before"),
            },
        )
    }
}
