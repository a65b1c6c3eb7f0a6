//! The PostgreSQL sink and engine against a real PostgreSQL (Debian's package, started on
//! 127.0.0.1 by slurm-conf/postgres.sh; root only). Ignored in the plain unit-test run: the
//! PostgreSQL phase of tests/run-all.sh runs them with `--ignored`.
//!
//! Each test works in a database of its own. The outage test runs a second server of its own
//! (its own data directory and port) because it stops and starts it.

use jobscope_archive::{self as archive, Store};
use jobscope_audit::eval::MemEngine;
use jobscope_audit::index::{Index, ParquetEngine, Settings};
use jobscope_audit::pg::{self, engine::PgEngine, schema, sink};
use jobscope_audit::{Engine, Filters, GroupKey, JobRow, Query, Report, WasteMetric, Window, Zone};
use jobscope_config::Postgres as PgConfig;
use jobscope_model::params::Report as Thresholds;
use jobscope_model::summary::analysis::analyze;
use jobscope_model::summary::JobSummary;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const MAIN_DIR: &str = "/var/lib/jobscope-pg-test";
const MAIN_PORT: u16 = 15432;
const OUTAGE_DIR: &str = "/var/lib/jobscope-pg-test-outage";
const OUTAGE_PORT: u16 = 15433;
const TEMPLATE: &str = include_str!("../../report/testdata/archive-v1/two-node-imbalanced.json");
/// 2026-01-05 00:00:00 UTC, a Monday.
const T0: u64 = 1_767_571_200;

fn script(cmd: &str, dir: &str, port: u16) {
    let out = Command::new("bash")
        .arg(format!("{REPO}/slurm-conf/postgres.sh"))
        .arg(cmd)
        .env("JOBSCOPE_PG_DIR", dir)
        .env("JOBSCOPE_PG_PORT", port.to_string())
        .output()
        .expect("run slurm-conf/postgres.sh");
    assert!(
        out.status.success(),
        "postgres.sh {cmd} failed: {}{}",
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
        script("up", MAIN_DIR, MAIN_PORT);
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

/// A fresh database `name` on the server at `dir`/`port`; returns the admin config for it.
fn fresh_db(dir: &str, port: u16, name: &str) -> PgConfig {
    let mut c = pg::connect(&admin_cfg(dir, port, "postgres")).unwrap();
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .unwrap();
    c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    admin_cfg(dir, port, name)
}

/// A small seeded generator (splitmix64), so the data is the same on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const USERS: [(&str, u32, &str); 4] = [
    ("alice", 1001, "physics"),
    ("bob", 1002, "chemistry"),
    ("carol", 1003, "physics"),
    ("dave", 1004, "biology"),
];
const PARTITIONS: [&str; 3] = ["cpu", "gpu", "debug"];

fn gpu_json(node: &str, slot: u32, util: f64, hours: f64) -> serde_json::Value {
    let never = util == 0.0;
    serde_json::json!({
        "node": node, "slot": slot, "kind": null, "index": slot, "gres_index": slot,
        "minor": slot, "uuid": format!("GPU-{node}-{slot}"), "pci_bus_id": null,
        "name": "Fake GPU", "parent_uuid": null, "samples": 10,
        "util_mean_pct": util, "util_max_pct": util, "mem_util_mean_pct": util / 2.0,
        "utilization_unknown": false, "mem_peak_bytes": 1_u64 << 30,
        "mem_total_bytes": 16_u64 << 30, "job_mem_peak_bytes": null, "job_processes_max": 1,
        "other_processes_seen": false, "power_mean_w": 100.0, "power_max_w": 200.0,
        "energy_kwh": 0.1 * hours, "energy_estimated": false, "idle_periods": [],
        "idle_s": if never { Some(hours * 3600.0) } else { None },
        "observed_s": hours * 3600.0, "never_used": never, "idle_after_s": null,
        "idle_tail_s": null, "gpu_hours_allocated": hours,
        "gpu_hours_wasted": hours * (1.0 - util / 100.0),
        "classification": null, "throttle_reasons": [], "lost": false, "findings": []
    })
}

/// Job `i` of a seeded test archive: a real archived document (the v1 fixture, upgraded) given
/// another user, partition, size, time and use. GPU-partition jobs get GPUs, some never used;
/// some jobs in the GPU partition have none (the CPU-only-on-GPU report).
fn job(rng: &mut Rng, i: u32) -> JobSummary {
    let mut s = archive::load(TEMPLATE.as_bytes(), &Thresholds::default())
        .unwrap()
        .summary;
    let (user, uid, group) = USERS[rng.below(4) as usize];
    let part = PARTITIONS[rng.below(3) as usize];
    s.cluster = Some("alpha".into());
    s.job_id = 1000 + i;
    s.user = Some(user.into());
    s.uid = Some(uid);
    s.gid = Some(uid + 1000);
    s.group = Some(group.into());
    s.account = Some(format!("acct-{group}"));
    s.partition = Some(part.into());
    s.name = Some(format!("run-{}", rng.below(5)));
    // Spread over ~75 days (three months), any hour.
    let start_s = T0 + rng.below(75 * 86_400);
    let elapsed_s = 60 + rng.below(6 * 3600);
    s.start_unix_ms = start_s * 1000;
    s.scheduler_start_unix_s = Some(start_s);
    s.end_unix_ms = (start_s + elapsed_s) * 1000;
    // QOS (one job in four without, as on a cluster without accounting), submit time and script
    // hash, from `i` (the seeded draws stay as they were).
    s.qos = ["normal", "high", "low"]
        .get(i as usize % 4)
        .map(|q| q.to_string());
    s.submit_unix_s = Some(start_s - u64::from(i % 600));
    s.script_sha256 = Some(format!("{:064x}", i % 7));
    s.elapsed_s = elapsed_s as f64;
    let cores_per_node = 1 + rng.below(8) as u32;
    s.alloc.cores = Some(cores_per_node * 2);
    s.alloc.time_limit_s = Some(elapsed_s + rng.below(4 * 3600));
    let eff = 0.05 + 0.9 * rng.unit();
    let usage = cores_per_node as f64 * 2.0 * elapsed_s as f64 * eff;
    s.cpu.usage_s = Some(usage);
    s.efficiency.cpu_pct = Some(100.0 * eff);
    let gpu_job = part == "gpu" && rng.below(3) > 0;
    let node_names: Vec<String> = if part == "gpu" {
        vec![
            format!("g{:02}", rng.below(4)),
            format!("g{:02}", 4 + rng.below(4)),
        ]
    } else {
        vec![
            format!("c{:02}", rng.below(6)),
            format!("c{:02}", 6 + rng.below(6)),
        ]
    };
    for (k, n) in s.nodes.iter_mut().enumerate() {
        n.node = node_names[k].clone();
        n.job_id = s.job_id;
        n.uid = uid;
        n.start_unix_ms = s.start_unix_ms;
        n.end_unix_ms = s.end_unix_ms;
        n.elapsed_s = s.elapsed_s;
        n.alloc_cores = Some(cores_per_node);
        n.cpu.usage_s = Some(usage / 2.0);
        n.mem.peak_bytes = Some((50 + rng.below(400)) << 20);
        n.gpus = if gpu_job {
            (0..2)
                .map(|slot| {
                    let util = if rng.below(4) == 0 {
                        0.0
                    } else {
                        5.0 + 90.0 * rng.unit()
                    };
                    serde_json::from_value(gpu_json(&n.node, slot, util, elapsed_s as f64 / 3600.0))
                        .expect("a GpuSummary")
                })
                .collect()
        } else {
            Vec::new()
        };
    }
    s.mem.peak_bytes = s.nodes.iter().filter_map(|n| n.mem.peak_bytes).max();
    s.alloc.gpus = gpu_job.then(|| "0,1".to_string());
    s.analysis = Some(analyze(&s, &Default::default()));
    s
}

fn archive_jobs(store: &Store, rng: &mut Rng, ids: std::ops::Range<u32>) -> Vec<JobSummary> {
    ids.map(|i| {
        let s = job(rng, i);
        let w = store.write(&s).unwrap();
        assert!(w.problems.is_empty(), "{:?}", w.problems);
        s
    })
    .collect()
}

fn count(c: &mut postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

fn temp_store() -> (tempfile::TempDir, Store) {
    let d = tempfile::tempdir().unwrap();
    let s = Store::new(&d.path().join("archive"), "root");
    (d, s)
}

/// Every archived document's key and core-hours, read from the JSON files themselves.
fn keys_in_archive(root: &Path) -> Vec<(u32, u64, f64)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && !p.ends_with("users") {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                let v: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
                let cores = v["alloc"]["cores"].as_f64().unwrap();
                let elapsed = v["elapsed_s"].as_f64().unwrap();
                out.push((
                    v["job_id"].as_u64().unwrap() as u32,
                    v["scheduler_start_unix_s"].as_u64().unwrap(),
                    cores * elapsed / 3600.0,
                ));
            }
        }
    }
    out.sort_by_key(|a| (a.0, a.1));
    out
}

#[test]
#[ignore = "needs root and a real PostgreSQL: tests/run-all.sh runs it"]
fn sync_pushes_every_job_once_into_monthly_partitions_and_again_changes_nothing() {
    main_server();
    let cfg = fresh_db(MAIN_DIR, MAIN_PORT, "jobscope_t_sync");
    let (_d, store) = temp_store();
    let mut rng = Rng(1);
    let jobs = archive_jobs(&store, &mut rng, 0..150);
    let mut c = pg::connect(&cfg).unwrap();

    let rep = sink::sync(&mut c, &store, "test", &Thresholds::default()).unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(rep.pushed.inserted, 150);
    assert_eq!(count(&mut c, "SELECT count(*) FROM jobscope.jobs"), 150);

    // The same keys and core-hours as the JSON files say.
    let want = keys_in_archive(store.root());
    assert_eq!(want.len(), 150);
    let got: Vec<(u32, u64, f64)> = c
        .query(
            "SELECT job_id, key_start_s, core_hours_alloc FROM jobscope.jobs ORDER BY job_id, key_start_s",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get::<_, i64>(0) as u32,
                r.get::<_, i64>(1) as u64,
                r.get::<_, f64>(2),
            )
        })
        .collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((g.0, g.1), (w.0, w.1));
        assert!((g.2 - w.2).abs() < 1e-9, "{g:?} vs {w:?}");
    }

    // One partition per month of the start times, each row in its own month's partition.
    let mut months: Vec<String> = jobs
        .iter()
        .map(|s| {
            let d = jobscope_model::time::date_path(s.scheduler_start_unix_s.unwrap() * 1000);
            format!("jobs_{}_{}", &d[..4], &d[5..7])
        })
        .collect();
    months.sort();
    months.dedup();
    assert!(months.len() >= 3, "{months:?}");
    let parts: Vec<String> = c
        .query(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'jobscope.jobs'::regclass ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(parts, months);
    let misplaced = count(
        &mut c,
        "SELECT count(*) FROM jobscope.jobs
         WHERE tableoid::regclass::text <> 'jobscope.jobs_' || to_char(to_timestamp(key_start_s) AT TIME ZONE 'UTC', 'YYYY_MM')",
    );
    assert_eq!(misplaced, 0);
    // The full document is there as jsonb.
    let name: String = c
        .query_one(
            "SELECT summary->>'user' FROM jobscope.jobs WHERE job_id = 1000",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(Some(name), jobs[0].user);

    // Again: nothing new in the manifests, nothing pushed.
    let versions = |c: &mut postgres::Client| -> Vec<String> {
        c.query("SELECT xmin::text FROM jobscope.jobs ORDER BY job_id", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let before = versions(&mut c);
    let rep = sink::sync(&mut c, &store, "test", &Thresholds::default()).unwrap();
    assert_eq!((rep.lines, rep.pushed.inserted), (0, 0));
    // Pushing every archived file again by hand: all unchanged, not even a new row version.
    let mut items = Vec::new();
    for day in store.days() {
        for rec in archive::list(&day.path).unwrap().records {
            let l = archive::load(
                &std::fs::read(day.path.join(&rec.file)).unwrap(),
                &Thresholds::default(),
            )
            .unwrap();
            items.push(sink::Item::of(&l.summary, &rec.file).unwrap());
        }
    }
    assert_eq!(items.len(), 150);
    let p = sink::push(&mut c, &items).unwrap();
    assert_eq!((p.inserted, p.updated, p.unchanged), (0, 0, 150));
    assert_eq!(versions(&mut c), before);
    assert_eq!(count(&mut c, "SELECT count(*) FROM jobscope.jobs"), 150);
}

#[test]
#[ignore = "needs root and a real PostgreSQL: tests/run-all.sh runs it"]
fn a_rewritten_record_replaces_its_row_and_an_edited_file_is_not_pushed() {
    main_server();
    let cfg = fresh_db(MAIN_DIR, MAIN_PORT, "jobscope_t_rewrite");
    let (_d, store) = temp_store();
    let mut rng = Rng(2);
    let mut jobs = archive_jobs(&store, &mut rng, 0..3);
    let mut c = pg::connect(&cfg).unwrap();
    assert_eq!(
        sink::sync(&mut c, &store, "test", &Thresholds::default())
            .unwrap()
            .pushed
            .inserted,
        3
    );

    // A retried write of the same key (the archive replaces the record and appends a line).
    jobs[1].cpu.usage_s = Some(1234.5);
    store.write(&jobs[1]).unwrap();
    let rep = sink::sync(&mut c, &store, "test", &Thresholds::default()).unwrap();
    assert_eq!(
        (
            rep.pushed.inserted,
            rep.pushed.updated,
            rep.pushed.unchanged
        ),
        (0, 1, 0)
    );
    let rows = c
        .query(
            "SELECT cpu_usage_s FROM jobscope.jobs WHERE job_id = $1",
            &[&i64::from(jobs[1].job_id)],
        )
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, f64>(0), 1234.5);

    // A record edited behind the archive's back (no manifest line) is refused, and said so.
    let key = archive::Key::of(&jobs[2]);
    let day = jobscope_model::time::date_path(jobs[2].end_unix_ms);
    let path = store.root().join(&day).join(key.file_name());
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    doc["cpu"]["usage_s"] = serde_json::json!(1.0);
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    // Another job the same day makes the day's manifest grow, so sync looks at it again.
    jobs[0].job_id = 5000;
    jobs[0].end_unix_ms = jobs[2].end_unix_ms;
    store.write(&jobs[0]).unwrap();
    // Force a re-read of the whole day: forget its checkpoint.
    c.execute("DELETE FROM jobscope.sync_days", &[]).unwrap();
    let rep = sink::sync(&mut c, &store, "test", &Thresholds::default()).unwrap();
    assert_eq!(rep.problems.len(), 1, "{:?}", rep.problems);
    assert!(
        rep.problems[0].contains(&key.file_name()),
        "{:?}",
        rep.problems
    );
    let usage: f64 = c
        .query_one(
            "SELECT cpu_usage_s FROM jobscope.jobs WHERE job_id = $1",
            &[&i64::from(jobs[2].job_id)],
        )
        .unwrap()
        .get(0);
    assert_ne!(usage, 1.0, "the edited figure must not reach the database");
}

#[test]
#[ignore = "needs root and a real PostgreSQL: tests/run-all.sh runs it"]
fn sync_resumes_after_the_database_was_down_with_every_job_once() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the PostgreSQL tests run as root"
    );
    script("up", OUTAGE_DIR, OUTAGE_PORT);
    let cfg = fresh_db(OUTAGE_DIR, OUTAGE_PORT, "jobscope_t_outage");
    let (_d, store) = temp_store();
    let mut rng = Rng(3);
    archive_jobs(&store, &mut rng, 0..60);
    {
        let mut c = pg::connect(&cfg).unwrap();
        assert_eq!(
            sink::sync(&mut c, &store, "test", &Thresholds::default())
                .unwrap()
                .pushed
                .inserted,
            60
        );
    }

    // The database goes away; jobs keep ending and being archived.
    script("down", OUTAGE_DIR, OUTAGE_PORT);
    archive_jobs(&store, &mut rng, 60..100);
    let err = pg::connect(&cfg).map(|_| ()).unwrap_err();
    assert!(
        format!("{err:#}").contains("connecting to PostgreSQL"),
        "{err:#}"
    );

    // Back: the next sync pushes exactly what it missed.
    script("up", OUTAGE_DIR, OUTAGE_PORT);
    let mut c = pg::connect(&cfg).unwrap();
    let rep = sink::sync(&mut c, &store, "test", &Thresholds::default()).unwrap();
    assert_eq!((rep.pushed.inserted, rep.pushed.updated), (40, 0));
    // A connection lost in the middle of a sync: the day being pushed is not committed, and
    // the next sync finishes it without duplicates.
    archive_jobs(&store, &mut rng, 100..130);
    {
        let mut killer = pg::connect(&cfg).unwrap();
        let mut victim = pg::connect(&cfg).unwrap();
        let pid: i32 = victim
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        killer
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .unwrap();
        assert!(sink::sync(&mut victim, &store, "test", &Thresholds::default()).is_err());
    }
    let rep = sink::sync(&mut c, &store, "test", &Thresholds::default()).unwrap();
    assert_eq!(rep.pushed.inserted, 30);
    assert_eq!(count(&mut c, "SELECT count(*) FROM jobscope.jobs"), 130);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM (SELECT DISTINCT key_cluster, job_id, key_start_s FROM jobscope.jobs) k"
        ),
        130
    );
    assert_eq!(keys_in_archive(store.root()).len(), 130);
    drop(c);
    script("down", OUTAGE_DIR, OUTAGE_PORT);
}

/// Creates (or resets) a login role with a password.
fn login_role(admin: &mut postgres::Client, role: &str, password: &str) {
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN
               IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN
                 CREATE ROLE {role} LOGIN;
               END IF;
             END $$;
             ALTER ROLE {role} LOGIN PASSWORD '{password}';"
        ))
        .unwrap();
}

fn role_cfg(db: &str, role: &str, dir: &Path, password: &str) -> PgConfig {
    let pw = dir.join(format!("{role}.password"));
    std::fs::write(&pw, password).unwrap();
    std::fs::set_permissions(&pw, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    PgConfig {
        conninfo: Some(format!(
            "host=127.0.0.1 port={MAIN_PORT} user={role} dbname={db}"
        )),
        password_file: Some(pw),
        connect_timeout_s: 5,
        source: "test".into(),
    }
}

#[test]
#[ignore = "needs root and a real PostgreSQL: tests/run-all.sh runs it"]
fn row_level_security_a_mapped_role_sees_only_its_users_jobs() {
    main_server();
    let db = "jobscope_t_rls";
    let cfg = fresh_db(MAIN_DIR, MAIN_PORT, db);
    let (d, store) = temp_store();
    let mut rng = Rng(4);
    let jobs = archive_jobs(&store, &mut rng, 0..120);
    let mut admin = pg::connect(&cfg).unwrap();
    sink::sync(&mut admin, &store, "test", &Thresholds::default()).unwrap();

    login_role(&mut admin, "rls_alice", "pw-alice");
    login_role(&mut admin, "rls_bob", "pw-bob");
    login_role(&mut admin, "rls_nobody", "pw-nobody");
    login_role(&mut admin, "rls_auditor", "pw-auditor");
    schema::map_role(&mut admin, "rls_alice", "alpha", 1001).unwrap();
    schema::map_role(&mut admin, "rls_bob", "alpha", 1002).unwrap();
    admin
        .batch_execute("GRANT jobscope_user TO rls_nobody; GRANT jobscope_auditor TO rls_auditor;")
        .unwrap();

    let of_uid = |uid: u32| jobs.iter().filter(|s| s.uid == Some(uid)).count() as i64;
    assert!(of_uid(1001) > 10 && of_uid(1002) > 10);
    for (role, pw, uid) in [("rls_alice", "pw-alice", 1001), ("rls_bob", "pw-bob", 1002)] {
        let mut c = pg::connect(&role_cfg(db, role, d.path(), pw)).unwrap();
        assert_eq!(
            count(&mut c, "SELECT count(*) FROM jobscope.jobs"),
            of_uid(uid)
        );
        assert_eq!(
            count(
                &mut c,
                "SELECT count(*) FROM jobscope.jobs WHERE uid <> $1::bigint"
                    .replace("$1::bigint", &uid.to_string())
                    .as_str()
            ),
            0
        );
        // The jsonb document carries no one else's job either.
        assert_eq!(
            count(
                &mut c,
                &format!(
                    "SELECT count(*) FROM jobscope.jobs WHERE (summary->>'uid')::bigint <> {uid}"
                )
            ),
            0
        );
        // Reading a month's partition directly is refused (policies live on the parent).
        let part: String = admin
            .query_one(
                "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = 'jobscope.jobs'::regclass LIMIT 1",
                &[],
            )
            .unwrap()
            .get(0);
        let e = c
            .query(&format!("SELECT count(*) FROM jobscope.{part}"), &[])
            .unwrap_err();
        let msg = e
            .as_db_error()
            .map(|d| d.message().to_string())
            .unwrap_or_default();
        assert!(msg.contains("permission denied"), "{e:?}");
        // Writing is refused.
        assert!(c.execute("DELETE FROM jobscope.jobs", &[]).is_err());
        // The role map shows only the role's own line.
        assert_eq!(count(&mut c, "SELECT count(*) FROM jobscope.role_map"), 1);
        // The SQL engine as this role: one user in the usage report.
        let t = PgEngine::new(c)
            .run(&Query {
                group_by: vec![GroupKey::User],
                ..Query::new(Report::Usage)
            })
            .unwrap();
        assert_eq!(t.rows.len(), 1);
        assert_eq!(t.rows[0][1], jobscope_audit::Value::Int(of_uid(uid)));
    }
    let mut c = pg::connect(&role_cfg(db, "rls_nobody", d.path(), "pw-nobody")).unwrap();
    assert_eq!(count(&mut c, "SELECT count(*) FROM jobscope.jobs"), 0);
    let mut c = pg::connect(&role_cfg(db, "rls_auditor", d.path(), "pw-auditor")).unwrap();
    assert_eq!(count(&mut c, "SELECT count(*) FROM jobscope.jobs"), 120);
    // A wrong password is refused.
    assert!(pg::connect(&role_cfg(db, "rls_alice", d.path(), "wrong")).is_err());
}

#[test]
#[ignore = "needs root and a real PostgreSQL: tests/run-all.sh runs it"]
fn the_sql_engine_answers_like_the_parquet_index_and_the_reference_on_the_same_archive() {
    main_server();
    let cfg = fresh_db(MAIN_DIR, MAIN_PORT, "jobscope_t_engines");
    let (_d, store) = temp_store();
    let mut rng = Rng(5);
    archive_jobs(&store, &mut rng, 0..400);
    let mut c = pg::connect(&cfg).unwrap();
    sink::sync(&mut c, &store, "test", &Thresholds::default()).unwrap();
    let pg_engine = PgEngine::new(c);

    // The reference: rows of the archived files as read back from disk.
    let mut rows = Vec::new();
    for day in store.days() {
        for rec in archive::list(&day.path).unwrap().records {
            let l = archive::load(
                &std::fs::read(day.path.join(&rec.file)).unwrap(),
                &Thresholds::default(),
            )
            .unwrap();
            rows.push(JobRow::of(&l.summary));
        }
    }
    assert_eq!(rows.len(), 400);
    let mem = MemEngine::new(&rows).unwrap();
    // And the Parquet index of the same archive, as `jobscope audit` reads it.
    let index_dir = _d.path().join("index");
    let settings = Settings {
        compact_parts: 8,
        lock_wait_s: 10,
        ..Settings::in_dir(index_dir.clone())
    };
    let rep = Index::new(&store, settings).update(false).unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    let parquet = ParquetEngine::open(&index_dir).unwrap();

    let month = Window {
        since_unix_s: Some(T0 as i64 + 20 * 86_400),
        until_unix_s: Some(T0 as i64 + 50 * 86_400),
    };
    let mut queries = vec![Query::new(Report::Usage)];
    for keys in [
        vec![GroupKey::User],
        vec![GroupKey::Account, GroupKey::Partition],
        vec![GroupKey::Group, GroupKey::State, GroupKey::Class],
        vec![GroupKey::Node],
        vec![GroupKey::Partition, GroupKey::Node],
        vec![GroupKey::HourOfDay, GroupKey::DayOfWeek],
        vec![GroupKey::Day],
        vec![GroupKey::Month, GroupKey::Cluster, GroupKey::Qos],
    ] {
        queries.push(Query {
            group_by: keys.clone(),
            ..Query::new(Report::Usage)
        });
        queries.push(Query {
            group_by: keys,
            window: month.clone(),
            zone: Zone::Fixed(3600 + 1800),
            ..Query::new(Report::Usage)
        });
    }
    let filters = [
        Filters {
            users: vec!["alice".into(), "dave".into()],
            ..Default::default()
        },
        Filters {
            partitions: vec!["gpu".into()],
            gpu: Some(false),
            ..Default::default()
        },
        Filters {
            gpu: Some(true),
            min_elapsed_s: Some(3600.0),
            ..Default::default()
        },
        Filters {
            nodes: vec!["c03".into(), "g05".into()],
            states: vec!["COMPLETED".into()],
            ..Default::default()
        },
        Filters {
            uid: Some(1003),
            ..Default::default()
        },
        Filters {
            users: vec!["nobody".into()],
            ..Default::default()
        },
        Filters {
            qos: vec!["high".into(), "low".into()],
            ..Default::default()
        },
    ];
    for f in filters {
        queries.push(Query {
            filters: f.clone(),
            group_by: vec![GroupKey::User, GroupKey::Partition],
            ..Query::new(Report::Usage)
        });
        queries.push(Query {
            filters: f.clone(),
            ..Query::new(Report::Usage)
        });
        queries.push(Query {
            filters: f,
            window: month.clone(),
            limit: Some(25),
            ..Query::new(Report::Jobs)
        });
    }
    for metric in [
        WasteMetric::CoreHours,
        WasteMetric::MemGbHours,
        WasteMetric::GpuHours,
    ] {
        queries.push(Query::new(Report::TopWasters { metric, n: 3 }));
        queries.push(Query {
            group_by: vec![GroupKey::Account],
            window: month.clone(),
            ..Query::new(Report::TopWasters { metric, n: 10 })
        });
    }
    queries.push(Query::new(Report::GpuIdle));
    queries.push(Query {
        limit: Some(7),
        window: month.clone(),
        ..Query::new(Report::GpuIdle)
    });
    for busy in [0.0, 50.0, 90.0] {
        queries.push(Query::new(Report::CpuOnlyOnGpu { busy_pct: busy }));
    }
    queries.push(Query {
        window: month.clone(),
        filters: Filters {
            users: vec!["bob".into()],
            ..Default::default()
        },
        ..Query::new(Report::CpuOnlyOnGpu { busy_pct: 40.0 })
    });
    queries.push(Query::new(Report::Heatmap));
    queries.push(Query {
        zone: Zone::Fixed(-5 * 3600),
        window: month.clone(),
        ..Query::new(Report::Heatmap)
    });
    queries.push(Query::new(Report::Jobs));

    let mut nonempty = 0;
    for q in &queries {
        let want = mem.run(q).unwrap();
        let got = pg_engine.run(q).unwrap();
        if let Err(e) = got.same_as(&want, 1e-9) {
            panic!(
                "{q:?}\n{e}\nsql:       {:?}\nreference: {:?}",
                got.rows.first(),
                want.rows.first()
            );
        }
        let pq = parquet.run(q).unwrap();
        if let Err(e) = got.same_as(&pq, 1e-9) {
            panic!(
                "{q:?}\n{e}\nsql:     {:?}\nparquet: {:?}",
                got.rows.first(),
                pq.rows.first()
            );
        }
        if !want.rows.is_empty() {
            nonempty += 1;
        }
    }
    // The queries really compared something (not two empty answers).
    assert!(
        nonempty >= queries.len() - 3,
        "{nonempty} of {}",
        queries.len()
    );
}

#[test]
#[ignore = "needs root and a real PostgreSQL: tests/run-all.sh runs it"]
fn hostile_text_is_stored_as_text_and_harms_nothing() {
    main_server();
    let cfg = fresh_db(MAIN_DIR, MAIN_PORT, "jobscope_t_hostile");
    let (_d, store) = temp_store();
    let mut rng = Rng(6);
    let mut s = job(&mut rng, 1);
    let name = "x'); DROP TABLE jobscope.jobs; --\u{0}\u{202e}\r\n\"";
    s.name = Some(name.into());
    s.account = Some("a\u{0}b".into());
    store.write(&s).unwrap();
    let mut c = pg::connect(&cfg).unwrap();
    let rep = sink::sync(&mut c, &store, "test", &Thresholds::default()).unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    let r = c
        .query_one(
            "SELECT name, account, summary->>'name' FROM jobscope.jobs",
            &[],
        )
        .unwrap();
    let want = name.replace('\0', "\u{FFFD}");
    assert_eq!(r.get::<_, String>(0), want);
    assert_eq!(r.get::<_, String>(1), "a\u{FFFD}b");
    assert_eq!(r.get::<_, String>(2), want);
    assert_eq!(count(&mut c, "SELECT count(*) FROM jobscope.jobs"), 1);
}

/// No server needed: the `[postgres]` section is checked when the configuration is read, and a
/// password file others can read is refused.
#[test]
fn the_postgres_settings_are_checked_before_anything_connects() {
    use jobscope_config::Config;
    let ok = Config::parse(
        "[postgres]\nconninfo = \"host=db port=5432 user=js dbname=js\"\npassword_file = \"/etc/jobscope/pg.password\"\nsource = \"cluster-a\"\n",
        Path::new("t.toml"),
    )
    .unwrap();
    assert_eq!(ok.postgres.source, "cluster-a");
    assert_eq!(ok.postgres.connect_timeout_s, 10);
    for (bad, why) in [
        ("password_file = \"pg.password\"", "absolute"),
        ("connect_timeout_s = 0", "connect_timeout_s"),
        ("source = \"a/../b\"", "source"),
        ("source = \"\"", "source"),
        ("conninfo_typo = \"x\"", "conninfo_typo"),
    ] {
        let e = Config::parse(&format!("[postgres]\n{bad}\n"), Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains(why), "{bad}: {e}");
    }
    // Not configured: a clear sentence, no connection attempt.
    let e = pg::connect(&PgConfig::default()).map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("[postgres] conninfo"), "{e}");

    let d = tempfile::tempdir().unwrap();
    let pw = d.path().join("pw");
    std::fs::write(&pw, "secret\nignored").unwrap();
    std::fs::set_permissions(&pw, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let e = pg::read_password(&pw).unwrap_err();
    assert!(e.to_string().contains("readable by group or others"), "{e}");
    std::fs::set_permissions(&pw, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert_eq!(pg::read_password(&pw).unwrap(), "secret");
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&pw, &link).unwrap();
    assert!(
        pg::read_password(&link).is_err(),
        "a symlink is not followed"
    );
}

/// A database made by an older jobscope (schema version 1: no kernel-view columns) is brought
/// up to date by the next connection's `ensure`: the missing columns are added on the parent
/// table (so every month partition has them), the rows already there keep their values with
/// nulls in the new columns, and a sync then fills them for a changed record.
#[test]
#[ignore = "needs root and a real PostgreSQL: tests/run-all.sh runs it"]
fn a_version_1_schema_gets_the_new_columns_and_keeps_its_rows() {
    main_server();
    let cfg = fresh_db(MAIN_DIR, MAIN_PORT, "jobscope_t_upgrade");
    let (_d, store) = temp_store();
    let mut rng = Rng(7);
    archive_jobs(&store, &mut rng, 0..20);
    let mut c = pg::connect(&cfg).unwrap();
    let rep = sink::sync(&mut c, &store, "test", &Thresholds::default()).unwrap();
    assert_eq!(rep.pushed.inserted, 20);
    // back to what version 1 had
    let added = [
        "cpu_wait_hours",
        "cpu_wait_pct",
        "syscalls",
        "net_sent_bytes",
        "flag_small_io",
        // and what version 2 lacked (the GPUs' SM activity and health)
        "gpu_sm_active_mean_pct",
        "gpu_xid_errors",
    ];
    for col in added {
        c.batch_execute(&format!("ALTER TABLE jobscope.jobs DROP COLUMN {col}"))
            .unwrap();
    }
    c.batch_execute("UPDATE jobscope.meta SET v = 1 WHERE k = 'schema_version'")
        .unwrap();
    drop(c);

    let mut c = pg::connect(&cfg).unwrap();
    schema::ensure(&mut c).unwrap();
    assert_eq!(
        count(
            &mut c,
            "SELECT v FROM jobscope.meta WHERE k = 'schema_version'"
        ),
        schema::SCHEMA_VERSION
    );
    for col in added {
        // on the parent and on a month partition alike
        let tables = count(
            &mut c,
            &format!(
                "SELECT count(DISTINCT table_name) FROM information_schema.columns
                 WHERE table_schema = 'jobscope' AND column_name = '{col}'
                   AND (table_name = 'jobs' OR table_name LIKE 'jobs\\_%')"
            ),
        );
        assert!(
            tables >= 2,
            "{col} is on the table and its partitions ({tables})"
        );
    }
    assert_eq!(count(&mut c, "SELECT count(*) FROM jobscope.jobs"), 20);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM jobscope.jobs WHERE cpu_wait_hours IS NOT NULL"
        ),
        0,
        "the old rows have no kernel view"
    );
    // a second ensure changes nothing and a sync pushes nothing again
    schema::ensure(&mut c).unwrap();
    let rep = sink::sync(&mut c, &store, "test", &Thresholds::default()).unwrap();
    assert_eq!(rep.pushed.inserted, 0);
}
