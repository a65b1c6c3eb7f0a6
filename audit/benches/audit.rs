//! Audit index figures, printed (not a timed test): a seeded synthetic index of AUDIT_BENCH_JOBS
//! jobs (default 1 000 000) over 3 years, written with `index::write_rows_only`; then the issue's
//! questions: a year-wide usage report grouped by user, the same over a 30-day window, the index's
//! size; and the incremental update per job against a real archive of JSON records.
//!
//!   cargo bench -p jobscope-audit --bench audit            # AUDIT_BENCH_JOBS=10000000 for 10 M

use jobscope_audit::index::{self, Index, ParquetEngine, Settings};
use jobscope_audit::query::{Engine, GroupKey, Query, Report, Zone};
use jobscope_audit::row::JobRow;
use std::time::Instant;

/// 2024-01-01 UTC.
const START_MS: u64 = 1_704_067_200_000;
const SPAN_MS: u64 = 3 * 365 * 86_400_000;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn unit(&mut self) -> f64 {
        self.next() as f64 / (1u64 << 31) as f64
    }
}

/// Job `i` of `n`, ending in order over 3 years; users Zipf-like (a few heavy users), 6 partitions
/// of which 2 with GPUs.
fn row(i: u64, n: u64, rng: &mut Lcg) -> JobRow {
    let end = START_MS + SPAN_MS * i / n;
    let elapsed_s = (60.0 + 86_400.0 * rng.unit().powi(4)).floor();
    let user = ((1000.0 * rng.unit().powi(3)) as u32).min(999);
    let part = ["cpu", "cpu", "cpu", "bigmem", "gpu", "gpu-a100"][(rng.next() % 6) as usize];
    let gpu = part.starts_with("gpu") && rng.unit() < 0.8;
    let cores = [1u32, 2, 4, 8, 16, 32, 64][(rng.next() % 7) as usize];
    let eff = rng.unit();
    let h = elapsed_s / 3600.0;
    let mem = 4u64 << 30;
    let peak = (mem as f64 * rng.unit()) as u64;
    let gpus = if gpu { 1 + (rng.next() % 4) as u32 } else { 0 };
    let gpu_wasted = gpu.then(|| f64::from(gpus) * h * rng.unit().powi(2));
    JobRow {
        cluster: Some("big".into()),
        job_id: i as u32,
        name: Some(format!("job{}", rng.next() % 50)),
        user: Some(format!("user{user:03}")),
        uid: Some(10_000 + user),
        group: Some(format!("grp{:02}", user % 40)),
        gid: Some(20_000 + user % 40),
        account: Some(format!("acct{:02}", user % 25)),
        partition: Some(part.into()),
        qos: Some("normal".into()),
        node_count: 1,
        node_list: format!("n{:04}", rng.next() % 2000),
        start_unix_ms: end - (elapsed_s * 1000.0) as u64,
        end_unix_ms: end,
        elapsed_s,
        state: "COMPLETED".into(),
        exit_code: Some(0),
        alloc_cores: Some(cores),
        alloc_mem_per_node_bytes: Some(mem),
        alloc_gpus: gpu.then_some(gpus),
        cpu_usage_s: Some(f64::from(cores) * elapsed_s * eff),
        mem_peak_bytes: Some(peak),
        core_hours_alloc: Some(f64::from(cores) * h),
        core_hours_used: Some(f64::from(cores) * h * eff),
        core_hours_wasted: Some(f64::from(cores) * h * (1.0 - eff)),
        mem_gb_hours_alloc: Some(4.0 * h),
        mem_gb_hours_used: Some(peak as f64 / (1u64 << 30) as f64 * h),
        mem_gb_hours_wasted: Some((4.0 - peak as f64 / (1u64 << 30) as f64) * h),
        gpu_hours_alloc: gpu.then(|| f64::from(gpus) * h),
        gpu_hours_wasted: gpu_wasted,
        gpu_hours_used: gpu_wasted.map(|w| f64::from(gpus) * h - w),
        cpu_eff_pct: Some(100.0 * eff),
        mem_eff_pct: Some(100.0 * peak as f64 / mem as f64),
        class: Some("mixed".into()),
        samples: 10,
        ..Default::default()
    }
}

fn du(p: &std::path::Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = e.metadata().unwrap();
            n += if m.is_dir() { du(&e.path()) } else { m.len() };
        }
    }
    n
}

fn time<T>(what: &str, runs: u32, f: impl Fn() -> T) -> T {
    let mut best = f64::MAX;
    let mut out = None;
    for _ in 0..runs {
        let t = Instant::now();
        out = Some(f());
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!("  {what:<52} {:>9.1} ms (best of {runs})", best * 1000.0);
    out.unwrap()
}

fn main() {
    let n: u64 = std::env::var("AUDIT_BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings::in_dir(dir.path().join("index"));
    println!("audit index benchmark: {n} jobs over 3 years");
    let t = Instant::now();
    let mut rng = Lcg(42);
    index::write_rows_only(&settings, (0..n).map(|i| row(i, n, &mut rng))).unwrap();
    println!(
        "  {:<52} {:>9.1} s",
        "generate + write the index",
        t.elapsed().as_secs_f64()
    );
    let size = du(&settings.dir);
    println!(
        "  {:<52} {:>9.1} MiB ({:.0} bytes/job)",
        "index size",
        size as f64 / 1048576.0,
        size as f64 / n as f64
    );
    let eng = ParquetEngine::open(&settings.dir).unwrap();
    let end_s = ((START_MS + SPAN_MS) / 1000) as i64;
    let mut year = Query::new(Report::Usage);
    year.group_by = vec![GroupKey::User];
    year.window.since_unix_s = Some(end_s - 365 * 86_400);
    let t1 = time("usage by user, last 365 days", 5, || {
        eng.run(&year).unwrap()
    });
    let cols = jobscope_audit::eval::needed_columns(&year);
    time("  of which reading the projected columns", 5, || {
        eng.scan(&year, &cols).unwrap()
    });
    let mut month = year.clone();
    month.window.since_unix_s = Some(end_s - 30 * 86_400);
    let t2 = time("usage by user, last 30 days", 5, || {
        eng.run(&month).unwrap()
    });
    let mut all = year.clone();
    all.window.since_unix_s = None;
    time("usage by user, all 3 years", 3, || eng.run(&all).unwrap());
    let mut heat = Query::new(Report::Heatmap);
    heat.window.since_unix_s = Some(end_s - 365 * 86_400);
    time("hour-of-week heat map, last 365 days", 3, || {
        eng.run(&heat).unwrap()
    });
    // The same two with the local zone of the environment (run with TZ=Europe/Oslo): every
    // job's hour is taken at its own instant's offset.
    let mut hours = year.clone();
    hours.group_by = vec![GroupKey::HourOfDay];
    hours.zone = Zone::Local;
    time("usage by local hour of day, last 365 days", 5, || {
        eng.run(&hours).unwrap()
    });
    let mut local_heat = heat.clone();
    local_heat.zone = Zone::Local;
    time("local hour-of-week heat map, last 365 days", 3, || {
        eng.run(&local_heat).unwrap()
    });
    println!(
        "  groups: {} users (year), {} users (30 days)",
        t1.rows.len(),
        t2.rows.len()
    );

    // Incremental update per job: a real archive of JSON records, indexed, then 200 more.
    let adir = tempfile::tempdir().unwrap();
    let store = jobscope_archive::Store::new(&adir.path().join("archive"), "root");
    let isettings = Settings {
        dir: adir.path().join("archive/index"),
        ..settings.clone()
    };
    let doc = |id: u32| -> jobscope_model::summary::JobSummary {
        let mut v: serde_json::Value =
            serde_json::from_str(include_str!("../../report/testdata/archive-v1/oom.json"))
                .unwrap();
        v["job_id"] = id.into();
        v["end_unix_ms"] = (START_MS + u64::from(id) * 1000).into();
        jobscope_archive::load(
            &serde_json::to_vec(&v).unwrap(),
            &jobscope_model::params::Report::default(),
        )
        .unwrap()
        .summary
    };
    for id in 1..=1000 {
        store.write(&doc(id)).unwrap();
    }
    Index::new(&store, isettings.clone()).update(false).unwrap();
    for id in 1001..=1200 {
        store.write(&doc(id)).unwrap();
    }
    let t = Instant::now();
    let rep = Index::new(&store, isettings.clone()).update(false).unwrap();
    let s = t.elapsed().as_secs_f64();
    println!(
        "  {:<52} {:>9.2} ms/job ({} jobs in {:.0} ms)",
        "index update, incremental",
        s * 1000.0 / rep.jobs_added as f64,
        rep.jobs_added,
        s * 1000.0
    );
    let t = Instant::now();
    let rep = Index::new(&store, isettings).update(false).unwrap();
    println!(
        "  {:<52} {:>9.2} ms ({} days read)",
        "index update, nothing new",
        t.elapsed().as_secs_f64() * 1000.0,
        rep.days_read
    );
}
