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

use anyhow::{Context, Result};
use arrow_array::{Array, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use jobscope_archive::history::{advice_for, read_user, Run, UserHistory};
use jobscope_audit::index::{KeepRows, ParquetEngine, RowPredicate};
use jobscope_audit::query::{Query, Report, Window};
use jobscope_config::Config;
use jobscope_model::job::JobState;
use jobscope_model::summary::analysis::HistoryBasis;
use jobscope_report::present::{clean, history as advice_words, AdviceView};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

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
/// known), and its waste under the rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertJob {
    pub cluster: Option<String>,
    pub job_id: u32,
    /// The archive's start second of the run (with `cluster` and `job_id`, the run's key).
    pub start_unix_s: u64,
    pub end_unix_s: i64,
    pub name: Option<String>,
    pub partition: Option<String>,
    pub state: String,
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
    user: String,
    #[serde(skip)]
    script_sha256: Option<String>,
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

impl AlertJob {
    /// The run's key in the record of sent alerts: `<cluster>/<job_id>/<start_s>`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}",
            self.cluster.as_deref().unwrap_or(""),
            self.job_id,
            self.start_unix_s
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

/// What one rule found for one user.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub rule: Rule,
    pub window_days: u32,
    /// Σ of the jobs' waste.
    pub waste_hours: f64,
    pub waste_unit: WasteUnit,
    /// The jobs, most wasteful first (then by end time).
    pub jobs: Vec<AlertJob>,
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
                f.jobs.iter().map(|j| {
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
                    f.jobs.iter().map(|j| (j.key(), j.end_unix_s)).collect(),
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

/// The typed columns of one batch by name, each looked up once per batch (not per cell).
struct Cols<'a>(&'a RecordBatch);

impl<'a> Cols<'a> {
    fn any(&self, n: &str) -> Result<&'a dyn Array> {
        self.0
            .column_by_name(n)
            .map(|a| a.as_ref())
            .with_context(|| format!("the index has no column {n}"))
    }
    fn typed<T: Array + 'static>(&self, n: &str) -> Result<&'a T> {
        let a = self.any(n)?;
        a.as_any()
            .downcast_ref()
            .with_context(|| format!("column {n} has type {}", a.data_type()))
    }
    fn ints(&self, n: &str) -> Result<&'a Int64Array> {
        self.typed(n)
    }
    fn floats(&self, n: &str) -> Result<&'a Float64Array> {
        self.typed(n)
    }
    fn texts(&self, n: &str) -> Result<&'a StringArray> {
        self.typed(n)
    }
    fn bools(&self, n: &str) -> Result<&'a BooleanArray> {
        self.typed(n)
    }
}

/// Row `r`'s value of a number column (`None`: null).
fn at<T: arrow_array::ArrowPrimitiveType>(
    a: &arrow_array::PrimitiveArray<T>,
    r: usize,
) -> Option<T::Native> {
    (!a.is_null(r)).then(|| a.value(r))
}

/// Row `r`'s text (`None`: null).
fn text(a: &StringArray, r: usize) -> Option<&str> {
    (!a.is_null(r)).then(|| a.value(r))
}

/// Counts and sizes from the index are never negative; one that is (a damaged part) is unknown.
fn nonneg<T: TryFrom<i64>>(v: Option<i64>) -> Option<T> {
    v.and_then(|x| T::try_from(x).ok())
}

/// The jobs that ended in `window` with a uid and a user name (an alert has no one to go to
/// otherwise) that `keep` keeps (the others' columns are not decoded), in the index's end order.
/// Each reader makes the jobs of the batches it decodes, so they are made on every core.
fn scan_jobs(
    eng: &ParquetEngine,
    window: &Window,
    keep: Option<RowPredicate>,
) -> Result<Vec<AlertJob>> {
    let mut q = Query::new(Report::Jobs);
    q.window = window.clone();
    let per_reader = eng.fold_where(
        &q,
        COLUMNS,
        false,
        keep,
        Vec::new,
        |acc: &mut Vec<(usize, Vec<AlertJob>)>, unit, b| {
            acc.push((unit, jobs_of(&b, window)?));
            Ok(())
        },
    )?;
    let mut units: Vec<(usize, Vec<AlertJob>)> = per_reader.into_iter().flatten().collect();
    // Stable: the batches of one row group keep their order.
    units.sort_by_key(|(unit, _)| *unit);
    // Sized once: the jobs are large, and a growing list would copy them all each time.
    let mut out = Vec::with_capacity(units.iter().map(|(_, jobs)| jobs.len()).sum());
    for (_, jobs) in units {
        out.extend(jobs);
    }
    Ok(out)
}

/// The jobs of one batch of [`COLUMNS`] (see [`scan_jobs`]).
fn jobs_of(b: &RecordBatch, window: &Window) -> Result<Vec<AlertJob>> {
    let mut out = Vec::with_capacity(b.num_rows());
    let c = Cols(b);
    let (cluster, job_id, sched_start, start, end) = (
        c.texts("cluster")?,
        c.ints("job_id")?,
        c.ints("scheduler_start_unix_s")?,
        c.ints("start_unix_ms")?,
        c.ints("end_unix_ms")?,
    );
    let (name, script, user, uid, partition, state) = (
        c.texts("name")?,
        c.texts("script_sha256")?,
        c.texts("user")?,
        c.ints("uid")?,
        c.texts("partition")?,
        c.texts("state")?,
    );
    let (elapsed, cores, gpus, mem_req, mem_peak, cpu_usage) = (
        c.floats("elapsed_s")?,
        c.ints("alloc_cores")?,
        c.ints("alloc_gpus")?,
        c.ints("alloc_mem_per_node_bytes")?,
        c.ints("mem_peak_bytes")?,
        c.floats("cpu_usage_s")?,
    );
    let (cpu_eff, core_alloc, core_wasted, mem_wasted, gpu_wasted) = (
        c.floats("cpu_eff_pct")?,
        c.floats("core_hours_alloc")?,
        c.floats("core_hours_wasted")?,
        c.floats("mem_gb_hours_wasted")?,
        c.floats("gpu_hours_wasted")?,
    );
    let (gpus_idle, gpus_never, mail_never) = (
        c.ints("gpus_idle")?,
        c.ints("gpus_never_used")?,
        c.bools("mail_never")?,
    );
    let owned = |a: &StringArray, r| text(a, r).map(str::to_string);
    for r in 0..b.num_rows() {
        let (Some(end_ms), Some(uid), Some(user), Some(job_id)) = (
            at(end, r),
            nonneg::<u32>(at(uid, r)),
            text(user, r),
            nonneg::<u32>(at(job_id, r)),
        ) else {
            continue;
        };
        if !window.contains_end_ms(end_ms) || end_ms < 0 {
            continue;
        }
        let start_ms = nonneg::<u64>(at(start, r)).unwrap_or(0);
        out.push(AlertJob {
            cluster: owned(cluster, r),
            job_id,
            // The archive's key (jobscope_archive::Key::of): SLURM's start second, else the
            // summary's.
            start_unix_s: nonneg::<u64>(at(sched_start, r)).unwrap_or(start_ms / 1000),
            end_unix_s: end_ms.div_euclid(1000),
            name: owned(name, r),
            partition: owned(partition, r),
            state: owned(state, r).unwrap_or_default(),
            elapsed_s: at(elapsed, r).unwrap_or(0.0),
            alloc_cores: nonneg(at(cores, r)),
            alloc_gpus: nonneg(at(gpus, r)),
            alloc_mem_per_node_bytes: nonneg(at(mem_req, r)),
            mem_peak_bytes: nonneg(at(mem_peak, r)),
            cpu_eff_pct: at(cpu_eff, r),
            core_hours_alloc: at(core_alloc, r),
            core_hours_wasted: at(core_wasted, r),
            mem_gb_hours_wasted: at(mem_wasted, r),
            gpu_hours_wasted: at(gpu_wasted, r),
            gpus_idle: nonneg(at(gpus_idle, r)),
            gpus_never_used: nonneg(at(gpus_never, r)),
            mem_peak_p95_bytes: None,
            partition_busy_pct: None,
            waste_hours: 0.0,
            uid,
            user: user.to_string(),
            script_sha256: owned(script, r),
            start_unix_ms: start_ms,
            end_unix_ms: end_ms as u64,
            cpu_usage_s: at(cpu_usage, r),
            // Never null as written; a null would be no wish.
            mail_never: !mail_never.is_null(r) && mail_never.value(r),
        });
    }
    Ok(out)
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
    fn of(&self, j: &AlertJob) -> Option<&V> {
        self.get(
            j.cluster.as_deref(),
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
}

/// The user's run history, read once per user (`None`: none, or not readable).
struct Histories<'a> {
    dir: &'a Path,
    read: HashMap<u32, Option<UserHistory>>,
}

impl Histories<'_> {
    fn of(&mut self, uid: u32) -> Option<&UserHistory> {
        let dir = self.dir;
        self.read
            .entry(uid)
            .or_insert_with(|| read_user(dir, uid).ok().flatten())
            .as_ref()
    }
}

/// The end-of-job advice for the run `j` from its user's history (the same script, else the same
/// name; `audit.history_min_runs`), exactly as the Epilog would add it to `j`'s report.
fn advice(
    cfg: &Config,
    h: &UserHistory,
    j: &AlertJob,
) -> Option<jobscope_model::summary::analysis::HistoryAdvice> {
    advice_for(
        h,
        j.name.as_deref(),
        j.script_sha256.as_deref(),
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

impl Pass {
    /// `j` as the finding of this pass lists it.
    fn apply(self, mut j: AlertJob) -> AlertJob {
        j.waste_hours = self.waste_hours;
        j.mem_peak_p95_bytes = self.mem_peak_p95_bytes;
        j.partition_busy_pct = self.partition_busy_pct;
        j
    }
}

/// Whether `j` passes `rule`'s test of one job, and what it gets. `reports` holds the runs of the
/// audit's `gpu-idle` report and the busy ones of its `cpu-on-gpu` report with their busy share.
fn passes(
    cfg: &Config,
    rule: Rule,
    j: &AlertJob,
    reports: &ReportRuns,
    hist: &mut Histories,
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
                .and_then(|h| advice(cfg, h, j))
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
fn meets(cfg: &Config, rule: Rule, jobs: &[AlertJob]) -> bool {
    let a = &cfg.alerts;
    let n = jobs.len() as u64;
    match rule {
        Rule::GpuIdle => {
            !jobs.is_empty()
                && jobs.iter().map(|j| j.waste_hours).sum::<f64>() >= a.gpu_idle.min_gpu_hours
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
    fn was_reported(&self, rule: Rule, j: &AlertJob) -> bool;
    fn mailed_in(&self, uid: u32) -> Option<i64>;
}

/// At most this many `#SBATCH` blocks in one alert.
const MAX_ADVICE_BLOCKS: usize = 5;

/// The advice blocks for the jobs of `findings`: one per batch script or job name the history
/// has enough runs of, for the most wasteful jobs first (each as "this run"), worded as the
/// end-of-job report words them and headed by the job they were made for, job names cleaned.
fn advice_blocks(cfg: &Config, h: &UserHistory, findings: &[Finding]) -> Vec<AdviceBlock> {
    let mut tried = BTreeSet::new();
    let mut given = BTreeSet::new();
    let mut out = Vec::new();
    for j in findings.iter().flat_map(|f| &f.jobs) {
        if !tried.insert((j.script_sha256.clone(), j.name.clone())) {
            continue;
        }
        let Some(mut a) = advice(cfg, h, j) else {
            continue;
        };
        // Two names of one script get the same advice: given once.
        let same = match a.basis {
            HistoryBasis::SameScript => (j.script_sha256.clone(), None),
            HistoryBasis::SameName => (None, j.name.clone()),
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
/// the audit's own reports decide ([`ReportRuns::ask`]); each job against each rule
/// ([`passing_jobs`]); then per user, the opt-outs taken away ([`OptOuts::drop_from`]), the rules
/// still met ([`findings_of`]) and the decision ([`decide`]).
pub fn evaluate(src: &Sources, sent: &dyn Reported) -> Result<Evaluation> {
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
    let keep = candidates(src, &rules, &reports);
    let jobs = scan_jobs(src.engine, &rule_window(now, longest), Some(keep))?;
    let mut hist = Histories {
        dir: src.index_dir,
        read: HashMap::new(),
    };
    let by_user = passing_jobs(src, sent, &rules, jobs, &reports, &mut hist);
    for (uid, mut per_rule) in by_user {
        per_rule.retain(|rule, jobs| meets(cfg, *rule, jobs));
        if per_rule.is_empty() {
            continue;
        }
        let user = per_rule
            .values()
            .flatten()
            .next()
            .map(|j| j.user.clone())
            .unwrap_or_default();
        // Only the jobs of rules that fired: the user's wish can only take jobs away.
        let notes = drop_opted_out(&mut per_rule);
        let findings = findings_of(cfg, &rules, per_rule);
        let to = jobscope_deliver::mail::message::choose_recipient(
            None,
            Some(&user),
            cfg.mail.domain.as_deref(),
        );
        let (decision, reason) = decide(
            &findings,
            to.as_ref().err().map(|e| e.to_string()),
            sent.mailed_in(uid),
            ev.period_start_unix_s,
        );
        let advice = match hist.of(uid) {
            Some(h) if !findings.is_empty() => advice_blocks(cfg, h, &findings),
            _ => Vec::new(),
        };
        ev.users.push(UserAlert {
            uid,
            user,
            to: to.ok().map(|r| r.mailbox.email.to_string()),
            decision,
            reason,
            findings,
            advice,
            notes,
        });
    }
    Ok(ev)
}

/// The rows that can pass the test of one job of an enabled rule: what [`passes`] asks of a job,
/// less what needs more than its row (the user's history, beyond having one; the records), so
/// that the others' columns are never decoded. A year of 3 million jobs holds a few hundred
/// thousand such rows.
fn candidates(src: &Sources, rules: &[(Rule, u32)], reports: &ReportRuns) -> RowPredicate {
    let a = src.cfg.alerts.clone();
    let on: Vec<Rule> = rules.iter().map(|r| r.0).collect();
    // The users with a run history (`mem_request` has nothing to compare with for the others).
    let with_history: std::collections::HashSet<u32> = if on.contains(&Rule::MemRequest) {
        std::fs::read_dir(src.index_dir.join(jobscope_archive::history::HISTORY_DIR))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json")?.parse().ok())
            .collect()
    } else {
        Default::default()
    };
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
    let keep: KeepRows = std::sync::Arc::new(move |b: &RecordBatch| {
        let b = jobscope_audit::arrow::with_derived(b, &wanted)?;
        let c = Cols(&b);
        let has = |r: Rule| on.contains(&r);
        let uid = c.ints("uid")?;
        let alloc_h = if has(Rule::CpuEfficiency) || has(Rule::CpuOnGpu) {
            Some(c.floats("core_hours_alloc")?)
        } else {
            None
        };
        let gpu_wasted = has(Rule::GpuIdle)
            .then(|| c.floats("gpu_hours_wasted"))
            .transpose()?;
        let cpu_eff = has(Rule::CpuEfficiency)
            .then(|| c.floats("cpu_eff_pct"))
            .transpose()?;
        let mem = if has(Rule::MemRequest) {
            Some((
                c.ints("alloc_mem_per_node_bytes")?,
                c.texts("name")?,
                c.texts("script_sha256")?,
            ))
        } else {
            None
        };
        let state = has(Rule::Timeouts).then(|| c.texts("state")).transpose()?;
        let run = if has(Rule::CpuOnGpu) {
            Some((c.ints("job_id")?, c.ints("start_unix_ms")?))
        } else {
            None
        };
        let mut out = vec![false; b.num_rows()];
        for (r, k) in out.iter_mut().enumerate() {
            let Some(uid) = nonneg::<u32>(at(uid, r)) else {
                continue;
            };
            let alloc_h = alloc_h.and_then(|a| at(a, r));
            *k = on.iter().any(|rule| match rule {
                Rule::GpuIdle => gpu_wasted.and_then(|g| at(g, r)).is_some_and(|w| w > 0.0),
                Rule::CpuEfficiency => {
                    cpu_eff
                        .and_then(|e| at(e, r))
                        .is_some_and(|e| e < a.cpu_efficiency.max_cpu_eff_pct)
                        && alloc_h.is_some_and(|h| h >= a.cpu_efficiency.min_core_hours)
                }
                Rule::MemRequest => mem.is_some_and(|(req, name, script)| {
                    with_history.contains(&uid)
                        && !req.is_null(r)
                        && !(name.is_null(r) && script.is_null(r))
                }),
                Rule::Timeouts => state.is_some_and(|s| text(s, r) == Some(timeout)),
                Rule::CpuOnGpu => {
                    alloc_h.is_some_and(|h| h >= a.cpu_on_gpu.min_core_hours)
                        && run.is_some_and(|(job_id, start)| {
                            let start_s = (nonneg::<u64>(at(start, r)).unwrap_or(0) / 1000) as i64;
                            busy.has_id(at(job_id, r).unwrap_or(-1), start_s)
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
                    let c = Cols(&b);
                    let (cluster, job_id, start) = (
                        c.texts("cluster")?,
                        c.ints("job_id")?,
                        c.ints("start_unix_ms")?,
                    );
                    for r in 0..b.num_rows() {
                        gpu_idle.insert(
                            (
                                text(cluster, r).map(str::to_string),
                                at(job_id, r).unwrap_or(-1),
                                at(start, r).map_or(-1, |ms| ms.div_euclid(1000)),
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
            busy: std::sync::Arc::new(busy),
        })
    }
}

/// uid → rule → the jobs that passed the rule's test, not reported before.
type PerUser = BTreeMap<u32, BTreeMap<Rule, Vec<AlertJob>>>;

/// Each job of `jobs` against each rule whose window holds its end: the ones that pass and were
/// not reported to their user for that rule, by user and rule, each rule's jobs most wasteful
/// first (then by end time, then job id). The passes are found and sorted as small entries
/// first; then each job is moved once into its finding, and copied only for a second rule it
/// passes (a TIMEOUT at 3 % CPU is in two).
fn passing_jobs(
    src: &Sources,
    sent: &dyn Reported,
    rules: &[(Rule, u32)],
    jobs: Vec<AlertJob>,
    reports: &ReportRuns,
    hist: &mut Histories,
) -> PerUser {
    let windows: Vec<(Rule, Window)> = rules
        .iter()
        .map(|(rule, days)| (*rule, rule_window(src.now_unix_s, *days)))
        .collect();
    // (uid, rule, waste, end, job id, index in `jobs`, the pass)
    let mut hits: Vec<(u32, Rule, f64, u64, u32, usize, Pass)> = Vec::new();
    let mut uses = vec![0u8; jobs.len()];
    for (i, j) in jobs.iter().enumerate() {
        for (rule, window) in &windows {
            if !window.contains_end_ms(j.end_unix_ms as i64) || sent.was_reported(*rule, j) {
                continue;
            }
            if let Some(p) = passes(src.cfg, *rule, j, reports, hist) {
                hits.push((j.uid, *rule, p.waste_hours, j.end_unix_ms, j.job_id, i, p));
                uses[i] += 1;
            }
        }
    }
    hits.sort_unstable_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then(b.2.total_cmp(&a.2))
            .then((a.3, a.4, a.5).cmp(&(b.3, b.4, b.5)))
    });
    let mut slots: Vec<Option<AlertJob>> = jobs.into_iter().map(Some).collect();
    let mut by_user = PerUser::new();
    for group in hits.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
        let (uid, rule) = (group[0].0, group[0].1);
        let mut listed = Vec::with_capacity(group.len());
        for &(.., i, p) in group {
            uses[i] -= 1;
            let j = if uses[i] == 0 {
                slots[i].take()
            } else {
                slots[i].clone()
            };
            listed.extend(j.map(|j| p.apply(j)));
        }
        by_user.entry(uid).or_default().insert(rule, listed);
    }
    by_user
}

/// Takes out of `per_rule` the jobs run with `--jobscope-mail=never` and says how many (each job
/// once, though it be in several rules).
fn drop_opted_out(per_rule: &mut BTreeMap<Rule, Vec<AlertJob>>) -> Vec<String> {
    let mut opted = BTreeSet::new();
    for jobs in per_rule.values_mut() {
        jobs.retain(|j| {
            if j.mail_never {
                opted.insert(j.key());
            }
            !j.mail_never
        });
    }
    match opted.len() {
        0 => vec![],
        1 => vec!["1 job left out: run with --jobscope-mail=never".into()],
        n => vec![format!("{n} jobs left out: run with --jobscope-mail=never")],
    }
}

/// The findings of the rules still met by the jobs left, each's jobs most wasteful first (then by
/// end time, then job id).
fn findings_of(
    cfg: &Config,
    rules: &[(Rule, u32)],
    per_rule: BTreeMap<Rule, Vec<AlertJob>>,
) -> Vec<Finding> {
    per_rule
        .into_iter()
        .filter(|(rule, jobs)| meets(cfg, *rule, jobs))
        .map(|(rule, mut jobs)| {
            // In this order already when they come from `passing_jobs`: then a pass that moves
            // nothing.
            jobs.sort_by(|a, b| {
                b.waste_hours
                    .total_cmp(&a.waste_hours)
                    .then(a.end_unix_ms.cmp(&b.end_unix_ms))
                    .then(a.job_id.cmp(&b.job_id))
            });
            Finding {
                rule,
                window_days: rules.iter().find(|r| r.0 == rule).map_or(0, |r| r.1),
                waste_hours: jobs.iter().map(|j| j.waste_hours).sum(),
                waste_unit: rule.unit(),
                jobs,
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
