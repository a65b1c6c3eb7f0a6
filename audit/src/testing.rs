//! Fixtures for tests over the index: archived runs made from a few figures ([`Spec`] →
//! [`summary`]) and a fresh archive with its index ([`fixture`]). Compiled for this crate's tests
//! and, with the `testing` feature, for the crates above it (jobscope-admin's alerts and cluster
//! report tests build their archives with the same runs).

use crate::index::{Index, ParquetEngine, Settings};
use jobscope_archive::Store;
use jobscope_model::summary::*;

pub const DAY_MS: u64 = 86_400_000;
/// 2026-03-02 00:00 UTC, a Monday.
pub const T0_MS: u64 = 1_772_409_600_000;

pub struct Spec {
    pub id: u32,
    pub user: &'static str,
    pub uid: u32,
    pub part: &'static str,
    pub nodes: &'static [&'static str],
    pub cores: u32,
    pub start_ms: u64,
    pub elapsed_s: f64,
    pub cpu_s: f64,
    pub mem_alloc: u64,
    pub peak: u64,
    pub gpus: u32,
    pub gpu_used: bool,
}

pub fn spec(id: u32, user: &'static str, uid: u32, part: &'static str, day: u64) -> Spec {
    Spec {
        id,
        user,
        uid,
        part,
        nodes: &["n1"],
        cores: 4,
        start_ms: T0_MS + day * DAY_MS + 3_600_000,
        elapsed_s: 7200.0,
        cpu_s: 3600.0 * f64::from(id % 4 + 1),
        mem_alloc: 4 << 30,
        peak: (1 << 30) + u64::from(id) * (1 << 20),
        gpus: 0,
        gpu_used: false,
    }
}

pub fn gpu(
    node: &str,
    slot: u32,
    hours: f64,
    used: bool,
) -> jobscope_model::gpu::summary::GpuSummary {
    serde_json::from_value(serde_json::json!({
        "node": node, "slot": slot, "index": slot, "samples": 10,
        "util_mean_pct": if used { 80.0 } else { 0.0 },
        "utilization_unknown": false, "other_processes_seen": false, "energy_estimated": false,
        "energy_kwh": 0.5, "idle_periods": [], "observed_s": hours * 3600.0,
        "never_used": !used, "gpu_hours_allocated": hours,
        "gpu_hours_wasted": if used { 0.0 } else { hours },
        "classification": if used { "gpu_bound" } else { "gpu_idle" },
        "throttle_reasons": [], "lost": false, "findings": []
    }))
    .expect("a GPU summary")
}

pub fn summary(s: &Spec) -> JobSummary {
    let end_ms = s.start_ms + (s.elapsed_s * 1000.0) as u64;
    let n = s.nodes.len() as u32;
    let nodes: Vec<NodeSummary> = s
        .nodes
        .iter()
        .map(|name| NodeSummary {
            node: (*name).into(),
            job_id: s.id,
            uid: s.uid,
            start_unix_ms: s.start_ms,
            end_unix_ms: end_ms,
            elapsed_s: s.elapsed_s,
            alloc_cores: Some(s.cores / n),
            alloc_mem_bytes: Some(s.mem_alloc),
            cpu: CpuTotals {
                usage_s: Some(s.cpu_s / f64::from(n)),
                ..Default::default()
            },
            mem: MemTotals {
                peak_bytes: Some(s.peak),
                limit_bytes: Some(s.mem_alloc),
                ..Default::default()
            },
            quality: Quality {
                samples: 10,
                sampler_ended_cleanly: true,
                final_counters: true,
                ..Default::default()
            },
            gpus: (0..s.gpus)
                .map(|g| gpu(name, g, s.elapsed_s / 3600.0, s.gpu_used))
                .collect(),
            ..Default::default()
        })
        .collect();
    let mut j = JobSummary {
        schema_version: SCHEMA_VERSION,
        generator: "test".into(),
        cluster: Some("c1".into()),
        job_id: s.id,
        array_job_id: None,
        array_task_id: None,
        name: Some(format!("job{}", s.id % 3)),
        user: Some(s.user.into()),
        uid: Some(s.uid),
        gid: Some(s.uid),
        group: Some(format!("g{}", s.uid % 2)),
        account: Some(format!("acct{}", s.uid % 2)),
        partition: Some(s.part.into()),
        qos: None,
        submit_unix_s: None,
        state: jobscope_model::job::JobState::Completed,
        end_reason: None,
        exit_code: Some(0),
        start_unix_ms: s.start_ms,
        end_unix_ms: end_ms,
        elapsed_s: s.elapsed_s,
        scheduler_start_unix_s: Some(s.start_ms / 1000),
        alloc: Allocation {
            nodes: n,
            cores: Some(s.cores),
            mem_per_node_bytes: Some(s.mem_alloc),
            gpus: None,
            time_limit_s: Some(86_400),
        },
        cpu: CpuTotals {
            usage_s: Some(s.cpu_s),
            ..Default::default()
        },
        mem: MemTotals {
            peak_bytes: Some(s.peak),
            ..Default::default()
        },
        io: IoTotals::default(),
        pressure: None,
        // the kernel view on two jobs in three (the others ran without a collector)
        kernel: (!s.id.is_multiple_of(3)).then(|| KernelTotals {
            run_s: Some(s.cpu_s),
            cpu_wait_s: Some(60.0 * f64::from(s.id)),
            net_sent_bytes: Some(u64::from(s.id) << 20),
            ..Default::default()
        }),
        script_sha256: None,
        efficiency: Efficiency {
            cpu_pct: Some(100.0 * s.cpu_s / (f64::from(s.cores) * s.elapsed_s)),
            mem_pct: Some(100.0 * s.peak as f64 / s.mem_alloc as f64),
            time_pct: None,
        },
        nodes,
        missing_nodes: vec![],
        partial: false,
        partial_reasons: vec![],
        samples: 10,
        user_options: Default::default(),
        analysis: None,
    };
    j.analysis = Some(jobscope_model::summary::analysis::analyze(
        &j,
        &jobscope_model::params::Report::default(),
    ));
    j
}

pub struct Fixture {
    _dir: tempfile::TempDir,
    pub store: Store,
    pub settings: Settings,
}

pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(&dir.path().join("archive"), "root");
    let settings = Settings::in_dir(dir.path().join("archive/index"));
    Fixture {
        _dir: dir,
        store,
        settings,
    }
}

impl Fixture {
    pub fn index(&self) -> Index<'_> {
        Index::new(&self.store, self.settings.clone())
    }
    pub fn write(&self, specs: &[Spec]) {
        for s in specs {
            self.store.write(&summary(s)).unwrap();
        }
    }
    pub fn engine(&self) -> ParquetEngine {
        ParquetEngine::open(&self.settings.dir).unwrap()
    }
}
