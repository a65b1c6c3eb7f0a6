//! The PostgreSQL transport against a real PostgreSQL (Debian's package, started on 127.0.0.1 by
//! slurm-conf/postgres.sh; root only): the node role logging in with its own password, the
//! idempotent send, the collector's one report per job (complete, partial, late), and a
//! cluster's jobs ending together against a server with `max_connections = 10`. Ignored in the
//! plain unit-test run: the PostgreSQL phase of tests/run-all.sh runs them with `--ignored`.
//!
//! Each test works in a database of its own; the crowded and outage tests run servers of their own.

use jobscope_config::{Config, Postgres as PgConfig, TransportMode};
use jobscope_epilog::collect::{self, CollectReport};
use jobscope_model::summary::{JobSummary, NodeSummary};
use jobscope_report::slurm::{EpilogEnv, FakeSlurm};
use jobscope_transport::outbox::Outbox;
use jobscope_transport::{pg, schema, send, Envelope};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const MAIN_DIR: &str = "/var/lib/jobscope-pg-test";
const MAIN_PORT: u16 = 15432;
const CROWDED_DIR: &str = "/var/lib/jobscope-pg-test-crowded";
const CROWDED_PORT: u16 = 15434;
const OUTAGE_DIR: &str = "/var/lib/jobscope-pg-test-transport-outage";
const OUTAGE_PORT: u16 = 15435;

fn script(cmd: &[&str], dir: &str, port: u16, max_conn: u32) {
    let out = Command::new("bash")
        .arg(format!("{REPO}/slurm-conf/postgres.sh"))
        .args(cmd)
        .env("JOBSCOPE_PG_DIR", dir)
        .env("JOBSCOPE_PG_PORT", port.to_string())
        .env("JOBSCOPE_PG_MAX_CONNECTIONS", max_conn.to_string())
        .output()
        .expect("run slurm-conf/postgres.sh");
    assert!(
        out.status.success(),
        "postgres.sh {cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn main_server() {
    static UP: OnceLock<()> = OnceLock::new();
    UP.get_or_init(|| {
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "the PostgreSQL tests run as root"
        );
        script(&["up"], MAIN_DIR, MAIN_PORT, 50);
    });
}

fn admin_cfg(dir: &str, port: u16, db: &str) -> PgConfig {
    PgConfig {
        conninfo: Some(format!(
            "host=127.0.0.1 port={port} user=jobscope_admin dbname={db}"
        )),
        password_file: Some(PathBuf::from(format!("{dir}/admin.password"))),
        connect_timeout_s: 5,
        source: "test".into(),
    }
}

/// A fresh database `name` with the transport's tables, and a node login `node_<name>` whose
/// password is in a root-only file under `tmp`: (admin config, node config).
fn fresh_db(dir: &str, port: u16, name: &str, tmp: &Path) -> (PgConfig, PgConfig) {
    let mut c = pg::connect(&admin_cfg(dir, port, "postgres")).unwrap();
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .unwrap();
    c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    let admin = admin_cfg(dir, port, name);
    let mut a = pg::connect(&admin).unwrap();
    schema::ensure(&mut a).unwrap();
    let login = format!("node_{name}");
    let pw = format!("pw-{name}-{}", std::process::id());
    schema::node_login(&mut a, &login, &pw).unwrap();
    let pwfile = tmp.join(format!("{login}.password"));
    std::fs::write(&pwfile, format!("{pw}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pwfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    let node = PgConfig {
        conninfo: Some(format!(
            "host=127.0.0.1 port={port} user={login} dbname={name}"
        )),
        password_file: Some(pwfile),
        connect_timeout_s: 3,
        source: "default".into(),
    };
    (admin, node)
}

/// Node `node`'s summary of job `job` (run `run`): CPU seconds that identify the node, so a
/// sum in the report shows which nodes were counted.
fn envelope(job: u32, node: &str, nodes: &[&str], run: u64) -> Envelope {
    let i = nodes.iter().position(|n| *n == node).unwrap() as u64;
    let start = 1_767_571_200_000 + run * 3_600_000;
    let mut s = NodeSummary {
        node: node.into(),
        job_id: job,
        uid: 1001,
        start_unix_ms: start + i,
        end_unix_ms: start + 600_000 + i,
        elapsed_s: 600.0,
        alloc_cores: Some(2),
        ..Default::default()
    };
    s.cpu.usage_s = Some(10.0 * (1 << i) as f64);
    s.quality.samples = 20;
    s.quality.sampler_ended_cleanly = true;
    s.quality.final_counters = true;
    let env = EpilogEnv {
        job_id: job,
        node: node.into(),
        uid: Some(1001),
        user: Some("alice".into()),
        nodelist: Some(nodes.join(",")),
        num_nodes: Some(nodes.len() as u32),
        cluster: Some("c1".into()),
        exit_code2: Some("0:0".into()),
        ..Default::default()
    };
    Envelope::new(s, env, nodes.iter().map(|n| n.to_string()).collect())
}

/// The collector's configuration: the archive in `tmp`, mail off, waiting `wait_s` for nodes.
fn collector_cfg(tmp: &Path, admin: &PgConfig, wait_s: u64) -> Config {
    let mut c = Config::default();
    c.paths.archive_dir = tmp.join("archive");
    c.paths.state_dir = tmp.join("state");
    c.paths.log_file = tmp.join("log");
    c.mail.enabled = false;
    c.archive.node_wait_s = wait_s;
    c.transport.mode = TransportMode::Postgres;
    c.postgres = admin.clone();
    c
}

fn collect_once(cfg: &Config) -> CollectReport {
    let mut c = pg::connect(&cfg.postgres).unwrap();
    collect::collect_once(cfg, &mut c, &FakeSlurm::up(), &mut |_| {}).unwrap()
}

/// Every archived record of `job` (the dated tree, not the owners' copies).
fn records(archive: &Path, job: u32) -> Vec<JobSummary> {
    let mut out = Vec::new();
    let mut todo = vec![archive.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() && name != "users" && name != "index" {
                todo.push(p);
            } else if name.ends_with(".json") {
                let s: JobSummary = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
                if s.job_id == job {
                    out.push(s);
                }
            }
        }
    }
    out
}

fn send_now(node: &PgConfig, outbox: &Outbox, e: &Envelope) -> send::Delivery {
    let t = jobscope_config::Transport {
        postgres: node.clone(),
        ..Default::default()
    };
    let p = outbox.put(e).unwrap();
    send::deliver(&t, outbox, Some(&p), Duration::from_secs(10))
}

#[test]
#[ignore = "needs PostgreSQL (slurm-conf/postgres.sh); tests/run-all.sh runs it"]
fn the_node_role_may_insert_its_summaries_and_nothing_else() {
    main_server();
    let tmp = tempfile::tempdir().unwrap();
    let (admin, node) = fresh_db(MAIN_DIR, MAIN_PORT, "transport_role", tmp.path());
    let ob = Outbox::new(&tmp.path().join("outbox"));
    let e = envelope(100, "n1", &["n1", "n2"], 0);
    let d = send_now(&node, &ob, &e);
    assert_eq!((d.sent, d.already, d.left), (1, 0, 0), "{d:?}");
    // The same summary again (a retry after a lost confirmation): nothing new.
    let d = send_now(&node, &ob, &e);
    assert_eq!((d.sent, d.already, d.left), (1, 1, 0), "{d:?}");
    let mut a = pg::connect(&admin).unwrap();
    let n: i64 = a
        .query_one("SELECT count(*) FROM jobscope.node_summaries", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    // The node's own login: everything but its insert is refused by the server.
    let mut c = pg::connect(&node).unwrap();
    for sql in [
        "SELECT count(*) FROM jobscope.node_summaries",
        "SELECT envelope FROM jobscope.node_summaries WHERE job_id = 100",
        "UPDATE jobscope.node_summaries SET envelope = '{}'::jsonb",
        "UPDATE jobscope.node_summaries SET taken = 'assembled'",
        "DELETE FROM jobscope.node_summaries",
        "TRUNCATE jobscope.node_summaries",
        "SELECT * FROM jobscope.assembled_runs",
        "INSERT INTO jobscope.assembled_runs (cluster, job_id, run_start_s, nodes_end_ms, record, missing_nodes) VALUES ('c1', 100, 1, 1, 'x', '{}')",
        // Marking its own row as taken would hide it from the collector.
        "INSERT INTO jobscope.node_summaries (cluster, job_id, node, node_start_ms, node_end_ms, envelope, taken) VALUES ('c1', 101, 'n1', 1, 2, '{}'::jsonb, 'late')",
        "CREATE TABLE jobscope.x (a int)",
    ] {
        let err = c.batch_execute(sql).expect_err(sql);
        let code = err.code().map(|c| c.code().to_string());
        assert_eq!(code.as_deref(), Some("42501"), "{sql}: {err}");
    }
    // The row is as the node sent it.
    let row = a
        .query_one(
            "SELECT envelope, taken FROM jobscope.node_summaries WHERE job_id = 100",
            &[],
        )
        .unwrap();
    let doc: serde_json::Value = row.get(0);
    assert_eq!(serde_json::from_value::<Envelope>(doc).unwrap(), e);
    assert_eq!(row.get::<_, Option<String>>(1), None);
}

#[test]
#[ignore = "needs PostgreSQL (slurm-conf/postgres.sh); tests/run-all.sh runs it"]
fn the_collector_makes_one_report_per_job_complete_partial_or_late() {
    main_server();
    let tmp = tempfile::tempdir().unwrap();
    let (admin, node) = fresh_db(MAIN_DIR, MAIN_PORT, "transport_collect", tmp.path());
    let ob = Outbox::new(&tmp.path().join("outbox"));
    let nodes = ["n1", "n2", "n3", "n4"];
    // Job 200: all four nodes; job 201: three of four, n4 later than the wait.
    for n in nodes {
        assert_eq!(send_now(&node, &ob, &envelope(200, n, &nodes, 0)).sent, 1);
    }
    for n in &nodes[..3] {
        assert_eq!(send_now(&node, &ob, &envelope(201, n, &nodes, 0)).sent, 1);
    }
    let cfg = collector_cfg(tmp.path(), &admin, 3600);
    let rep = collect_once(&cfg);
    assert_eq!(rep.archived.len(), 1, "{rep:?}");
    assert_eq!(rep.waiting, 1, "{rep:?}");
    let r200 = records(&cfg.paths.archive_dir, 200);
    assert_eq!(r200.len(), 1);
    let s = &r200[0];
    assert_eq!(
        s.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
        nodes
    );
    assert!(!s.partial, "{:?}", s.partial_reasons);
    // 10 + 20 + 40 + 80 CPU-s: every node counted once.
    assert_eq!(s.cpu.usage_s, Some(150.0));
    assert_eq!(s.cluster.as_deref(), Some("c1"));
    // The same summary sent again after its job was archived: no second record.
    assert_eq!(
        send_now(&node, &ob, &envelope(200, "n2", &nodes, 0)).already,
        1
    );
    // After the wait (0 s now), job 201 as a partial report naming n4.
    let cfg0 = collector_cfg(tmp.path(), &admin, 0);
    let rep = collect_once(&cfg0);
    assert_eq!(rep.archived.len(), 1, "{rep:?}");
    assert_eq!(rep.archived[0].missing_nodes, ["n4"]);
    // n4 reports after the partial report: kept, not counted, no second record.
    assert_eq!(
        send_now(&node, &ob, &envelope(201, "n4", &nodes, 0)).sent,
        1
    );
    let rep = collect_once(&cfg0);
    assert!(rep.archived.is_empty(), "{rep:?}");
    assert_eq!(rep.late, [(201, "n4".to_string())]);
    let r201 = records(&cfg.paths.archive_dir, 201);
    assert_eq!(r201.len(), 1);
    assert_eq!(r201[0].missing_nodes, ["n4"]);
    assert_eq!(r201[0].cpu.usage_s, Some(70.0));
    // A later run of job 201 (requeued): its own record.
    for n in nodes {
        assert_eq!(send_now(&node, &ob, &envelope(201, n, &nodes, 1)).sent, 1);
    }
    let rep = collect_once(&cfg0);
    assert_eq!(rep.archived.len(), 1, "{rep:?}");
    assert!(rep.archived[0].missing_nodes.is_empty());
    assert_eq!(records(&cfg.paths.archive_dir, 201).len(), 2);
    // Nothing is left waiting, and every row says what became of it.
    let mut a = pg::connect(&admin).unwrap();
    let left: Vec<(String, i64)> = a
        .query(
            "SELECT coalesce(taken, 'waiting'), count(*) FROM jobscope.node_summaries GROUP BY 1 ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        left,
        [("assembled".to_string(), 11), ("late".to_string(), 1)]
    );
    let runs: i64 = a
        .query_one("SELECT count(*) FROM jobscope.assembled_runs", &[])
        .unwrap()
        .get(0);
    assert_eq!(runs, 3);
}

/// Two collectors at once (a second started by mistake, or a failover that overlapped): the
/// job's lock in the database lets exactly one assemble each job, from all its rows. The node
/// wait is 0, so a collector that saw only part of a job's rows would archive a partial report
/// naming a node that did report: every record must be complete, and each job archived once.
#[test]
#[ignore = "needs PostgreSQL (slurm-conf/postgres.sh); tests/run-all.sh runs it"]
fn two_collectors_at_once_archive_each_job_once() {
    main_server();
    let tmp = tempfile::tempdir().unwrap();
    let (admin, node) = fresh_db(MAIN_DIR, MAIN_PORT, "transport_two", tmp.path());
    let ob = Outbox::new(&tmp.path().join("outbox"));
    let nodes = ["n1", "n2", "n3"];
    let cfg = collector_cfg(tmp.path(), &admin, 0);
    // Rounds of 40 jobs, so that the two passes overlap on many jobs.
    for round in 0..3u32 {
        let jobs = 300 + round * 40..340 + round * 40;
        for job in jobs.clone() {
            for n in nodes {
                assert_eq!(send_now(&node, &ob, &envelope(job, n, &nodes, 0)).sent, 1);
            }
        }
        let reps: Vec<CollectReport> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..2).map(|_| sc.spawn(|| collect_once(&cfg))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let total: usize = reps.iter().map(|r| r.archived.len()).sum();
        assert_eq!(total, 40, "round {round}: {reps:?}");
        for r in &reps {
            assert!(r.late.is_empty() && r.waiting == 0, "round {round}: {r:?}");
            for a in &r.archived {
                assert!(a.missing_nodes.is_empty(), "round {round}: {a:?}");
            }
        }
        for job in jobs {
            let recs = records(&cfg.paths.archive_dir, job);
            assert_eq!(recs.len(), 1, "job {job}");
            assert!(recs[0].missing_nodes.is_empty(), "job {job}");
        }
    }
}

/// 4 nodes × 50 jobs ending together against a server with `max_connections = 10`: every
/// summary arrives (the Epilogs' jittered retries, then a reap for what is left), one report each.
#[test]
#[ignore = "needs PostgreSQL (slurm-conf/postgres.sh); tests/run-all.sh runs it"]
fn two_hundred_epilogs_at_once_through_ten_connections_all_arrive() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the PostgreSQL tests run as root"
    );
    script(&["up", "--clean"], CROWDED_DIR, CROWDED_PORT, 10);
    let tmp = tempfile::tempdir().unwrap();
    let (admin, node) = fresh_db(CROWDED_DIR, CROWDED_PORT, "transport_crowd", tmp.path());
    let mut a = pg::connect(&admin).unwrap();
    let max: String = a.query_one("SHOW max_connections", &[]).unwrap().get(0);
    assert_eq!(max, "10");
    let nodes = ["n1", "n2", "n3", "n4"];
    let t = jobscope_config::Transport {
        postgres: node.clone(),
        ..Default::default()
    };
    // Each node its own outbox, each Epilog its own thread with the Epilog's budget.
    let deliveries: Vec<send::Delivery> = std::thread::scope(|sc| {
        let mut hs = Vec::new();
        for n in nodes {
            let ob = Outbox::new(&tmp.path().join(n));
            for job in 400..450 {
                let (ob, t) = (ob.clone(), &t);
                hs.push(sc.spawn(move || {
                    let p = ob.put(&envelope(job, n, &nodes, 0)).unwrap();
                    send::deliver(t, &ob, Some(&p), Duration::from_secs(5))
                }));
            }
        }
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first_try = deliveries
        .iter()
        .filter(|d| d.attempts == 1 && d.left == 0)
        .count();
    let retried = deliveries.iter().filter(|d| d.attempts > 1).count();
    let left: usize = deliveries.iter().map(|d| d.left).sum();
    eprintln!("200 Epilogs, 10 connections: {first_try} sent at once, {retried} retried, {left} left for reap");
    // The server did refuse some (the test squeezes what it says it squeezes).
    assert!(retried > 0, "no Epilog had to retry: {deliveries:?}");
    // What is left goes out with reap's pass, as on a real node.
    for n in nodes {
        let d = send::deliver(
            &t,
            &Outbox::new(&tmp.path().join(n)),
            None,
            Duration::from_secs(60),
        );
        assert_eq!(d.left, 0, "{d:?}");
    }
    let rows: i64 = a
        .query_one("SELECT count(*) FROM jobscope.node_summaries", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 200);
    let cfg = collector_cfg(tmp.path(), &admin, 3600);
    let rep = collect_once(&cfg);
    assert_eq!(rep.archived.len(), 50, "{rep:?}");
    for job in 400..450 {
        let r = records(&cfg.paths.archive_dir, job);
        assert_eq!(r.len(), 1, "job {job}");
        assert_eq!(r[0].nodes.len(), 4, "job {job}");
    }
    drop(a);
    script(&["down"], CROWDED_DIR, CROWDED_PORT, 10);
}

/// The database stopped while an Epilog sends: the Epilog ends within its budget with the
/// summary in the outbox; once the database is back, the retry sends it and the collector
/// makes the complete report.
#[test]
#[ignore = "needs PostgreSQL (slurm-conf/postgres.sh); tests/run-all.sh runs it"]
fn a_database_outage_delays_the_report_and_loses_nothing() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the PostgreSQL tests run as root"
    );
    script(&["up"], OUTAGE_DIR, OUTAGE_PORT, 50);
    let tmp = tempfile::tempdir().unwrap();
    let (admin, node) = fresh_db(OUTAGE_DIR, OUTAGE_PORT, "transport_outage", tmp.path());
    let nodes = ["n1", "n2"];
    let ob = Outbox::new(&tmp.path().join("outbox"));
    assert_eq!(
        send_now(&node, &ob, &envelope(500, "n1", &nodes, 0)).sent,
        1
    );
    script(&["down"], OUTAGE_DIR, OUTAGE_PORT, 50);
    let t = jobscope_config::Transport {
        postgres: node.clone(),
        ..Default::default()
    };
    let p = ob.put(&envelope(500, "n2", &nodes, 0)).unwrap();
    let t0 = Instant::now();
    let d = send::deliver(&t, &ob, Some(&p), Duration::from_secs(2));
    let took = t0.elapsed();
    assert_eq!((d.sent, d.left), (0, 1), "{d:?}");
    assert!(
        took < Duration::from_secs(6),
        "the send outlived its budget: {took:?}"
    );
    assert!(p.exists());
    script(&["up"], OUTAGE_DIR, OUTAGE_PORT, 50);
    let d = send::deliver(&t, &ob, None, Duration::from_secs(30));
    assert_eq!((d.sent, d.left), (1, 0), "{d:?}");
    assert!(ob.is_empty());
    let cfg = collector_cfg(tmp.path(), &admin, 3600);
    let rep = collect_once(&cfg);
    assert_eq!(rep.archived.len(), 1, "{rep:?}");
    let r = records(&cfg.paths.archive_dir, 500);
    assert_eq!(r.len(), 1);
    assert!(r[0].missing_nodes.is_empty());
    script(&["down"], OUTAGE_DIR, OUTAGE_PORT, 50);
}
