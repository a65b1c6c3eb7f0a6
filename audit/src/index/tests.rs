//! The index against the archive it is built from. Expected figures are computed here from the
//! archived JSON files themselves (serde_json values, the formulas of docs/audit.md), never from
//! `JobRow::of` or the engine under test.

use super::*;
use crate::eval::MemEngine;
use crate::query::{Filters, GroupKey, Report, WasteMetric, Window};
use crate::table::Value;
use serde_json::Value as J;

pub(crate) use crate::testing::*;

/// The archive behind a fixture, read as the expectations' source.
trait Docs {
    /// Every archived record (dated tree), as JSON values.
    fn json_docs(&self) -> Vec<J>;
}

impl Docs for Fixture {
    fn json_docs(&self) -> Vec<J> {
        let mut out = Vec::new();
        for d in self.store.days() {
            for r in archive::list(&d.path).unwrap().records {
                let b = std::fs::read(d.path.join(&r.file)).unwrap();
                out.push(serde_json::from_slice(&b).unwrap());
            }
        }
        out
    }
}

fn mixed_jobs() -> Vec<Spec> {
    let mut v = Vec::new();
    let users = [("alice", 1001), ("bob", 1002), ("carol", 1003)];
    for i in 0..12u32 {
        let (u, uid) = users[(i % 3) as usize];
        let part = if i % 2 == 0 { "debug" } else { "gpu" };
        // Two months: days 0-3 in March, days 31-33 in April.
        let day = if i < 7 {
            u64::from(i % 4)
        } else {
            31 + u64::from(i % 3)
        };
        let mut s = spec(100 + i, u, uid, part, day);
        if i == 5 {
            s.gpus = 2;
            s.gpu_used = false;
            s.nodes = &["g1"];
        }
        if i == 9 {
            s.gpus = 1;
            s.gpu_used = true;
            s.nodes = &["g1"];
        }
        if i == 11 {
            s.nodes = &["n1", "n2"];
        }
        v.push(s);
    }
    v
}

fn f(v: &J, path: &[&str]) -> Option<f64> {
    let mut x = v;
    for p in path {
        x = x.get(p)?;
    }
    x.as_f64()
}

/// Σ per user from the JSON documents: (jobs, core-h alloc, core-h used, mem GB-h alloc, GPU-h
/// alloc, hours waiting for a CPU (`None` where no job of the user had the kernel view)).
type Expected = (i64, f64, f64, f64, f64, Option<f64>);
fn expected_by_user(docs: &[J]) -> BTreeMap<String, Expected> {
    let mut m: BTreeMap<String, Expected> = BTreeMap::new();
    for d in docs {
        let h = f(d, &["elapsed_s"]).unwrap() / 3600.0;
        let e = m
            .entry(d["user"].as_str().unwrap().to_string())
            .or_default();
        e.0 += 1;
        e.1 += f(d, &["alloc", "cores"]).unwrap() * h;
        e.2 += f(d, &["cpu", "usage_s"]).unwrap() / 3600.0;
        e.3 += f(d, &["alloc", "mem_per_node_bytes"]).unwrap() / (1u64 << 30) as f64
            * f(d, &["alloc", "nodes"]).unwrap()
            * h;
        let gpus: f64 = d["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n["gpus"].as_array().cloned().unwrap_or_default())
            .map(|g| g["gpu_hours_allocated"].as_f64().unwrap())
            .sum();
        e.4 += gpus;
        if let Some(w) = f(d, &["kernel", "cpu_wait_s"]) {
            e.5 = Some(e.5.unwrap_or(0.0) + w / 3600.0);
        }
    }
    m
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn usage_by_user_equals_the_sums_over_the_archived_json() {
    let fx = fixture();
    fx.write(&mixed_jobs());
    let rep = fx.index().update(false).unwrap();
    assert!(rep.rebuilt, "a missing index is built");
    assert_eq!(rep.jobs_total, 12);
    let mut q = Query::new(Report::Usage);
    q.group_by = vec![GroupKey::User];
    let t = fx.engine().run(&q).unwrap();
    let want = expected_by_user(&fx.json_docs());
    assert_eq!(t.rows.len(), want.len());
    let c = |n: &str| t.column(n).unwrap();
    for (row, (user, w)) in t.rows.iter().zip(&want) {
        assert_eq!(row[0], Value::Text(user.clone()));
        assert_eq!(row[c("jobs")], Value::Int(w.0), "{user}");
        assert!(
            close(num(&row[c("core_hours_alloc")]), w.1),
            "{user}: {row:?} vs {w:?}"
        );
        assert!(close(num(&row[c("core_hours_used")]), w.2), "{user}");
        assert!(close(num(&row[c("mem_gb_hours_alloc")]), w.3), "{user}");
        let eff = num(&row[c("cpu_eff_pct")]);
        assert!(close(eff, 100.0 * w.2 / w.1), "{user}: {eff}");
        match w.5 {
            Some(h) => assert!(close(num(&row[c("cpu_wait_hours")]), h), "{user}: {row:?}"),
            None => assert_eq!(row[c("cpu_wait_hours")], Value::Null, "{user}"),
        }
        if w.4 > 0.0 {
            assert!(close(num(&row[c("gpu_hours_alloc")]), w.4), "{user}");
        } else {
            assert_eq!(
                row[c("gpu_hours_alloc")],
                Value::Null,
                "no GPU: unknown, not 0"
            );
        }
    }
}

/// The usage report computed the obvious way, row by row over the job rows, independently of
/// `eval.rs` (the rules of docs/audit.md): the rows `keep` selects, grouped by `key` (ascending),
/// each with its job count, every resource-hour figure summed over the rows that have it (null
/// when none has), and each efficiency `100 × Σ used ÷ Σ allocated` over the rows with both.
fn naive_usage(
    rows: &[JobRow],
    keep: impl Fn(&JobRow) -> bool,
    key: impl Fn(&JobRow) -> String,
) -> Vec<(String, BTreeMap<&'static str, Option<f64>>)> {
    let mut groups: BTreeMap<String, Vec<&JobRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| keep(r)) {
        groups.entry(key(r)).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|(k, rs)| {
            let sum = |f: fn(&JobRow) -> Option<f64>| -> Option<f64> {
                let v: Vec<f64> = rs.iter().filter_map(|r| f(r)).collect();
                (!v.is_empty()).then(|| v.iter().sum())
            };
            let eff = |used: fn(&JobRow) -> Option<f64>, alloc: fn(&JobRow) -> Option<f64>| {
                let both: Vec<(f64, f64)> = rs
                    .iter()
                    .filter_map(|r| Some((used(r)?, alloc(r)?)))
                    .collect();
                let (u, a) = both
                    .iter()
                    .fold((0.0, 0.0), |(u, a), (x, y)| (u + x, a + y));
                (a > 0.0).then(|| 100.0 * u / a)
            };
            let m = BTreeMap::from([
                ("jobs", Some(rs.len() as f64)),
                ("core_hours_alloc", sum(|r| r.core_hours_alloc)),
                ("core_hours_used", sum(|r| r.core_hours_used)),
                ("core_hours_wasted", sum(|r| r.core_hours_wasted)),
                (
                    "cpu_eff_pct",
                    eff(|r| r.core_hours_used, |r| r.core_hours_alloc),
                ),
                ("mem_gb_hours_alloc", sum(|r| r.mem_gb_hours_alloc)),
                ("mem_gb_hours_used", sum(|r| r.mem_gb_hours_used)),
                ("mem_gb_hours_wasted", sum(|r| r.mem_gb_hours_wasted)),
                (
                    "mem_eff_pct",
                    eff(|r| r.mem_gb_hours_used, |r| r.mem_gb_hours_alloc),
                ),
                ("gpu_hours_alloc", sum(|r| r.gpu_hours_alloc)),
                ("gpu_hours_used", sum(|r| r.gpu_hours_used)),
                ("gpu_hours_wasted", sum(|r| r.gpu_hours_wasted)),
                (
                    "gpu_eff_pct",
                    eff(|r| r.gpu_hours_used, |r| r.gpu_hours_alloc),
                ),
                ("gpu_energy_kwh", sum(|r| r.gpu_energy_kwh)),
                ("cpu_wait_hours", sum(|r| r.cpu_wait_hours)),
            ]);
            (k, m)
        })
        .collect()
}

/// A fixture job's start day in UTC, worked out from the fixture's own calendar (day 0 is Monday
/// 2026-03-02; March has 31 days), not from the engine's date code.
fn fixture_day(r: &JobRow) -> String {
    let day = (r.start_unix_ms - T0_MS) / DAY_MS;
    assert!(day < 30 + 29, "the fixture stays in March and April");
    match day + 2 {
        d @ 1..=31 => format!("2026-03-{d:02}"),
        d => format!("2026-04-{:02}", d - 31),
    }
}

/// `t` (a usage table grouped by one key) holds exactly the groups and figures of `want`.
fn assert_usage(engine: &str, t: &Table, want: &[(String, BTreeMap<&'static str, Option<f64>>)]) {
    assert_eq!(t.rows.len(), want.len(), "{engine}: groups");
    for (row, (k, figures)) in t.rows.iter().zip(want) {
        assert_eq!(row[0], Value::Text(k.clone()), "{engine}: key");
        assert_eq!(t.columns.len(), 1 + figures.len(), "{engine}: columns");
        for (name, w) in figures {
            let got = &row[t.column(name).unwrap()];
            let ok = match w {
                None => *got == Value::Null,
                Some(w) => got.as_f64().is_some_and(|g| close(g, *w)),
            };
            assert!(ok, "{engine} {k} {name}: {got:?}, want {w:?}");
        }
    }
}

#[test]
fn every_report_of_the_parquet_engine_equals_the_in_memory_engine() {
    let fx = fixture();
    let specs = mixed_jobs();
    fx.write(&specs);
    fx.index().update(false).unwrap();
    let rows: Vec<JobRow> = specs.iter().map(|s| JobRow::of(&summary(s))).collect();
    let mem = MemEngine::new(&rows).unwrap();
    let pq = fx.engine();
    let mut queries = Vec::new();
    for report in [
        Report::Usage,
        Report::TopWasters {
            metric: WasteMetric::CoreHours,
            n: 2,
        },
        Report::GpuIdle,
        Report::CpuOnlyOnGpu { busy_pct: 50.0 },
        Report::Heatmap,
        Report::Jobs,
    ] {
        for by in [
            vec![],
            vec![GroupKey::User],
            vec![GroupKey::Day],
            vec![GroupKey::Partition, GroupKey::DayOfWeek],
            vec![GroupKey::Node],
            vec![GroupKey::Month, GroupKey::Account],
        ] {
            let mut q = Query::new(report.clone());
            q.group_by = by;
            queries.push(q.clone());
            q.window = Window {
                since_unix_s: Some(((T0_MS + 31 * DAY_MS) / 1000) as i64),
                until_unix_s: None,
            };
            q.filters.users = vec!["alice".into(), "bob".into()];
            queries.push(q);
        }
    }
    for q in queries {
        let a = pq.run(&q).unwrap();
        let b = mem.run(&q).unwrap();
        a.same_as(&b, 1e-12)
            .unwrap_or_else(|e| panic!("{q:?}: {e}"));
    }
    // Both engines run the same `evaluate`, so agreeing with each other proves nothing about it:
    // usage by user and by day, all jobs and a window with a user filter, against the naive sums.
    let since_ms = T0_MS + 31 * DAY_MS;
    let alice_and_bob_since = |r: &JobRow| {
        r.end_unix_ms >= since_ms && matches!(r.user.as_deref(), Some("alice" | "bob"))
    };
    let user = |r: &JobRow| r.user.clone().unwrap();
    for (key, key_of) in [
        (GroupKey::User, &user as &dyn Fn(&JobRow) -> String),
        (GroupKey::Day, &fixture_day),
    ] {
        for windowed in [false, true] {
            let mut q = Query::new(Report::Usage);
            q.group_by = vec![key];
            if windowed {
                q.window.since_unix_s = Some((since_ms / 1000) as i64);
                q.filters.users = vec!["alice".into(), "bob".into()];
            }
            let want = naive_usage(&rows, |r| !windowed || alice_and_bob_since(r), key_of);
            assert!(want.len() >= 2, "{key:?}: {want:?}");
            assert_usage("parquet", &pq.run(&q).unwrap(), &want);
            assert_usage("in-memory", &mem.run(&q).unwrap(), &want);
        }
    }
}

#[test]
fn columns_the_files_leave_out_are_computed_on_read_to_the_same_bits() {
    let fx = fixture();
    let specs = mixed_jobs();
    fx.write(&specs);
    fx.index().update(false).unwrap();
    // The part files do not store the derived columns...
    let part = &fx.engine().state.jobs[0];
    let f = std::fs::File::open(fx.settings.dir.join(&part.file)).unwrap();
    let file_schema = ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .schema()
        .clone();
    for (name, _) in crate::arrow::DERIVED {
        assert!(file_schema.index_of(name).is_err(), "{name} is stored");
    }
    // ...and reading every column gives each job's row exactly (same bits), in end-time order.
    let mut rows: Vec<JobRow> = specs.iter().map(|s| JobRow::of(&summary(s))).collect();
    rows.sort_by_key(|r| (r.end_unix_ms, r.job_id));
    let want = job_batch(&rows).unwrap();
    let names: Vec<&str> = COLUMNS.iter().map(|(n, _)| *n).collect();
    let got = fx.engine().scan(&Query::new(Report::Jobs), &names).unwrap();
    let got = arrow_select::concat::concat_batches(&got[0].schema(), &got).unwrap();
    assert_eq!(got.num_rows(), rows.len());
    for (c, name) in names.iter().enumerate() {
        assert_eq!(
            got.column(c).as_ref(),
            want.column(c).as_ref(),
            "column {name}"
        );
    }
    // The same through the dictionary read the aggregation uses.
    let parts = fx
        .engine()
        .fold(
            &Query::new(Report::Usage),
            &names,
            true,
            Vec::new,
            |v: &mut Vec<(usize, RecordBatch)>, p, b| {
                v.push((p, b));
                Ok(())
            },
        )
        .unwrap();
    let mut all: Vec<(usize, RecordBatch)> = parts.into_iter().flatten().collect();
    all.sort_by_key(|(p, _)| *p);
    let n: usize = all.iter().map(|(_, b)| b.num_rows()).sum();
    assert_eq!(n, rows.len());
    let user = all[0].1.column_by_name("user").unwrap();
    assert!(
        matches!(user.data_type(), arrow_schema::DataType::Dictionary(..)),
        "{:?}",
        user.data_type()
    );
}

#[test]
fn a_window_selects_by_end_time_and_skips_other_months() {
    let fx = fixture();
    fx.write(&mixed_jobs());
    fx.index().update(false).unwrap();
    let docs = fx.json_docs();
    let since = T0_MS + 31 * DAY_MS;
    let want = docs
        .iter()
        .filter(|d| d["end_unix_ms"].as_u64().unwrap() >= since)
        .count();
    assert!(want > 0 && want < docs.len());
    let mut q = Query::new(Report::Jobs);
    q.window.since_unix_s = Some((since / 1000) as i64);
    let eng = fx.engine();
    let t = eng.run(&q).unwrap();
    assert_eq!(t.rows.len(), want);
    // Only April's part is read.
    let batches = eng.scan(&q, &["end_unix_ms"]).unwrap();
    let read: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(read, want, "March's part is pruned by its end-time range");
}

#[test]
fn updates_are_incremental_and_a_rewritten_record_rebuilds_its_month() {
    let fx = fixture();
    let specs = mixed_jobs();
    let (first, rest) = specs.split_at(8);
    fx.write(first);
    fx.index().update(false).unwrap();
    fx.write(rest);
    let rep = fx.index().update(false).unwrap();
    assert!(!rep.rebuilt);
    assert_eq!(rep.jobs_added, 4);
    assert_eq!(rep.jobs_total, 12);
    assert!(rep.months_rebuilt.is_empty());
    // Nothing new: no day is read.
    let rep = fx.index().update(false).unwrap();
    assert_eq!((rep.days_read, rep.jobs_added), (0, 0));
    // The same run written again (a retried write) with other figures: its month is rebuilt, no
    // duplicate row, the new figure counts.
    let mut again = spec(100, "alice", 1001, "debug", 0);
    again.cpu_s = 1.0;
    fx.write(&[again]);
    let rep = fx.index().update(false).unwrap();
    assert_eq!(rep.months_rebuilt, vec!["2026-03".to_string()]);
    assert_eq!(rep.jobs_total, 12);
    let mut q = Query::new(Report::Jobs);
    q.filters.users = vec!["alice".into()];
    let t = fx.engine().run(&q).unwrap();
    let id = t.column("job_id").unwrap();
    let r = t.rows.iter().find(|r| r[id] == Value::Int(100)).unwrap();
    let alloc = num(&r[t.column("core_hours_alloc").unwrap()]);
    let wasted = num(&r[t.column("core_hours_wasted").unwrap()]);
    assert!(close(wasted, alloc - 1.0 / 3600.0), "{wasted} {alloc}");
    assert_eq!(
        t.rows.iter().filter(|r| r[id] == Value::Int(100)).count(),
        1
    );
}

#[test]
fn an_update_says_how_far_it_is() {
    let fx = fixture();
    let specs = mixed_jobs();
    fx.write(&specs);
    // The days the jobs end on (spec days 0-3 and 31-33: seven).
    let days: BTreeSet<u64> = specs
        .iter()
        .map(|s| (s.start_ms + (s.elapsed_s * 1000.0) as u64) / DAY_MS)
        .collect();
    let mut seen: Vec<String> = Vec::new();
    fx.index()
        .update_with(false, &mut |p| seen.push(format!("{p:?}")))
        .unwrap();
    // A first update makes every month: each day once, counted to the last, then two months.
    let day_events: Vec<&String> = seen.iter().filter(|e| e.starts_with("Day")).collect();
    assert_eq!(day_events.len(), days.len(), "{seen:#?}");
    assert!(day_events[0].starts_with(&format!("Day {{ done: 1, total: {}", days.len())));
    assert!(day_events
        .last()
        .unwrap()
        .starts_with(&format!("Day {{ done: {0}, total: {0}", days.len())));
    let months: Vec<&String> = seen.iter().filter(|e| e.starts_with("Month")).collect();
    assert_eq!(months.len(), 2, "{seen:#?}");
    assert!(
        months[1].contains("done: 2, total: 2, month: \"2026-04\""),
        "{seen:#?}"
    );
    // New records after that are counted one by one.
    fx.write(&[
        spec(500, "alice", 1001, "debug", 2),
        spec(501, "bob", 1002, "debug", 2),
    ]);
    seen.clear();
    fx.index()
        .update_with(false, &mut |p| seen.push(format!("{p:?}")))
        .unwrap();
    let records: Vec<&String> = seen.iter().filter(|e| e.starts_with("Record")).collect();
    assert_eq!(
        records,
        [
            "Record { done: 1, total: 2 }",
            "Record { done: 2, total: 2 }"
        ],
        "{seen:#?}"
    );
}

#[test]
fn a_damaged_or_deleted_index_is_rebuilt_with_the_same_answers() {
    let fx = fixture();
    fx.write(&mixed_jobs());
    fx.index().update(false).unwrap();
    let mut q = Query::new(Report::Usage);
    q.group_by = vec![GroupKey::Partition, GroupKey::User];
    let before = fx.engine().run(&q).unwrap();
    // A part cut short.
    let st = load_state(&fx.settings.dir).unwrap();
    let part = fx.settings.dir.join(&st.jobs[0].file);
    let len = std::fs::metadata(&part).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&part)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    // (The rollups answer `q` without reading the job parts: the parts alone find the damage.)
    assert!(ParquetEngine::open(&fx.settings.dir)
        .and_then(|e| e.run_from_parts(&q))
        .is_err());
    // Only the month it belongs to is rebuilt (the checksum kept in state.json finds it).
    let rep = fx.index().update(false).unwrap();
    assert_eq!(rep.months_rebuilt, [st.jobs[0].month.clone()], "{rep:?}");
    assert!(rep.rebuild_reasons[0].contains(&st.jobs[0].file), "{rep:?}");
    before.same_as(&fx.engine().run(&q).unwrap(), 0.0).unwrap();
    // state.json garbage.
    std::fs::write(fx.settings.dir.join(STATE), b"{not json").unwrap();
    assert!(fx.index().update(false).unwrap().rebuilt);
    before.same_as(&fx.engine().run(&q).unwrap(), 0.0).unwrap();
    // The whole index gone.
    std::fs::remove_dir_all(&fx.settings.dir).unwrap();
    assert!(fx.index().update(false).unwrap().rebuilt);
    before.same_as(&fx.engine().run(&q).unwrap(), 0.0).unwrap();
}

#[test]
fn compaction_merges_small_parts_and_keeps_every_row() {
    let mut fx = fixture();
    fx.settings.compact_parts = 2;
    for i in 0..5u32 {
        fx.write(&[spec(200 + i, "alice", 1001, "debug", 1)]);
        fx.index().update(false).unwrap();
    }
    let st = load_state(&fx.settings.dir).unwrap();
    assert!(st.jobs.len() <= 2, "{:?}", st.jobs);
    let t = fx.engine().run(&Query::new(Report::Jobs)).unwrap();
    let ids: Vec<&Value> = t.rows.iter().map(|r| &r[1]).collect();
    assert_eq!(
        ids,
        (200..205)
            .map(Value::Int)
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()
    );
    // Files the state does not list are gone.
    let files = std::fs::read_dir(fx.settings.dir.join("jobs/2026-03"))
        .unwrap()
        .count();
    assert_eq!(files, st.jobs.len());
}

#[test]
fn heat_map_spreads_core_hours_over_the_hours_a_job_ran() {
    // Monday 23:30 to Tuesday 01:00 UTC on 2 cores: Mon 23h 1.0 core-h, Tue 00h 2.0 core-h.
    let mut s = spec(1, "alice", 1001, "debug", 0);
    s.cores = 2;
    s.start_ms = T0_MS + 23 * 3_600_000 + 1_800_000;
    s.elapsed_s = 5400.0;
    let mem = MemEngine::new(&[JobRow::of(&summary(&s))]).unwrap();
    let t = mem.run(&Query::new(Report::Heatmap)).unwrap();
    assert_eq!(t.rows.len(), 7);
    assert_eq!(t.rows[0][24], Value::Float(1.0));
    assert_eq!(t.rows[1][1], Value::Float(2.0));
    let total: f64 = t.rows.iter().flat_map(|r| r[1..].iter()).map(num).sum();
    assert!(close(total, 3.0));
    // In UTC+2 the same job runs Tuesday 01:30-03:00.
    let mut q = Query::new(Report::Heatmap);
    q.zone = crate::query::Zone::Fixed(7200);
    let t = mem.run(&q).unwrap();
    assert_eq!(t.rows[1][2], Value::Float(1.0));
    assert_eq!(t.rows[1][3], Value::Float(2.0));
}

#[test]
fn cpu_only_jobs_on_a_gpu_partition_are_marked_when_it_was_busy() {
    // gpu partition: a GPU job on 8 cores from 0 h to 4 h; CPU-only jobs: A (4 cores, 1-2 h),
    // B (4 cores, 5-6 h). Capacity seen = 12 cores (at A's start); at A's start 12 of 12 are
    // allocated (100 %), at B's start only B's 4 (33.3 %).
    let mut g = spec(1, "alice", 1001, "gpu", 0);
    g.cores = 8;
    g.gpus = 1;
    g.gpu_used = true;
    g.start_ms = T0_MS;
    g.elapsed_s = 4.0 * 3600.0;
    let mut a = spec(2, "bob", 1002, "gpu", 0);
    a.start_ms = T0_MS + 3_600_000;
    a.elapsed_s = 3600.0;
    let mut b = spec(3, "bob", 1002, "gpu", 0);
    b.start_ms = T0_MS + 5 * 3_600_000;
    b.elapsed_s = 3600.0;
    let other = spec(4, "bob", 1002, "debug", 0);
    let rows: Vec<JobRow> = [g, a, b, other]
        .iter()
        .map(|s| JobRow::of(&summary(s)))
        .collect();
    let t = MemEngine::new(&rows)
        .unwrap()
        .run(&Query::new(Report::CpuOnlyOnGpu { busy_pct: 80.0 }))
        .unwrap();
    let (id, pct, busy) = (
        t.column("job_id").unwrap(),
        t.column("partition_busy_pct").unwrap(),
        t.column("busy").unwrap(),
    );
    let got: Vec<(Value, f64, Value)> = t
        .rows
        .iter()
        .map(|r| (r[id].clone(), num(&r[pct]), r[busy].clone()))
        .collect();
    assert_eq!(
        got.len(),
        2,
        "the GPU job and the debug job are not listed: {got:?}"
    );
    // Same core-hours: ordered by end time.
    assert_eq!(got[0].0, Value::Int(2));
    assert!(close(got[0].1, 100.0));
    assert_eq!(got[0].2, Value::Bool(true));
    assert_eq!(got[1].0, Value::Int(3));
    assert!(close(got[1].1, 100.0 / 3.0));
    assert_eq!(got[1].2, Value::Bool(false));
}

#[test]
fn grouping_by_node_splits_a_job_among_its_nodes() {
    let mut s = spec(1, "alice", 1001, "debug", 0);
    s.nodes = &["n1", "n2"];
    s.cores = 8;
    let row = JobRow::of(&summary(&s));
    let mut q = Query::new(Report::Usage);
    q.group_by = vec![GroupKey::Node];
    let t = MemEngine::new(&[row]).unwrap().run(&q).unwrap();
    assert_eq!(t.rows.len(), 2);
    // 8 cores × 2 h = 16 core-h, 8 on each node; the job counts on both.
    for (r, n) in t.rows.iter().zip(["n1", "n2"]) {
        assert_eq!(r[0], Value::Text(n.into()));
        assert_eq!(r[1], Value::Int(1));
        assert!(close(num(&r[2]), 8.0));
    }
}

#[test]
fn top_wasters_rank_by_wasted_hours_and_a_uid_filter_hides_everyone_else() {
    let specs = mixed_jobs();
    let rows: Vec<JobRow> = specs.iter().map(|s| JobRow::of(&summary(s))).collect();
    let eng = MemEngine::new(&rows).unwrap();
    let t = eng
        .run(&Query::new(Report::TopWasters {
            metric: WasteMetric::CoreHours,
            n: 2,
        }))
        .unwrap();
    // Wasted core-hours per user from the specs: 4 cores × 2 h − CPU hours.
    let mut want: BTreeMap<&str, f64> = BTreeMap::new();
    for s in &specs {
        *want.entry(s.user).or_default() +=
            f64::from(s.cores) * s.elapsed_s / 3600.0 - s.cpu_s / 3600.0;
    }
    let mut ranked: Vec<(&str, f64)> = want.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    assert_eq!(t.rows.len(), 2);
    let w = t.column("core_hours_wasted").unwrap();
    for (r, (u, x)) in t.rows.iter().zip(&ranked) {
        assert_eq!(r[0], Value::Text((*u).into()));
        assert!(close(num(&r[w]), *x));
    }
    let mut q = Query::new(Report::Jobs);
    q.filters = Filters {
        uid: Some(1002),
        ..Default::default()
    };
    let t = eng.run(&q).unwrap();
    let u = t.column("user").unwrap();
    assert_eq!(t.rows.len(), 4);
    assert!(t.rows.iter().all(|r| r[u] == Value::Text("bob".into())));
}

#[test]
fn after_an_update_the_epilog_gets_peers_and_history_and_metrics_count_the_archive() {
    let fx = fixture();
    let now_ms = jobscope_common::now_unix_ms();
    // 24 recent jobs of alice named like `job0`/`job1`/`job2` on debug, all 2 days ago.
    let specs: Vec<Spec> = (0..24u32)
        .map(|i| {
            let mut s = spec(300 + i, "alice", 1001, "debug", 0);
            s.start_ms = now_ms - 2 * DAY_MS + u64::from(i) * 60_000;
            s
        })
        .collect();
    fx.write(&specs);
    let idx = fx.index();
    let rep = idx.update(false).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = jobscope_config::Config::default();
    cfg.paths.archive_dir = fx.store.root().to_path_buf();
    cfg.audit.index_dir = Some(fx.settings.dir.clone());
    cfg.audit.metrics_file = Some(tmp.path().join("jobscope.prom"));
    let notes = crate::after_update(&cfg, &idx, &rep);
    assert!(
        notes.iter().all(|n| !n.contains("not written")),
        "{notes:?}"
    );

    // The Epilog's view of one more run of `job0`.
    let mut s = summary(&spec(999, "alice", 1001, "debug", 0));
    s.name = Some("job0".into());
    jobscope_archive::history::enrich(&cfg, &mut s);
    let a = s.analysis.as_ref().unwrap();
    assert_eq!(a.peers.len(), 2, "CPU and memory: {:?}", a.peers);
    assert_eq!(a.peers[0].cohort_jobs, 24);
    // job0 = ids 300, 303, …: 8 earlier runs + this one.
    let h = a.history.as_ref().expect("history advice");
    assert_eq!(h.runs, 9);
    // CPU efficiency of the earlier runs from the JSON files, to check the median independently.
    let mut effs: Vec<f64> = fx
        .json_docs()
        .iter()
        .map(|d| f(d, &["efficiency", "cpu_pct"]).unwrap())
        .collect();
    effs.sort_by(f64::total_cmp);
    assert_eq!(
        a.peers[0].median_pct,
        effs[((effs.len() - 1) as f64 * 0.5).round() as usize]
    );

    // Thin history: with a higher bar nothing is added.
    cfg.audit.peer_min_jobs = 25;
    cfg.audit.history_min_runs = 10;
    let mut s2 = summary(&spec(998, "alice", 1001, "debug", 0));
    s2.name = Some("job0".into());
    jobscope_archive::history::enrich(&cfg, &mut s2);
    let a2 = s2.analysis.as_ref().unwrap();
    assert!(a2.peers.is_empty() && a2.history.is_none());

    let prom = std::fs::read_to_string(tmp.path().join("jobscope.prom")).unwrap();
    assert!(
        prom.contains("jobscope_jobs_total{cluster=\"c1\",partition=\"debug\"} 24\n"),
        "{prom}"
    );
    let want: f64 = fx
        .json_docs()
        .iter()
        .map(|d| f(d, &["alloc", "cores"]).unwrap() * f(d, &["elapsed_s"]).unwrap() / 3600.0)
        .sum();
    let line = prom
        .lines()
        .find(|l| l.starts_with("jobscope_core_hours_allocated_total{"))
        .unwrap();
    let got: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(close(got, want), "{line} vs {want}");
    // the kernel view's aggregate: the archived jobs' waits for a CPU, in hours
    let want_wait: f64 = fx
        .json_docs()
        .iter()
        .filter_map(|d| f(d, &["kernel", "cpu_wait_s"]))
        .sum::<f64>()
        / 3600.0;
    assert!(want_wait > 0.0, "the fixture has jobs with the kernel view");
    let line = prom
        .lines()
        .find(|l| l.starts_with("jobscope_cpu_wait_hours_total{"))
        .unwrap_or_else(|| panic!("no cpu wait counter in {prom}"));
    let got: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(close(got, want_wait), "{line} vs {want_wait}");
    assert!(!prom.contains("job_id") && !prom.contains("user="));
}

#[test]
fn the_columns_usage_top_wasters_and_the_heat_map_read_are_the_snappy_ones() {
    // Every filter set, so every filter's column is asked for.
    let every_filter = Filters {
        uid: Some(1),
        users: vec!["u".into()],
        groups: vec!["g".into()],
        accounts: vec!["a".into()],
        partitions: vec!["p".into()],
        qos: vec!["q".into()],
        nodes: vec!["n".into()],
        states: vec!["COMPLETED".into()],
        classes: vec!["idle".into()],
        min_elapsed_s: Some(1.0),
        gpu: Some(true),
    };
    let mut reports = vec![Report::Usage, Report::Heatmap];
    for metric in [
        WasteMetric::CoreHours,
        WasteMetric::MemGbHours,
        WasteMetric::GpuHours,
    ] {
        reports.push(Report::TopWasters { metric, n: 5 });
    }
    let mut read = BTreeSet::new();
    for report in reports {
        for filters in [Filters::default(), every_filter.clone()] {
            for key in GroupKey::ALL {
                let mut q = Query::new(report.clone());
                q.filters = filters.clone();
                q.group_by = vec![key];
                read.extend(stored_inputs(&needed_columns(&q)));
            }
        }
    }
    for c in &read {
        assert!(
            FAST_COLUMNS.contains(c),
            "{c} is read by a usage report but written with GZIP"
        );
    }
    // No name in the list is a typo: each is a stored job column.
    for c in FAST_COLUMNS {
        assert!(COLUMNS.iter().any(|(n, _)| n == c), "{c} is no job column");
        assert!(!crate::arrow::DERIVED.iter().any(|(n, _)| n == c));
    }
}

/// The codec of each column of a job part's first row group.
fn codecs(dir: &Path, part: &Part) -> BTreeMap<String, Compression> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let f = std::fs::File::open(dir.join(&part.file)).unwrap();
    let meta = SerializedFileReader::new(f).unwrap().metadata().clone();
    let rg = meta.row_group(0);
    (0..rg.num_columns())
        .map(|i| {
            (
                rg.column(i).column_path().string(),
                rg.column(i).compression(),
            )
        })
        .collect()
}

#[test]
fn a_large_part_keeps_report_columns_on_snappy_and_the_rest_on_gzip_and_reads_back_exactly() {
    // 5000 jobs (a part of at least GZIP_MIN_ROWS rows) in one month, one minute apart.
    let base: Vec<JobRow> = mixed_jobs()
        .iter()
        .map(|s| JobRow::of(&summary(s)))
        .collect();
    let rows: Vec<JobRow> = (0..5000u64)
        .map(|i| {
            let mut r = base[i as usize % base.len()].clone();
            r.job_id = 100_000 + i as u32;
            r.end_unix_ms = T0_MS + 3_600_000 + i * 60_000;
            r.start_unix_ms = r.end_unix_ms - 3_600_000;
            r
        })
        .collect();
    let fx = fixture();
    assert_eq!(write_rows_only(&fx.settings, rows.clone()).unwrap(), 5000);
    let eng = fx.engine();
    assert_eq!(eng.state.jobs.len(), 1);
    let c = codecs(&fx.settings.dir, &eng.state.jobs[0]);
    for hot in FAST_COLUMNS {
        assert_eq!(c[*hot], Compression::SNAPPY, "{hot}");
    }
    for cold in [
        "name",
        "mem_peak_bytes",
        "cpu_user_s",
        "time_eff_pct",
        "flag_oom",
    ] {
        assert!(
            matches!(c[cold], Compression::GZIP(_)),
            "{cold}: {:?}",
            c[cold]
        );
    }
    // Every column reads back as written (same bits), GZIP ones included.
    let want = job_batch(&rows).unwrap();
    let names: Vec<&str> = COLUMNS.iter().map(|(n, _)| *n).collect();
    let got = eng.scan(&Query::new(Report::Jobs), &names).unwrap();
    let got = arrow_select::concat::concat_batches(&got[0].schema(), &got).unwrap();
    assert_eq!(got.num_rows(), rows.len());
    for (i, name) in names.iter().enumerate() {
        assert_eq!(
            got.column(i).as_ref(),
            want.column(i).as_ref(),
            "column {name}"
        );
    }
}

#[test]
fn a_small_part_from_an_update_is_all_snappy() {
    let fx = fixture();
    fx.write(&mixed_jobs());
    fx.index().update(false).unwrap();
    let eng = fx.engine();
    let c = codecs(&fx.settings.dir, &eng.state.jobs[0]);
    assert!(c.contains_key("time_eff_pct"));
    for (name, codec) in &c {
        assert_eq!(*codec, Compression::SNAPPY, "{name}");
    }
}

/// Issue 19 §5: an update that only added jobs rewrites the history files of their users and no
/// other, leaves the peer distributions alone within the hour, and the files it leaves are those
/// a whole rewrite from the index gives; an update that changed nothing writes nothing; a rebuild
/// rewrites everything.
#[test]
fn an_update_rewrites_only_the_history_its_new_jobs_change() {
    let fx = fixture();
    let now_ms = jobscope_common::now_unix_ms();
    let recent = |id: u32, user: &'static str, uid: u32| {
        let mut s = spec(id, user, uid, "debug", 0);
        s.start_ms = now_ms - 2 * DAY_MS + u64::from(id) * 60_000;
        s
    };
    let mut cfg = jobscope_config::Config::default();
    cfg.paths.archive_dir = fx.store.root().to_path_buf();
    cfg.audit.index_dir = Some(fx.settings.dir.clone());
    let hist = fx.settings.dir.join("history");
    let files = || -> BTreeMap<String, (Vec<u8>, u64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir(&hist)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .map(|e| {
                let p = e.path();
                let ino = std::fs::metadata(&p).unwrap().ino();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    (std::fs::read(&p).unwrap(), ino),
                )
            })
            .collect()
    };
    let cohorts = || std::fs::read(fx.settings.dir.join("cohorts.json")).unwrap();

    fx.write(&[
        recent(1, "alice", 1001),
        recent(2, "bob", 1002),
        recent(3, "carol", 1003),
    ]);
    let idx = fx.index();
    let rep = idx.update(false).unwrap();
    let notes = crate::after_update(&cfg, &idx, &rep);
    assert!(notes.iter().any(|n| n.ends_with(": 3 users")), "{notes:?}");
    let (before, cohorts_before) = (files(), cohorts());
    assert_eq!(before.len(), 3);

    // Two more jobs of alice and one of bob: their two files are written again, carol's is not.
    fx.write(&[
        recent(4, "alice", 1001),
        recent(5, "alice", 1001),
        recent(6, "bob", 1002),
    ]);
    let rep = idx.update(false).unwrap();
    assert_eq!(rep.added.as_ref().map(Vec::len), Some(3));
    let notes = crate::after_update(&cfg, &idx, &rep);
    assert!(
        notes.iter().any(|n| n.ends_with("2 users with new jobs")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("peer distributions: current")),
        "{notes:?}"
    );
    assert_eq!(
        cohorts(),
        cohorts_before,
        "the cohorts were written again within the hour"
    );
    let after = files();
    assert_eq!(
        after["1003.json"], before["1003.json"],
        "carol's file was rewritten"
    );
    for f in ["1001.json", "1002.json"] {
        assert_ne!(after[f].1, before[f].1, "{f} was not rewritten");
    }
    let alice: jobscope_archive::history::UserHistory =
        serde_json::from_slice(&after["1001.json"].0).unwrap();
    let runs: usize = alice.names.values().map(Vec::len).sum();
    assert_eq!(runs, 3, "{alice:?}");

    // What the update left is what a whole rewrite from the index gives.
    let bytes = |m: BTreeMap<String, (Vec<u8>, u64)>| -> BTreeMap<String, Vec<u8>> {
        m.into_iter().map(|(k, (b, _))| (k, b)).collect()
    };
    crate::history::write_history(&idx).unwrap();
    assert_eq!(bytes(after), bytes(files()));

    // Nothing new: nothing written.
    let before = files();
    let rep = idx.update(false).unwrap();
    let notes = crate::after_update(&cfg, &idx, &rep);
    assert!(
        notes.iter().any(|n| n == "run history: current"),
        "{notes:?}"
    );
    assert_eq!(files(), before);

    // A rebuild may have dropped rows: everything is made again.
    let rep = idx.update(true).unwrap();
    assert!(rep.added.is_none());
    let notes = crate::after_update(&cfg, &idx, &rep);
    assert!(notes.iter().any(|n| n.ends_with(": 3 users")), "{notes:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("peer distributions: 1 cohorts")),
        "{notes:?}"
    );
}

/// The runs the index holds as a window over all of 1970–2099 reads them (a window, so an entry's
/// end times count), job ids sorted, duplicates kept.
fn indexed_ids(fx: &Fixture) -> Vec<i64> {
    let mut q = Query::new(Report::Jobs);
    q.window = Window {
        since_unix_s: Some(1),
        until_unix_s: Some(4_102_444_800),
    };
    let t = fx.engine().run(&q).unwrap();
    let id = t.column("job_id").unwrap();
    let mut ids: Vec<i64> = t
        .rows
        .iter()
        .map(|r| match r[id] {
            Value::Int(i) => i,
            ref v => panic!("job_id {v:?}"),
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// The job ids of the archived records, read from their JSON, sorted.
fn archived_ids(fx: &Fixture) -> Vec<i64> {
    let mut ids: Vec<i64> = fx
        .json_docs()
        .iter()
        .map(|d| d["job_id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

/// Issue 29 §3: an entry of state.json that says something else than its part (the month, the
/// path, the rows, the end times, the table; an entry gone; `next_part` back or past any number) is
/// found, the month the part really holds is rebuilt, every run is one row, and later updates are
/// right. Each edit on an index of its own: March's one part (7 runs), April's two (5 runs).
#[test]
fn a_state_json_entry_that_disagrees_with_its_part_rebuilds_the_month_it_holds() {
    type Edit = fn(&mut J);
    /// The first entry of `table` (March's part, for jobs).
    fn first<'a>(st: &'a mut J, table: &str) -> &'a mut J {
        &mut st[table][0]
    }
    let edits: [(&str, Edit, Option<&str>); 13] = [
        (
            "a month not in the index",
            |st| first(st, "jobs")["month"] = "1999-01".into(),
            Some("2026-03"),
        ),
        (
            "another month of the index",
            |st| first(st, "jobs")["month"] = "2026-04".into(),
            Some("2026-03"),
        ),
        (
            "the path's month",
            |st| {
                let f = first(st, "jobs")["file"]
                    .as_str()
                    .unwrap()
                    .replace("2026-03", "1999-01");
                first(st, "jobs")["file"] = f.into();
            },
            Some("2026-03"),
        ),
        (
            "the month and the path's month alike",
            |st| {
                let f = first(st, "jobs")["file"]
                    .as_str()
                    .unwrap()
                    .replace("2026-03", "1999-01");
                first(st, "jobs")["file"] = f.into();
                first(st, "jobs")["month"] = "1999-01".into();
            },
            Some("2026-03"),
        ),
        (
            "more rows",
            |st| {
                let rows = first(st, "jobs")["rows"].as_u64().unwrap();
                first(st, "jobs")["rows"] = (rows + 5).into();
            },
            Some("2026-03"),
        ),
        (
            "fewer rows",
            |st| first(st, "jobs")["rows"] = 1.into(),
            Some("2026-03"),
        ),
        (
            "end times before any job",
            |st| {
                first(st, "jobs")["min_end_ms"] = 0.into();
                first(st, "jobs")["max_end_ms"] = 0.into();
            },
            Some("2026-03"),
        ),
        (
            "listed with the nodes",
            |st| {
                let e = st["jobs"].as_array_mut().unwrap().remove(0);
                st["nodes"].as_array_mut().unwrap().push(e);
            },
            Some("2026-03"),
        ),
        (
            "a job part's entry gone",
            |st| {
                st["jobs"].as_array_mut().unwrap().remove(0);
            },
            Some("2026-03"),
        ),
        (
            "a node part's entry gone",
            |st| {
                st["nodes"].as_array_mut().unwrap().remove(0);
            },
            Some("2026-03"),
        ),
        (
            "a day's mark gone",
            |st| {
                let days = st["days"].as_object_mut().unwrap();
                let first = days.keys().next().unwrap().clone();
                days.remove(&first);
            },
            Some("2026-03"),
        ),
        ("next_part back to 1", |st| st["next_part"] = 1.into(), None),
        (
            "next_part past any part",
            |st| st["next_part"] = u64::MAX.into(),
            None,
        ),
    ];
    for (what, edit, month) in edits {
        let fx = fixture();
        let specs = mixed_jobs();
        let (first, rest) = specs.split_at(8);
        fx.write(first);
        fx.index().update(false).unwrap();
        fx.write(rest);
        fx.index().update(false).unwrap();
        assert_eq!(
            indexed_ids(&fx),
            archived_ids(&fx),
            "{what}: before the edit"
        );
        let path = fx.settings.dir.join(STATE);
        let mut st: J = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(st["jobs"][0]["month"], "2026-03", "{what}: the fixture");
        edit(&mut st);
        std::fs::write(&path, serde_json::to_vec(&st).unwrap()).unwrap();

        let rep = fx.index().update(false).unwrap();
        assert!(!rep.rebuilt, "{what}: {rep:?}");
        if let Some(m) = month {
            assert!(rep.months_rebuilt.iter().any(|r| r == m), "{what}: {rep:?}");
        }
        assert_eq!(
            indexed_ids(&fx),
            archived_ids(&fx),
            "{what}: after the update"
        );
        assert_eq!(rep.jobs_total, 12, "{what}: {rep:?}");
        // The next update finds everything current, and the index still holds each run once.
        let rep = fx.index().update(false).unwrap();
        assert!(rep.months_rebuilt.is_empty(), "{what}: {rep:?}");
        assert_eq!((rep.jobs_added, rep.jobs_total), (0, 12), "{what}: {rep:?}");
        assert_eq!(
            indexed_ids(&fx),
            archived_ids(&fx),
            "{what}: a later update"
        );
        // New runs in both months are added beside the parts that are there.
        fx.write(&[
            spec(300, "alice", 1001, "debug", 2),
            spec(301, "bob", 1002, "gpu", 32),
        ]);
        let rep = fx.index().update(false).unwrap();
        assert!(rep.months_rebuilt.is_empty(), "{what}: {rep:?}");
        assert_eq!((rep.jobs_added, rep.jobs_total), (2, 14), "{what}: {rep:?}");
        assert_eq!(indexed_ids(&fx), archived_ids(&fx), "{what}: new runs");
        assert_eq!(archived_ids(&fx).len(), 14, "{what}: the archive");
    }
}

// The phases of an update, on their own.

fn entry(seq: u64, name: &str, chain: &str) -> manifest::Entry {
    manifest::Entry {
        seq,
        name: name.into(),
        sha256: "00".into(),
        chain: chain.into(),
    }
}

#[test]
fn a_days_new_lines_are_those_past_the_mark_while_the_lines_read_are_unchanged() {
    let lines = [
        entry(1, "a.json", "c1"),
        entry(2, "b.json", "c2"),
        entry(3, "c.json", "c3"),
    ];
    let mark = |seq: u64, chain: &str| DayMark {
        size: 0,
        seq,
        chain: chain.into(),
        dir: None,
    };
    let names = |r: std::result::Result<Vec<&manifest::Entry>, String>| -> Vec<String> {
        r.unwrap().iter().map(|e| e.name.clone()).collect()
    };
    // Never read, or read while it had no lines: every line is new.
    assert_eq!(names(new_entries("2026/03/02", None, &lines)).len(), 3);
    assert_eq!(
        names(new_entries("2026/03/02", Some(&mark(0, "")), &lines)).len(),
        3
    );
    assert_eq!(
        names(new_entries("2026/03/02", Some(&mark(2, "c2")), &lines)),
        ["c.json"]
    );
    assert_eq!(
        names(new_entries("2026/03/02", Some(&mark(3, "c3")), &lines)),
        Vec::<String>::new()
    );
    // The line read last is not there with its chain: the MANIFEST was rewritten.
    assert_eq!(
        new_entries("2026/03/02", Some(&mark(2, "other")), &lines).unwrap_err(),
        "the MANIFEST of 2026/03/02 changed or is gone"
    );
    // A new line names a record an earlier line named: that run was written again.
    let again = [entry(1, "a.json", "c1"), entry(2, "a.json", "c2")];
    assert_eq!(
        new_entries("2026/03/02", Some(&mark(1, "c1")), &again).unwrap_err(),
        "a record of 2026/03/02 was written again"
    );
}

#[test]
fn compaction_merges_the_small_parts_or_the_whole_month_past_the_limit() {
    // At or under the limit: left as they are.
    assert_eq!(compaction(&[5, 5, 5], 3), None);
    // The others hold 20 rows, under a quarter of the largest's 100: it stays, they merge.
    assert_eq!(compaction(&[10, 100, 10, 0], 3), Some(Some(1)));
    // 25 rows is a quarter, not under it: the whole month becomes one part.
    assert_eq!(compaction(&[100, 10, 10, 5], 3), Some(None));
    assert_eq!(compaction(&[1, 1], 1), Some(None));
}
