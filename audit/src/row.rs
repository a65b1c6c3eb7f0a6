//! The flat row: one per archived job, the unit every audit engine works on (the Parquet index,
//! PostgreSQL). Built from a [`JobSummary`] by one pure function, [`JobRow::of`], so every engine
//! sees the same figures; the archive's JSON stays the truth and a row can always be rebuilt.
//!
//! Units are in the names. A figure the summary does not have is `None` (written as a null), never 0.
//! [`COLUMNS`] lists the columns in order with their types; [`JobRow::values`] gives one row's values
//! in that order (what a SQL sink binds). All three are generated from the one field list of
//! `row_table!`, so they cannot drift apart.

use super::table::{ColType, Value};
use jobscope_model::summary::analysis::{self, FindingKind, JobClass, Verdict};
use jobscope_model::summary::JobSummary;

/// A field type of a row: its column type and its cell. Integers widen to i64 as before (u64 with
/// `as`: counts, bytes and times stay far below 2⁶³); `Option` is the nullable form of each.
trait Cell {
    const TYPE: ColType;
    fn cell(&self) -> Value;
}

macro_rules! cells {
    ($($t:ty => $kind:ident(|$x:ident| $conv:expr)),* $(,)?) => {$(
        impl Cell for $t {
            const TYPE: ColType = ColType::$kind;
            fn cell(&self) -> Value {
                let $x = self;
                Value::$kind($conv)
            }
        }
    )*};
}

cells! {
    u32 => Int(|x| i64::from(*x)),
    i32 => Int(|x| i64::from(*x)),
    u64 => Int(|x| *x as i64),
    f64 => Float(|x| *x),
    bool => Bool(|x| *x),
    String => Text(|x| x.clone()),
}

impl<T: Cell> Cell for Option<T> {
    const TYPE: ColType = T::TYPE;
    fn cell(&self) -> Value {
        self.as_ref().map_or(Value::Null, Cell::cell)
    }
}

/// A row struct, its column list (name = field name, type from the field's type) and its
/// `values()`, from one list of fields: a column is added, renamed or moved in one place.
macro_rules! row_table {
    (
        $(#[$meta:meta])*
        struct $row:ident;
        $(#[$cmeta:meta])*
        const $cols:ident;
        { $( $(#[$doc:meta])* $name:ident : $ty:ty, )* }
    ) => {
        $(#[$meta])*
        pub struct $row {
            $( $(#[$doc])* pub $name: $ty, )*
        }

        $(#[$cmeta])*
        pub const $cols: &[(&str, ColType)] = &[$( (stringify!($name), <$ty as Cell>::TYPE), )*];

        impl $row {
            #[doc = concat!("This row's values in [`", stringify!($cols), "`] order (what a SQL sink binds, what tests compare).")]
            pub fn values(&self) -> Vec<Value> {
                vec![$( Cell::cell(&self.$name), )*]
            }
        }
    };
}

row_table! {
    /// One job, flat. Field order = [`COLUMNS`] order.
    #[derive(Debug, Clone, PartialEq, Default)]
    struct JobRow;
    /// Column names and types, in [`JobRow`] field order. Names are the Parquet and SQL column names.
    const COLUMNS;
    {
        // Identity (the archive's key: cluster, job_id, scheduler_start_unix_s).
        cluster: Option<String>,
        job_id: u32,
        array_job_id: Option<u32>,
        array_task_id: Option<u32>,
        scheduler_start_unix_s: Option<u64>,
        name: Option<String>,
        /// SHA-256 of the batch script, lower-case hex; `None` for jobs without one (`srun`, `salloc`),
        /// when it could not be read, and in documents archived before it was recorded.
        script_sha256: Option<String>,
        user: Option<String>,
        uid: Option<u32>,
        group: Option<String>,
        gid: Option<u32>,
        account: Option<String>,
        partition: Option<String>,
        /// `None` when SLURM named none (a cluster without accounting) or the document predates it.
        qos: Option<String>,
        node_count: u32,
        /// The nodes of the allocation (reported and missing), sorted, comma-separated.
        node_list: String,
        /// `None` when SLURM gave none or the document predates it.
        submit_unix_s: Option<u64>,
        start_unix_ms: u64,
        end_unix_ms: u64,
        elapsed_s: f64,
        /// SLURM's state name (`COMPLETED`, `FAILED`, `TIMEOUT`, …).
        state: String,
        exit_code: Option<i32>,
        alloc_cores: Option<u32>,
        alloc_mem_per_node_bytes: Option<u64>,
        /// GPUs of the allocation: those measured, else the count in SLURM's GPU list.
        alloc_gpus: Option<u32>,
        time_limit_s: Option<u64>,
        cpu_usage_s: Option<f64>,
        cpu_user_s: Option<f64>,
        cpu_system_s: Option<f64>,
        mem_peak_bytes: Option<u64>,
        mem_rss_peak_bytes: Option<u64>,
        io_read_bytes: Option<u64>,
        io_write_bytes: Option<u64>,
        /// Mean over the job's GPUs of each GPU's mean utilization (GPUs with a figure).
        gpu_util_mean_pct: Option<f64>,
        gpu_mem_peak_bytes: Option<u64>,
        gpu_energy_kwh: Option<f64>,
        /// GPUs that were idle or never used (the analysis' count).
        gpus_idle: Option<u32>,
        gpus_never_used: Option<u32>,
        /// SM activity (NVML GPM, docs/gpu.md) over the job's GPUs that have it, each weighted by
        /// its GPU-hours; null where no GPU had GPM (before Hopper, MIG, older archives).
        gpu_sm_active_mean_pct: Option<f64>,
        /// Time the job's GPUs were held back by their power cap or a thermal limit, summed over
        /// GPUs, seconds: the node's doing, not the job's.
        gpu_throttle_s: Option<f64>,
        /// XID errors NVML reported on the job's GPUs.
        gpu_xid_errors: Option<u64>,
        /// Uncorrected ECC errors on the job's GPUs during the job.
        gpu_ecc_uncorrected: Option<u64>,
        core_hours_alloc: Option<f64>,
        core_hours_used: Option<f64>,
        core_hours_wasted: Option<f64>,
        mem_gb_hours_alloc: Option<f64>,
        /// Per-node peak × elapsed, summed over nodes (what the job needed to hold); `None`
        /// unless every reported node's peak was measured.
        mem_gb_hours_used: Option<f64>,
        mem_gb_hours_wasted: Option<f64>,
        gpu_hours_alloc: Option<f64>,
        gpu_hours_used: Option<f64>,
        gpu_hours_wasted: Option<f64>,
        cpu_eff_pct: Option<f64>,
        mem_eff_pct: Option<f64>,
        time_eff_pct: Option<f64>,
        /// The analysis' class (`cpu_bound`, `gpu_idle`, …); `None` without an analysis.
        class: Option<String>,
        /// The scalability verdict (`serial`, `parallel`, …); `None` without one.
        verdict: Option<String>,
        flag_oom: bool,
        flag_near_oom: bool,
        flag_timeout: bool,
        flag_mem_leak: bool,
        flag_idle: bool,
        flag_stalled: bool,
        flag_gpu_finding: bool,
        // The kernel view (docs/kernel.md): `None` where the node had no collector, or for what
        // it did not count (system calls without `--syscalls`).
        /// Time the job's tasks were runnable but waiting for a CPU, summed over tasks and
        /// nodes, in hours (like the resource-hours: the usage report sums it).
        cpu_wait_hours: Option<f64>,
        /// That wait as a share of the tasks' runnable time (the analysis' figure).
        cpu_wait_pct: Option<f64>,
        ctx_switches_involuntary: Option<u64>,
        syscalls: Option<u64>,
        /// Synchronisation calls (futex…) as a share of all system calls (the analysis' figure).
        lock_share_pct: Option<f64>,
        /// Reads and writes of under 4 KiB.
        small_io_calls: Option<u64>,
        net_sent_bytes: Option<u64>,
        net_received_bytes: Option<u64>,
        block_read_bytes: Option<u64>,
        block_write_bytes: Option<u64>,
        flag_cpu_wait: bool,
        flag_lock_contention: bool,
        flag_small_io: bool,
        /// Some data is missing: figures are lower bounds.
        partial: bool,
        samples: u64,
        /// The user ran it with `--jobscope-mail=never` (the record's `user_options.mail`, the
        /// wish the end-of-job mail obeys first): the alerts leave it out.
        mail_never: bool,
    }
}

/// The snake_case name serde gives an analysis enum (the archive's own spelling).
fn serde_name<T: serde::Serialize>(v: &T) -> Option<String> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => Some(s),
        _ => None,
    }
}

/// The sum of the values present; `None` when none is (not measured is not 0).
fn sum_some<T: std::iter::Sum<T>>(v: impl Iterator<Item = Option<T>>) -> Option<T> {
    let mut any = false;
    let s = v.flatten().inspect(|_| any = true).sum::<T>();
    any.then_some(s)
}

/// Mean SM activity over the GPUs that have it, weighted by their GPU-hours (a GPU of a longer
/// allocation counts for more); `None` when no GPU has it or they have no hours.
fn sm_weighted(gpus: &[&jobscope_model::gpu::summary::GpuSummary]) -> Option<f64> {
    let (sum, hours) = gpus
        .iter()
        .filter_map(|g| Some((g.sm_active_mean_pct?, g.gpu_hours_allocated)))
        .filter(|(_, h)| h.is_finite() && *h > 0.0)
        .fold((0.0, 0.0), |(s, w), (p, h)| (s + p * h, w + h));
    (hours > 0.0).then(|| sum / hours)
}

impl JobRow {
    /// The row of one archived job. Pure. The waste figures are the report's own
    /// ([`analysis::waste`], recomputed from the summary's figures, so a document whose analysis
    /// was not kept, a version-1 upgrade, still has them); class, verdict and flags come from the
    /// stored analysis and are `None`/false without one.
    pub fn of(s: &JobSummary) -> JobRow {
        let gpus: Vec<&jobscope_model::gpu::summary::GpuSummary> =
            s.nodes.iter().flat_map(|n| n.gpus.iter()).collect();
        let w = analysis::waste(s);
        let utils: Vec<f64> = gpus.iter().filter_map(|g| g.util_mean_pct).collect();
        let energies: Vec<f64> = gpus.iter().filter_map(|g| g.energy_kwh).collect();
        let slurm_gpus = s
            .alloc
            .gpus
            .as_deref()
            .map(|l| l.split(',').filter(|x| !x.trim().is_empty()).count() as u32)
            .filter(|&n| n > 0);

        let mut node_list: Vec<&str> = s
            .nodes
            .iter()
            .map(|n| n.node.as_str())
            .chain(s.missing_nodes.iter().map(String::as_str))
            .collect();
        node_list.sort_unstable();
        node_list.dedup();

        let a = s.analysis.as_ref();
        let k = s.kernel.as_ref();
        let has = |f: &dyn Fn(&FindingKind) -> bool| {
            a.is_some_and(|a| a.anomalies.iter().any(|x| f(&x.what)))
        };
        JobRow {
            cluster: s.cluster.clone(),
            job_id: s.job_id,
            array_job_id: s.array_job_id,
            array_task_id: s.array_task_id,
            scheduler_start_unix_s: s.scheduler_start_unix_s,
            name: s.name.clone(),
            script_sha256: s.script_sha256.clone(),
            user: s.user.clone(),
            uid: s.uid,
            group: s.group.clone(),
            gid: s.gid,
            account: s.account.clone(),
            partition: s.partition.clone(),
            qos: s.qos.clone(),
            node_count: s.alloc.nodes,
            node_list: node_list.join(","),
            submit_unix_s: s.submit_unix_s,
            start_unix_ms: s.start_unix_ms,
            end_unix_ms: s.end_unix_ms,
            elapsed_s: s.elapsed_s,
            state: s.state.as_str().to_string(),
            exit_code: s.exit_code,
            alloc_cores: s.alloc.cores,
            alloc_mem_per_node_bytes: s.alloc.mem_per_node_bytes,
            alloc_gpus: if gpus.is_empty() {
                slurm_gpus
            } else {
                Some(gpus.len() as u32)
            },
            time_limit_s: s.alloc.time_limit_s,
            cpu_usage_s: s.cpu.usage_s,
            cpu_user_s: s.cpu.user_s,
            cpu_system_s: s.cpu.system_s,
            mem_peak_bytes: s.mem.peak_bytes,
            mem_rss_peak_bytes: s.mem.rss_peak_bytes,
            io_read_bytes: s.io.read_bytes,
            io_write_bytes: s.io.write_bytes,
            gpu_util_mean_pct: (!utils.is_empty())
                .then(|| utils.iter().sum::<f64>() / utils.len() as f64),
            gpu_mem_peak_bytes: gpus.iter().filter_map(|g| g.mem_peak_bytes).max(),
            gpu_energy_kwh: (!energies.is_empty()).then(|| energies.iter().sum()),
            gpus_idle: a
                .filter(|_| !gpus.is_empty())
                .map(|a| a.classification.evidence.gpus_idle),
            gpus_never_used: (!gpus.is_empty())
                .then(|| gpus.iter().filter(|g| g.never_used).count() as u32),
            gpu_sm_active_mean_pct: sm_weighted(&gpus),
            gpu_throttle_s: sum_some(
                gpus.iter()
                    .flat_map(|g| [g.throttle_power_s, g.throttle_thermal_s]),
            ),
            gpu_xid_errors: sum_some(gpus.iter().map(|g| g.xid_errors)),
            gpu_ecc_uncorrected: sum_some(gpus.iter().map(|g| g.ecc_uncorrected)),
            core_hours_alloc: w.core_hours_allocated,
            core_hours_used: w.core_hours_used,
            core_hours_wasted: w.core_hours_wasted,
            mem_gb_hours_alloc: w.mem_gb_hours_allocated,
            mem_gb_hours_used: w.mem_gb_hours_needed,
            mem_gb_hours_wasted: w.mem_gb_hours_wasted,
            gpu_hours_alloc: w.gpu_hours_allocated,
            gpu_hours_used: w.gpu_hours_used(),
            gpu_hours_wasted: w.gpu_hours_wasted,
            cpu_eff_pct: s.efficiency.cpu_pct,
            mem_eff_pct: s.efficiency.mem_pct,
            time_eff_pct: s.efficiency.time_pct,
            class: a.and_then(|a| serde_name::<JobClass>(&a.classification.class)),
            verdict: a
                .and_then(|a| a.scalability.as_ref())
                .and_then(|sc| serde_name::<Verdict>(&sc.verdict)),
            flag_oom: has(&|f| matches!(f, FindingKind::Oom { .. })),
            flag_near_oom: has(&|f| matches!(f, FindingKind::NearOom { .. })),
            flag_timeout: has(&|f| matches!(f, FindingKind::Timeout { .. })),
            flag_mem_leak: has(&|f| matches!(f, FindingKind::MemoryLeak { .. })),
            flag_idle: has(&|f| {
                matches!(
                    f,
                    FindingKind::IdlePhase { .. } | FindingKind::BusyThenIdle { .. }
                )
            }),
            flag_stalled: has(&|f| matches!(f, FindingKind::Stalled { .. })),
            flag_gpu_finding: has(&|f| matches!(f, FindingKind::Gpu { .. })),
            cpu_wait_hours: k.and_then(|k| k.cpu_wait_s).map(|s| s / 3600.0),
            cpu_wait_pct: a.and_then(|a| a.classification.evidence.cpu_wait_pct),
            ctx_switches_involuntary: k.and_then(|k| k.ctx_switches_involuntary),
            syscalls: k.and_then(|k| k.syscalls.as_ref()).map(|c| c.total()),
            lock_share_pct: a.and_then(|a| a.classification.evidence.lock_share_pct),
            small_io_calls: k.and_then(|k| match (k.small_reads, k.small_writes) {
                (None, None) => None,
                (r, w) => Some(r.unwrap_or(0).saturating_add(w.unwrap_or(0))),
            }),
            net_sent_bytes: k.and_then(|k| k.net_sent_bytes),
            net_received_bytes: k.and_then(|k| k.net_received_bytes),
            block_read_bytes: k.and_then(|k| k.block_read_bytes),
            block_write_bytes: k.and_then(|k| k.block_write_bytes),
            flag_cpu_wait: has(&|f| matches!(f, FindingKind::CpuWait { .. })),
            flag_lock_contention: has(&|f| matches!(f, FindingKind::LockContention { .. })),
            flag_small_io: has(&|f| matches!(f, FindingKind::SmallIo { .. })),
            partial: s.partial,
            samples: s.samples,
            mail_never: s
                .user_options
                .get("mail")
                .and_then(|m| jobscope_config::MailPolicy::parse(m))
                == Some(jobscope_config::MailPolicy::Never),
        }
    }
}

row_table! {
    /// One node of one job (the per-node table): the job's key plus this node's own figures.
    #[derive(Debug, Clone, PartialEq, Default)]
    struct NodeRow;
    /// Column names and types, in [`NodeRow`] field order.
    const NODE_COLUMNS;
    {
        cluster: Option<String>,
        job_id: u32,
        scheduler_start_unix_s: Option<u64>,
        uid: Option<u32>,
        partition: Option<String>,
        node: String,
        start_unix_ms: u64,
        end_unix_ms: u64,
        alloc_cores: Option<u32>,
        alloc_mem_bytes: Option<u64>,
        cpu_usage_s: Option<f64>,
        mem_peak_bytes: Option<u64>,
        cpu_eff_pct: Option<f64>,
        gpus: u32,
        gpu_util_mean_pct: Option<f64>,
        gpu_energy_kwh: Option<f64>,
        samples: u64,
    }
}

impl NodeRow {
    /// The job's nodes that reported (a missing node has no figures of its own; the job row names it).
    pub fn of(s: &JobSummary) -> Vec<NodeRow> {
        s.nodes
            .iter()
            .map(|n| {
                let utils: Vec<f64> = n.gpus.iter().filter_map(|g| g.util_mean_pct).collect();
                let energies: Vec<f64> = n.gpus.iter().filter_map(|g| g.energy_kwh).collect();
                NodeRow {
                    cluster: s.cluster.clone(),
                    job_id: s.job_id,
                    scheduler_start_unix_s: s.scheduler_start_unix_s,
                    uid: s.uid,
                    partition: s.partition.clone(),
                    node: n.node.clone(),
                    start_unix_ms: n.start_unix_ms,
                    end_unix_ms: n.end_unix_ms,
                    alloc_cores: n.alloc_cores,
                    alloc_mem_bytes: n.alloc_mem_bytes,
                    cpu_usage_s: n.cpu.usage_s,
                    mem_peak_bytes: n.mem.peak_bytes,
                    cpu_eff_pct: n.cpu_efficiency_pct,
                    gpus: n.gpus.len() as u32,
                    gpu_util_mean_pct: (!utils.is_empty())
                        .then(|| utils.iter().sum::<f64>() / utils.len() as f64),
                    gpu_energy_kwh: (!energies.is_empty()).then(|| energies.iter().sum()),
                    samples: n.quality.samples,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobscope_model::job::JobFacts;
    use jobscope_model::summary::NodeSummary;
    use jobscope_report::pipeline;
    use jobscope_report::present::fmt_hours;
    use jobscope_report::slurm::{decide_end, EpilogEnv};
    use std::path::Path;

    /// A recorded job (`report/testdata/recorded/<case>`): SLURM's facts and its nodes' summaries
    /// (with their names), as the Epilog makes them.
    fn recorded(case: &str) -> (JobFacts, Vec<NodeSummary>, Vec<String>) {
        let r = pipeline::testing::recorded(case, &jobscope_config::Config::default());
        (r.facts, r.nodes, r.names)
    }

    /// The recorded serial job (`report/testdata/recorded/serial`): its one node `vm`.
    fn recorded_serial() -> (JobFacts, NodeSummary) {
        let (facts, mut nodes, _) = recorded("serial");
        (facts, nodes.remove(0))
    }

    /// The job summary the Epilog makes of `nodes`, with its analysis (the report's figures).
    fn analysed(facts: &JobFacts, nodes: Vec<NodeSummary>, names: &[String]) -> JobSummary {
        let env = EpilogEnv {
            job_id: facts.job_id,
            node: names[0].clone(),
            ..Default::default()
        };
        let facts = env.facts_with(Some(facts.clone()));
        let cfg = jobscope_config::Config::default();
        pipeline::job(&facts, nodes, names, &cfg, "t", &decide_end)
    }

    /// The report's waste (the analysis the report is rendered from) and the audit row's, which
    /// must be the same figures, to the bit.
    fn assert_same_waste(case: &str, s: &JobSummary) {
        let w = &s.analysis.as_ref().expect("an analysed summary").waste;
        let row = JobRow::of(s);
        let report = [
            w.core_hours_allocated,
            w.core_hours_used,
            w.core_hours_wasted,
            w.mem_gb_hours_allocated,
            w.mem_gb_hours_needed,
            w.mem_gb_hours_wasted,
            w.gpu_hours_allocated,
            w.gpu_hours_wasted,
        ];
        let audit = [
            row.core_hours_alloc,
            row.core_hours_used,
            row.core_hours_wasted,
            row.mem_gb_hours_alloc,
            row.mem_gb_hours_used,
            row.mem_gb_hours_wasted,
            row.gpu_hours_alloc,
            row.gpu_hours_wasted,
        ];
        assert_eq!(
            report, audit,
            "{case}: the report's waste vs the audit row's"
        );
    }

    /// The figure of one waste line of the text report (`Memory GB-hours    0.0099 unused of …`).
    fn report_line<'a>(text: &'a str, label: &str) -> &'a str {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label} line in\n{text}"))
            .trim()
    }

    /// Every recorded spool: the report's waste and the audit row's are the same figures, and the
    /// text report shows the row's unused hours. Every recorded job measured its CPU and memory,
    /// so each figure is known.
    #[test]
    fn the_reports_waste_and_the_audit_rows_agree_on_every_recorded_spool() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/testdata/recorded");
        let mut cases: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        cases.sort();
        assert!(cases.len() >= 6, "{cases:?}");
        for case in &cases {
            let (facts, nodes, names) = recorded(case);
            let s = analysed(&facts, nodes, &names);
            assert_same_waste(case, &s);
            let row = JobRow::of(&s);
            for (name, v) in [
                ("core_hours_wasted", row.core_hours_wasted),
                ("mem_gb_hours_wasted", row.mem_gb_hours_wasted),
            ] {
                assert!(v.is_some_and(f64::is_finite), "{case}: {name} {v:?}");
            }
            let text = jobscope_report::present::render_text(&s, false).unwrap();
            for (label, unused) in [
                ("Core-hours", row.core_hours_wasted),
                ("Memory GB-hours", row.mem_gb_hours_wasted),
            ] {
                let line = report_line(&text, label);
                let want = format!("{} unused of ", fmt_hours(unused));
                assert!(line.starts_with(&want), "{case}: {line:?} vs {want:?}");
            }
        }
    }

    /// The GPU health and SM columns: SM activity weighted by GPU-hours over the GPUs that have
    /// it, throttle seconds, XID and uncorrected ECC errors summed; null, never 0, without them.
    #[test]
    fn the_gpu_sm_and_health_columns_sum_the_gpus_and_are_null_without_them() {
        let (facts, node) = recorded_serial();
        let mut plain = node.clone();
        plain.gpus = vec![crate::testing::gpu("vm", 0, 1.0, true)];
        let row = JobRow::of(&analysed(&facts, vec![plain], &["vm".into()]));
        assert_eq!(
            (
                row.gpu_sm_active_mean_pct,
                row.gpu_throttle_s,
                row.gpu_xid_errors,
                row.gpu_ecc_uncorrected
            ),
            (None, None, None, None)
        );
        let mut a = crate::testing::gpu("vm", 0, 3.0, true);
        a.sm_active_mean_pct = Some(10.0);
        a.throttle_power_s = Some(600.0);
        a.throttle_thermal_s = Some(30.0);
        a.xid_errors = Some(2);
        a.ecc_uncorrected = Some(0);
        let mut b = crate::testing::gpu("vm", 1, 1.0, true);
        b.sm_active_mean_pct = Some(90.0);
        b.throttle_power_s = Some(0.0);
        // c: no GPM, no health figures (an A100): left out of the mean and the sums
        let c = crate::testing::gpu("vm", 2, 4.0, true);
        let mut node = node;
        node.gpus = vec![a, b, c];
        let row = JobRow::of(&analysed(&facts, vec![node], &["vm".into()]));
        // (10 × 3 h + 90 × 1 h) / 4 h = 30
        assert_eq!(row.gpu_sm_active_mean_pct, Some(30.0));
        assert_eq!(row.gpu_throttle_s, Some(630.0));
        assert_eq!(row.gpu_xid_errors, Some(2));
        assert_eq!(row.gpu_ecc_uncorrected, Some(0), "measured none is 0");
    }

    /// The kernel view's columns are the archived figures, unit-converted where the name says
    /// so (`cpu_wait_hours`), and null, never 0, for a job whose node had no collector.
    #[test]
    fn the_kernel_views_columns_come_from_the_archived_figures_and_are_null_without_them() {
        use jobscope_model::summary::{KernelTotals, SyscallCounts};
        let (facts, node) = recorded_serial();
        let plain = analysed(&facts, vec![node.clone()], &["vm".into()]);
        let row = JobRow::of(&plain);
        assert_eq!(
            (
                row.cpu_wait_hours,
                row.syscalls,
                row.net_sent_bytes,
                row.small_io_calls
            ),
            (None, None, None, None)
        );
        assert!(!row.flag_cpu_wait && !row.flag_lock_contention && !row.flag_small_io);

        let mut node = node;
        node.kernel = Some(KernelTotals {
            // 1.5 h waiting against 0.5 h running: 75 % of the runnable time
            run_s: Some(1800.0),
            cpu_wait_s: Some(5400.0),
            ctx_switches_involuntary: Some(12_345),
            syscalls: Some(SyscallCounts {
                sync: 620_000,
                file: 380_000,
                ..Default::default()
            }),
            small_reads: Some(2_000_000),
            small_writes: None,
            net_sent_bytes: Some(7 << 30),
            block_write_bytes: Some(1 << 20),
            ..Default::default()
        });
        let s = analysed(&facts, vec![node], &["vm".into()]);
        let row = JobRow::of(&s);
        assert_eq!(row.cpu_wait_hours, Some(1.5));
        assert_eq!(row.cpu_wait_pct, Some(75.0));
        assert_eq!(row.ctx_switches_involuntary, Some(12_345));
        assert_eq!(row.syscalls, Some(1_000_000));
        assert!(row.lock_share_pct.is_some_and(|p| (p - 62.0).abs() < 1e-9));
        assert_eq!(row.small_io_calls, Some(2_000_000));
        assert_eq!(row.net_sent_bytes, Some(7 << 30));
        assert_eq!((row.net_received_bytes, row.block_read_bytes), (None, None));
        assert_eq!(row.block_write_bytes, Some(1 << 20));
        assert!(row.flag_cpu_wait, "75 % waiting is over the 25 % default");
        assert!(
            row.flag_small_io,
            "2 M small reads are over the 1 M default"
        );
    }

    /// A node whose memory peak was not measured (the recorded serial job with its peak taken
    /// away): the memory needed and unused are unknown in the report and in the audit row alike,
    /// and the report says so; it never says the whole allocation was unused.
    #[test]
    fn a_node_without_a_memory_peak_has_unknown_memory_waste_in_the_report_and_the_row() {
        let (facts, mut node) = recorded_serial();
        assert!(node.mem.peak_bytes.is_some() && facts.mem_per_node_bytes.is_some());
        node.mem.peak_bytes = None;
        let s = analysed(&facts, vec![node], &["vm".into()]);
        assert_same_waste("serial without a peak", &s);
        let row = JobRow::of(&s);
        assert!(row.mem_gb_hours_alloc.is_some());
        assert_eq!(
            (row.mem_gb_hours_used, row.mem_gb_hours_wasted),
            (None, None)
        );
        // Through the archive's JSON too (what the audit index reads).
        let back: JobSummary = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(JobRow::of(&back).mem_gb_hours_wasted, None);
        let text = jobscope_report::present::render_text(&s, false).unwrap();
        let line = report_line(&text, "Memory GB-hours");
        assert!(line.starts_with("n/a unused of "), "{line}");
        assert!(!line.contains("100 %"), "{line}");
        assert!(
            text.contains("memory peak was not measured"),
            "the report says why:\n{text}"
        );
        // The CPU was measured: its waste is still there.
        assert!(row.core_hours_wasted.is_some());
    }

    /// The recorded serial job (`report/testdata/recorded/serial`: its real spool and its real
    /// `squeue --json` record, submit_time 1795308207 and qos "") built as the Epilog builds it,
    /// archived as JSON and read back: the row carries the submit time, the QOS and the script hash
    /// the summary holds; a document written before they were recorded reads back with none.
    #[test]
    fn qos_submit_time_and_script_hash_reach_the_row_through_the_archived_json() {
        let (mut facts, mut node) = recorded_serial();
        assert_eq!(facts.qos, None, "the test cluster has no accounting");
        // A cluster with accounting names a QOS (v22_05's tests parse it from scontrol's record).
        facts.qos = Some("high".into());
        let cfg = jobscope_config::Config::default();
        let hex = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";
        node.script_sha256 = Some(hex.into());
        let env = EpilogEnv {
            job_id: 64,
            node: "vm".into(),
            ..Default::default()
        };
        let facts = env.facts_with(Some(facts));
        let s = pipeline::job(&facts, vec![node], &["vm".into()], &cfg, "t", &decide_end);
        let json = serde_json::to_value(&s).unwrap();
        let back: JobSummary = serde_json::from_value(json.clone()).unwrap();
        let row = JobRow::of(&back);
        assert_eq!(row.qos.as_deref(), Some("high"));
        assert_eq!(row.submit_unix_s, Some(1_795_308_207));
        assert_eq!(row.script_sha256.as_deref(), Some(hex));
        let at = |name: &str| COLUMNS.iter().position(|c| c.0 == name).unwrap();
        let v = row.values();
        assert_eq!(v[at("qos")], Value::Text("high".into()));
        assert_eq!(v[at("submit_unix_s")], Value::Int(1_795_308_207));
        assert_eq!(v[at("script_sha256")], Value::Text(hex.into()));

        let mut old = json;
        for k in ["qos", "submit_unix_s", "script_sha256"] {
            assert!(old.as_object_mut().unwrap().remove(k).is_some(), "{k}");
        }
        for n in old["nodes"].as_array_mut().unwrap() {
            n.as_object_mut().unwrap().remove("script_sha256");
        }
        let row = JobRow::of(&serde_json::from_value::<JobSummary>(old).unwrap());
        assert_eq!(
            (row.qos, row.submit_unix_s, row.script_sha256),
            (None, None, None)
        );
    }

    /// `mail_never` is the wish the end-of-job mail obeys (`--jobscope-mail`, kept per node and
    /// in the job's `user_options.mail`), read back from the archived JSON: any case and blanks
    /// as the mail parses it; another policy, a word that is none, or no option is no wish.
    #[test]
    fn mail_never_is_the_users_mail_option_as_the_mail_reads_it() {
        let cfg = jobscope_config::Config::default();
        let env = EpilogEnv {
            job_id: 65,
            node: "vm".into(),
            ..Default::default()
        };
        for (option, never) in [
            (Some("never"), true),
            (Some(" NEVER "), true),
            (Some("end"), false),
            (Some("nevermore"), false),
            (None, false),
        ] {
            let (facts, mut node) = recorded_serial();
            if let Some(o) = option {
                node.user_options.insert("mail".into(), o.into());
            }
            let facts = env.facts_with(Some(facts));
            let s = pipeline::job(&facts, vec![node], &["vm".into()], &cfg, "t", &decide_end);
            let back: JobSummary =
                serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
            assert_eq!(back.user_options.get("mail").map(String::as_str), option);
            let row = JobRow::of(&back);
            assert_eq!(row.mail_never, never, "{option:?}");
            let at = COLUMNS.iter().position(|c| c.0 == "mail_never").unwrap();
            assert_eq!(row.values()[at], Value::Bool(never));
        }
    }

    /// `--qos` and `--by qos` over rows that carry a QOS: the recorded job archived three times
    /// with QOS `high`, `normal` and none (as a cluster without accounting has it).
    #[test]
    fn the_qos_filter_and_grouping_see_the_rows_qos() {
        use crate::eval::MemEngine;
        use crate::query::{Engine, GroupKey, Query, Report};
        let (facts, node) = recorded_serial();
        let cfg = jobscope_config::Config::default();
        let rows: Vec<JobRow> = [Some("high"), Some("normal"), None, Some("high")]
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let mut f = facts.clone();
                f.job_id = 100 + i as u32;
                f.qos = q.map(str::to_string);
                let s = pipeline::job(
                    &f,
                    vec![node.clone()],
                    &["vm".into()],
                    &cfg,
                    "t",
                    &decide_end,
                );
                JobRow::of(&s)
            })
            .collect();
        let eng = MemEngine::new(&rows).unwrap();

        let mut q = Query::new(Report::Jobs);
        q.filters.qos = vec!["high".into()];
        let t = eng.run(&q).unwrap();
        let id = t.column("job_id").unwrap();
        let ids: Vec<&Value> = t.rows.iter().map(|r| &r[id]).collect();
        assert_eq!(ids, [&Value::Int(100), &Value::Int(103)]);

        let mut q = Query::new(Report::Usage);
        q.group_by = vec![GroupKey::Qos];
        let t = eng.run(&q).unwrap();
        let (k, n) = (t.column("qos").unwrap(), t.column("jobs").unwrap());
        let mut groups: Vec<(Value, Value)> = t
            .rows
            .iter()
            .map(|r| (r[k].clone(), r[n].clone()))
            .collect();
        groups.sort_by_key(|g| format!("{g:?}"));
        assert_eq!(
            groups,
            [
                (Value::Null, Value::Int(1)),
                (Value::Text("high".into()), Value::Int(2)),
                (Value::Text("normal".into()), Value::Int(1)),
            ]
        );
    }
}
