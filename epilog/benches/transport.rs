//! `cargo bench -p jobscope-epilog --bench transport` (root; starts the project's PostgreSQL with
//! slurm-conf/postgres.sh): what the PostgreSQL transport costs (docs/cluster.md).
//!
//! 1. The Epilog on a compute node of a 2-node job, 300 jobs each, side by side in one run:
//!    - floor: the spool summarised and the envelope written to the outbox, nothing sent (what
//!      every mode does before its transport);
//!    - shared_dir: the summary stored in the state directory, on local disk here (on a real
//!      site it is a network file system, which only adds);
//!    - postgres, the database up: summary, outbox, one connection and one insert;
//!    - postgres, the database down (nothing listens): bounded by `transport.send_budget_s`.
//!
//!    Target: ≤ 50 ms at p95 with the database up.
//! 2. The collector: 10 000 jobs of 2 nodes waiting in the database, one pass of
//!    `collect_once` (assembled, analysed, archived with its fsyncs and MANIFEST line, rows
//!    marked, run recorded; mail off, as mail is its own queue). Target: ≥ 10 000 jobs a minute.

use jobscope_config::{Config, Postgres as PgConfig, TransportMode};
use jobscope_epilog::collect;
use jobscope_epilog::flow::run_epilog;
use jobscope_model::spool::job_dir;
use jobscope_report::slurm::{EpilogEnv, FakeSlurm};
use jobscope_transport::{pg, schema, Envelope};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const PG_DIR: &str = "/var/lib/jobscope-pg-test";
const PG_PORT: u16 = 15432;
const DB: &str = "jobscope_bench";
const EPILOGS: u32 = 300;
const COLLECTED_JOBS: u32 = 10_000;

fn admin(db: &str) -> PgConfig {
    PgConfig {
        conninfo: Some(format!(
            "host=127.0.0.1 port={PG_PORT} user=jobscope_admin dbname={db}"
        )),
        password_file: Some(PathBuf::from(format!("{PG_DIR}/admin.password"))),
        connect_timeout_s: 5,
        source: "bench".into(),
    }
}

/// A fresh database with the transport's tables and a node login; the node's connection.
fn setup_db(tmp: &Path) -> PgConfig {
    let st = std::process::Command::new("bash")
        .arg(format!("{REPO}/slurm-conf/postgres.sh"))
        .arg("up")
        .status()
        .expect("slurm-conf/postgres.sh");
    assert!(st.success(), "postgres.sh up failed");
    let mut c = pg::connect(&admin("postgres")).unwrap();
    // One statement each: CREATE DATABASE cannot run inside a multi-statement batch.
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
        .unwrap();
    c.batch_execute(&format!("CREATE DATABASE {DB}")).unwrap();
    let mut a = pg::connect(&admin(DB)).unwrap();
    schema::ensure(&mut a).unwrap();
    schema::node_login(&mut a, "bench_node", "bench-pw").unwrap();
    let pw = tmp.join("node.password");
    std::fs::write(&pw, "bench-pw\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    PgConfig {
        conninfo: Some(format!(
            "host=127.0.0.1 port={PG_PORT} user=bench_node dbname={DB}"
        )),
        password_file: Some(pw),
        connect_timeout_s: 3,
        source: "default".into(),
    }
}

/// A real spool (recorded from a cluster job: report/testdata/recorded/parallel) as node `n1`'s
/// spool of `job`.
fn spool(cfg: &Config, job: u32) {
    let from = Path::new(REPO).join("report/testdata/recorded/parallel/node-vm");
    let to = job_dir(&cfg.paths.spool_dir, job, "n1");
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn env(job: u32) -> EpilogEnv {
    EpilogEnv {
        job_id: job,
        node: "n1".into(),
        uid: Some(1001),
        user: Some("alice".into()),
        nodelist: Some("n0,n1".into()),
        num_nodes: Some(2),
        cluster: Some("bench".into()),
        exit_code2: Some("0:0".into()),
        ..Default::default()
    }
}

fn cfg(root: &Path, mode: TransportMode) -> Config {
    let mut c = Config::default();
    c.paths.spool_dir = root.join("spool");
    c.paths.state_dir = root.join("state");
    c.paths.archive_dir = root.join("archive");
    c.paths.log_file = root.join("log");
    c.paths.live_dir = root.join("live");
    c.transport.outbox_dir = root.join("outbox");
    c.transport.mode = mode;
    c.mail.enabled = false;
    c
}

/// p50, p95 and the most of `v`, in ms.
fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| ms(v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1]);
    (at(0.5), at(0.95), ms(*v.last().unwrap()))
}

fn epilogs(name: &str, c: &Config, first_job: u32, each: &dyn Fn(&Config, u32)) {
    let mut times = Vec::new();
    for job in first_job..first_job + EPILOGS {
        spool(c, job);
        let t0 = Instant::now();
        each(c, job);
        times.push(t0.elapsed());
    }
    let (p50, p95, max) = stats(times);
    println!("  {name:<44} p50 {p50:>7.2} ms   p95 {p95:>7.2} ms   max {max:>7.2} ms");
}

fn main() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "run as root (it starts PostgreSQL)"
    );
    let tmp = tempfile::Builder::new()
        .prefix("jobscope-bench-transport")
        .tempdir_in("/var/tmp")
        .unwrap();
    let node = setup_db(tmp.path());
    let slurm = FakeSlurm::up();
    let mut log = |_: &str| {};
    println!("Epilog of one node of a 2-node job ({EPILOGS} jobs each, a recorded spool):");
    let floor = cfg(&tmp.path().join("floor"), TransportMode::Postgres);
    epilogs(
        "floor: summary + outbox, nothing sent",
        &floor,
        1,
        &|c, job| {
            let s = jobscope_report::pipeline::node(
                &jobscope_report::pipeline::read_node_dir(&job_dir(&c.paths.spool_dir, job, "n1")),
                "n1",
                job,
                jobscope_report::pipeline::NodeEnd::At(jobscope_common::now_unix_ms()),
                Some(1001),
                c,
            );
            let e = Envelope::new(s.summary, env(job), vec!["n0".into(), "n1".into()]);
            jobscope_transport::outbox::Outbox::new(&c.transport.outbox_dir)
                .put(&e)
                .unwrap();
        },
    );
    let shared = cfg(&tmp.path().join("shared"), TransportMode::SharedDir);
    epilogs("shared_dir (local disk)", &shared, 1, &|c, job| {
        run_epilog(c, &env(job), &slurm, &mut |_| {}).unwrap();
    });
    let mut up = cfg(&tmp.path().join("up"), TransportMode::Postgres);
    up.transport.postgres = node.clone();
    epilogs("postgres, database up", &up, 1, &|c, job| {
        let o = run_epilog(c, &env(job), &slurm, &mut |_| {}).unwrap();
        assert!(matches!(o, jobscope_epilog::flow::Outcome::Sent), "{o:?}");
    });
    let mut down = cfg(&tmp.path().join("down"), TransportMode::Postgres);
    down.transport.postgres = PgConfig {
        conninfo: Some("host=127.0.0.1 port=9 user=bench_node dbname=x".into()),
        ..node.clone()
    };
    down.transport.send_budget_s = 1;
    let few = |c: &Config, job: u32| {
        run_epilog(c, &env(job), &slurm, &mut |_| {}).unwrap();
    };
    // Fewer: each one waits its whole budget.
    let mut times = Vec::new();
    for job in 1..=20 {
        spool(&down, job);
        let t0 = Instant::now();
        few(&down, job);
        times.push(t0.elapsed());
    }
    let (p50, p95, max) = stats(times);
    println!(
        "  {:<44} p50 {p50:>7.2} ms   p95 {p95:>7.2} ms   max {max:>7.2} ms   (send_budget_s = 1; 20 jobs)",
        "postgres, database down"
    );

    // 2. The collector.
    let mut a = pg::connect(&admin(DB)).unwrap();
    a.batch_execute("TRUNCATE jobscope.node_summaries, jobscope.assembled_runs")
        .unwrap();
    let sample = {
        let c = cfg(&tmp.path().join("sample"), TransportMode::Postgres);
        spool(&c, 1);
        jobscope_report::pipeline::node(
            &jobscope_report::pipeline::read_node_dir(&job_dir(&c.paths.spool_dir, 1, "n1")),
            "n1",
            1,
            jobscope_report::pipeline::NodeEnd::At(jobscope_common::now_unix_ms()),
            Some(1001),
            &c,
        )
        .summary
    };
    // Side by side, the same number of jobs each, each pass into an archive of its own: SLURM's
    // answers canned, then the real adapter asking slurmctld where a cluster answers on this
    // host (the job ids are not SLURM's: the listing holds none of them, at the cost a real
    // listing has). With mail off (mail is its own queue).
    let real = jobscope_report::slurm::detect();
    let mut passes: Vec<(&str, &dyn jobscope_report::slurm::Slurm)> =
        vec![("SLURM's answers canned", &slurm)];
    if real.ping() {
        passes.push(("slurmctld asked (22.05: one listing a pass)", &*real));
    } else {
        println!("  (no slurmctld answers here: the pass that asks SLURM is left out)");
    }
    println!("Collector: {COLLECTED_JOBS} jobs × 2 nodes waiting, one pass:");
    for (k, (name, sl)) in passes.into_iter().enumerate() {
        let first = 1 + k as u32 * COLLECTED_JOBS;
        let t_fill = Instant::now();
        fill(&mut a, &sample, first..=first + COLLECTED_JOBS - 1);
        let fill_s = t_fill.elapsed().as_secs_f64();
        let mut ccfg = cfg(
            &tmp.path().join(format!("collector{k}")),
            TransportMode::Postgres,
        );
        ccfg.postgres = admin(DB);
        let t0 = Instant::now();
        let rep = collect::collect_once(&ccfg, &mut a, sl, &mut log).unwrap();
        let dt = t0.elapsed().as_secs_f64();
        assert_eq!(
            rep.archived.len() as u32,
            COLLECTED_JOBS,
            "{:?}",
            rep.failed
        );
        println!(
            "  {name:<44} {dt:>6.1} s = {:>6.0} jobs a minute   (filled in {fill_s:.1} s)",
            f64::from(COLLECTED_JOBS) / dt * 60.0
        );
    }
}

/// Jobs `jobs` of 2 nodes waiting, as the nodes would have sent them (in one transaction, to
/// fill quickly).
fn fill(
    a: &mut postgres::Client,
    sample: &jobscope_model::summary::NodeSummary,
    jobs: std::ops::RangeInclusive<u32>,
) {
    let mut tx = a.transaction().unwrap();
    for job in jobs {
        for node in ["n0", "n1"] {
            let mut s = sample.clone();
            s.job_id = job;
            s.node = node.into();
            let mut e = env(job);
            e.node = node.into();
            let e = Envelope::new(s, e, vec!["n0".into(), "n1".into()]);
            jobscope_transport::send::insert_in(&mut tx, &e).unwrap();
        }
    }
    tx.commit().unwrap();
}
