//! The index is exact whatever happens to the archive around it (issue 19 §1): random faults
//! interleaved with archive writes and index updates, and after each update the index's rows are
//! compared with the archive's records by key (cluster, job id, start).
//!
//! The truth is read from the archive directory here, with `std::fs` and the file names alone, not
//! through the archive's walker or the index code under test. Rows are read through the query
//! engine (what `jobscope audit jobs` shows).
//!
//! Unreadable directories: the tests run as root, and root reads a `chmod 000` directory. The
//! fault used instead is a plain file in the directory's place (the directory renamed aside): the
//! walker gets a real ENOTDIR from the kernel on it, as it would get EACCES or an NFS error, with
//! no seam in the code under test. An unreadable MANIFEST is a directory in its place (EISDIR on
//! read).

use super::*;
use crate::query::{GroupKey, Query, Report as Q};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use jobscope_model::summary::JobSummary;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const V1_DOC: &str = include_str!("../../../report/testdata/archive-v1/two-node-imbalanced.json");
/// 2026-03-30 00:00 UTC: the days below straddle March and April.
const DAY0_S: u64 = 1_774_828_800;
const DAYS: [&str; 4] = ["2026/03/30", "2026/03/31", "2026/04/01", "2026/04/02"];
const JOBS: u32 = 10;

/// (cluster, job id, start second): the run's key.
type RunKey = (String, u64, u64);

fn summary(job: u32, day: usize) -> JobSummary {
    let mut s = archive::load(
        V1_DOC.as_bytes(),
        &jobscope_model::params::Report::default(),
    )
    .unwrap()
    .summary;
    let start_s = DAY0_S + day as u64 * 86_400 + 3_600 + u64::from(job);
    s.job_id = job;
    s.cluster = Some("c1".into());
    s.scheduler_start_unix_s = Some(start_s);
    s.start_unix_ms = start_s * 1000;
    s.end_unix_ms = (start_s + 600) * 1000;
    s.uid = Some(1001);
    s
}

#[derive(Debug, Clone)]
enum Op {
    Update,
    /// Archive job `.0` of day `.1` (again: a retry of the same run, same key).
    Write(u32, usize),
    /// The Epilog died between the record and its MANIFEST line.
    WriteWithoutLine(u32, usize),
    /// A year (0), month (1) or day (2) directory of day `.1` becomes unreadable.
    BreakDir(u8, usize),
    /// The last broken directory comes back.
    Restore,
    /// A day's MANIFEST goes away, or comes back.
    ToggleManifest(usize),
    /// A day's MANIFEST cannot be read (a directory in its place), or comes back.
    ToggleManifestUnreadable(usize),
    /// A day directory is renamed to another day of its month.
    MoveDay(usize, usize),
    /// An index part copied over another.
    CopyPart(usize, usize),
    /// A state.json entry listed twice.
    DuplicateStateEntry(usize),
    /// One byte of an index part flipped.
    FlipByte(usize, u16),
    /// A lock file left by a writer that died (pid-text format of earlier versions).
    StaleLock,
    /// An entry of state.json made to say something else than its part (issue 29 §3).
    EditState(Edit, usize),
}

/// How [`Op::EditState`] changes state.json.
#[derive(Debug, Clone, Copy)]
enum Edit {
    /// A job part's month: one the index does not have.
    MonthAbsent,
    /// A job part's month: the other month of [`DAYS`].
    MonthOther,
    /// The month in a job part's path (no such file).
    PathMonth,
    /// The month and the path's month alike, to one the index does not have.
    MonthAndPath,
    /// A job part's rows, one more.
    Rows,
    /// A job part's end times before any job's.
    EndTimes,
    /// A job part listed with the node parts.
    OtherTable,
    /// A job part's entry gone.
    DropJobs,
    /// A node part's entry gone.
    DropNodes,
    /// `next_part` back to 1.
    NextPartBack,
    /// A rollup part's entry gone.
    DropRollup,
    /// A rollup part's entry moved to the other month.
    RollupMonthOther,
}

const EDITS: [Edit; 12] = [
    Edit::DropRollup,
    Edit::RollupMonthOther,
    Edit::MonthAbsent,
    Edit::MonthOther,
    Edit::PathMonth,
    Edit::MonthAndPath,
    Edit::Rows,
    Edit::EndTimes,
    Edit::OtherTable,
    Edit::DropJobs,
    Edit::DropNodes,
    Edit::NextPartBack,
];

fn op() -> impl Strategy<Value = Op> {
    let day = 0..DAYS.len();
    prop_oneof![
        4 => Just(Op::Update),
        4 => (1..=JOBS, day.clone()).prop_map(|(j, d)| Op::Write(j, d)),
        1 => (1..=JOBS, day.clone()).prop_map(|(j, d)| Op::WriteWithoutLine(j, d)),
        1 => (0..3u8, day.clone()).prop_map(|(l, d)| Op::BreakDir(l, d)),
        1 => Just(Op::Restore),
        1 => day.clone().prop_map(Op::ToggleManifest),
        1 => day.clone().prop_map(Op::ToggleManifestUnreadable),
        1 => (day.clone(), day).prop_map(|(a, b)| Op::MoveDay(a, b)),
        1 => (0..8usize, 0..8usize).prop_map(|(a, b)| Op::CopyPart(a, b)),
        1 => (0..8usize).prop_map(Op::DuplicateStateEntry),
        1 => (0..8usize, any::<u16>()).prop_map(|(p, o)| Op::FlipByte(p, o)),
        1 => Just(Op::StaleLock),
        2 => (0..EDITS.len(), 0..8usize).prop_map(|(e, i)| Op::EditState(EDITS[e], i)),
    ]
}

struct World {
    _tmp: tempfile::TempDir,
    store: Store,
    settings: Settings,
    /// Broken directories: (where it was, where it is now), last broken last.
    broken: Vec<(PathBuf, PathBuf)>,
    /// Days whose MANIFEST is moved aside, and whether a directory stands in its place.
    manifests: BTreeMap<PathBuf, bool>,
}

fn is_digits(n: &str, len: usize) -> bool {
    n.len() == len && n.bytes().all(|b| b.is_ascii_digit())
}

/// Real subdirectories of `p` named by `len` digits.
fn dated(p: &Path, len: usize) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(p)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            is_digits(&e.file_name().to_string_lossy(), len)
                && e.file_type().is_ok_and(|t| t.is_dir())
        })
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::new(&tmp.path().join("archive"), "root");
        // An installed archive: its root exists before the first record.
        std::fs::create_dir(store.root()).unwrap();
        let settings = Settings {
            // Small, so that compaction runs too.
            compact_parts: 3,
            ..Settings::in_dir(tmp.path().join("index"))
        };
        World {
            _tmp: tmp,
            store,
            settings,
            broken: Vec::new(),
            manifests: BTreeMap::new(),
        }
    }

    fn day_dir(&self, day: usize) -> PathBuf {
        self.store.root().join(DAYS[day])
    }

    /// Whether an update must fail now: a directory or a MANIFEST cannot be read.
    fn unreadable(&self) -> bool {
        !self.broken.is_empty() || self.manifests.values().any(|&dir| dir)
    }

    /// The archived runs: the keys in the names of the records of the dated tree.
    fn records(&self) -> Vec<RunKey> {
        let mut out = Vec::new();
        for y in dated(self.store.root(), 4) {
            for m in dated(&y, 2) {
                for d in dated(&m, 2) {
                    for e in std::fs::read_dir(&d).unwrap().flatten() {
                        let n = e.file_name().to_string_lossy().into_owned();
                        if n.starts_with('.') || !e.file_type().unwrap().is_file() {
                            continue;
                        }
                        let Some(stem) = n.strip_suffix(".json") else {
                            continue;
                        };
                        let f: Vec<&str> = stem.split('-').collect();
                        assert_eq!(f.len(), 3, "{n}");
                        out.push((
                            f[2].to_string(),
                            f[0].parse().unwrap(),
                            f[1].parse().unwrap(),
                        ));
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The index's rows as a query sees them (sorted, duplicates kept).
    fn rows(&self) -> Result<Vec<RunKey>> {
        let eng = ParquetEngine::open(&self.settings.dir)?;
        let cols = ["cluster", "job_id", "scheduler_start_unix_s"];
        // A window over every job (1970 to 2100): an entry's end times count, as in any report
        // with --since or --until.
        let mut q = Query::new(Q::Jobs);
        q.window.since_unix_s = Some(1);
        q.window.until_unix_s = Some(4_102_444_800);
        let mut out = Vec::new();
        for b in eng.scan(&q, &cols)? {
            let c = b.column_by_name("cluster").unwrap().as_string::<i32>();
            let j = b
                .column_by_name("job_id")
                .unwrap()
                .as_primitive::<Int64Type>();
            let s = b
                .column_by_name("scheduler_start_unix_s")
                .unwrap()
                .as_primitive::<Int64Type>();
            for i in 0..b.num_rows() {
                out.push((c.value(i).to_string(), j.value(i) as u64, s.value(i) as u64));
            }
        }
        out.sort();
        Ok(out)
    }

    fn state(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(self.settings.dir.join(STATE)).ok()?).ok()
    }

    fn part_files(&self) -> Vec<PathBuf> {
        let Some(st) = self.state() else {
            return Vec::new();
        };
        ["jobs", "nodes", "rollups"]
            .iter()
            .flat_map(|t| st[t].as_array().cloned().unwrap_or_default())
            .filter_map(|p| Some(self.settings.dir.join(p["file"].as_str()?)))
            .collect()
    }

    /// Applies one fault or write (a step that cannot apply now does nothing).
    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Update => unreachable!(),
            Op::Write(j, d) => {
                // Fails (and leaves nothing) where a fault is in the way: fine.
                let _ = self.store.write(&summary(j, d));
            }
            Op::WriteWithoutLine(j, d) => {
                let m = self.day_dir(d).join(manifest::MANIFEST);
                let before = std::fs::read(&m).ok();
                if self.store.write(&summary(j, d)).is_ok() {
                    match before {
                        Some(b) => std::fs::write(&m, b).unwrap(),
                        None => {
                            let _ = std::fs::remove_file(&m);
                        }
                    }
                }
            }
            Op::BreakDir(level, d) => {
                let depth = [1, 2, 3][level as usize];
                let rel: Vec<&str> = DAYS[d].split('/').take(depth).collect();
                let path = self.store.root().join(rel.join("/"));
                if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                    return;
                }
                let aside = path.with_file_name(format!(
                    ".aside-{}-{}",
                    self.broken.len(),
                    path.file_name().unwrap().to_string_lossy()
                ));
                std::fs::rename(&path, &aside).unwrap();
                std::fs::write(&path, "not a directory").unwrap();
                self.broken.push((path, aside));
            }
            Op::Restore => {
                if let Some((path, aside)) = self.broken.pop() {
                    std::fs::remove_file(&path).unwrap();
                    std::fs::rename(&aside, &path).unwrap();
                }
            }
            Op::ToggleManifest(d) | Op::ToggleManifestUnreadable(d) => {
                let dir = self.day_dir(d);
                let (m, aside) = (dir.join(manifest::MANIFEST), dir.join(".MANIFEST.aside"));
                if !std::fs::symlink_metadata(&dir).is_ok_and(|x| x.is_dir()) {
                    return; // its directory is broken: this waits for it
                }
                if let Some(stand_in) = self.manifests.get(&dir).copied() {
                    if stand_in {
                        std::fs::remove_dir(&m).unwrap();
                    } else if m.exists() {
                        // A write made a new one meanwhile: it goes, the old one comes back.
                        std::fs::remove_file(&m).unwrap();
                    }
                    std::fs::rename(&aside, &m).unwrap();
                    self.manifests.remove(&dir);
                } else if std::fs::symlink_metadata(&m).is_ok_and(|x| x.is_file()) {
                    std::fs::rename(&m, &aside).unwrap();
                    let stand_in = matches!(op, Op::ToggleManifestUnreadable(_));
                    if stand_in {
                        std::fs::create_dir(&m).unwrap();
                    }
                    self.manifests.insert(dir, stand_in);
                }
            }
            Op::MoveDay(a, b) => {
                let (from, to) = (self.day_dir(a), self.day_dir(b));
                let same_month = DAYS[a][..7] == DAYS[b][..7];
                let busy = |p: &Path| self.manifests.keys().any(|k| k == p);
                if a == b || !same_month || busy(&from) || busy(&to) {
                    return;
                }
                if from.is_dir() && !to.exists() && to.parent().is_some_and(|p| p.is_dir()) {
                    std::fs::rename(&from, &to).unwrap();
                }
            }
            Op::CopyPart(a, b) => {
                let parts = self.part_files();
                if parts.len() >= 2 && a % parts.len() != b % parts.len() {
                    let (a, b) = (&parts[a % parts.len()], &parts[b % parts.len()]);
                    if a.exists() && b.exists() {
                        std::fs::copy(a, b).unwrap();
                    }
                }
            }
            Op::DuplicateStateEntry(i) => {
                let Some(mut st) = self.state() else { return };
                let jobs = st["jobs"].as_array_mut().unwrap();
                if jobs.is_empty() {
                    return;
                }
                let e = jobs[i % jobs.len()].clone();
                jobs.push(e);
                std::fs::write(
                    self.settings.dir.join(STATE),
                    serde_json::to_vec(&st).unwrap(),
                )
                .unwrap();
            }
            Op::FlipByte(i, at) => {
                let parts = self.part_files();
                if parts.is_empty() {
                    return;
                }
                let p = &parts[i % parts.len()];
                let Ok(mut b) = std::fs::read(p) else { return };
                // Past the leading magic, before the footer: inside the data pages.
                let n = b.len();
                if n > 64 {
                    let k = 4 + usize::from(at) % (n / 2);
                    b[k] ^= 0x10;
                    std::fs::write(p, b).unwrap();
                }
            }
            Op::StaleLock => {
                let _ = std::fs::write(self.store.root().join(LOCK), "elsewhere 2147483646 0\n");
            }
            Op::EditState(edit, i) => self.edit_state(edit, i),
        }
    }

    /// [`Op::EditState`]: the `i`-th entry (modulo their number) edited.
    fn edit_state(&self, edit: Edit, i: usize) {
        let Some(mut st) = self.state() else { return };
        let table = match edit {
            Edit::DropNodes => "nodes",
            Edit::DropRollup | Edit::RollupMonthOther => "rollups",
            _ => "jobs",
        };
        let Some(list) = st[table].as_array_mut().filter(|l| !l.is_empty()) else {
            return;
        };
        let k = i % list.len();
        let month = list[k]["month"].as_str().unwrap().to_string();
        let file = list[k]["file"].as_str().unwrap().to_string();
        let other = if month == "2026-03" {
            "2026-04"
        } else {
            "2026-03"
        };
        match edit {
            Edit::MonthAbsent => list[k]["month"] = "1999-01".into(),
            Edit::MonthOther | Edit::RollupMonthOther => list[k]["month"] = other.into(),
            Edit::PathMonth => list[k]["file"] = file.replace(&month, other).into(),
            Edit::MonthAndPath => {
                list[k]["file"] = file.replace(&month, "1999-01").into();
                list[k]["month"] = "1999-01".into();
            }
            Edit::Rows => list[k]["rows"] = (list[k]["rows"].as_u64().unwrap() + 1).into(),
            Edit::EndTimes => {
                list[k]["min_end_ms"] = 0.into();
                list[k]["max_end_ms"] = 0.into();
            }
            Edit::OtherTable => {
                let e = list.remove(k);
                st["nodes"].as_array_mut().unwrap().push(e);
            }
            Edit::DropJobs | Edit::DropNodes | Edit::DropRollup => {
                list.remove(k);
            }
            Edit::NextPartBack => st["next_part"] = 1.into(),
        }
        std::fs::write(
            self.settings.dir.join(STATE),
            serde_json::to_vec(&st).unwrap(),
        )
        .unwrap();
    }

    /// Runs one update and checks it: fails exactly when something cannot be read, naming the
    /// path; leaves the index as it was when it fails; makes rows = records when it succeeds.
    fn update(&self) {
        let before = self.rows().ok();
        let r = Index::new(&self.store, self.settings.clone()).update(false);
        if self.unreadable() {
            let e = r.expect_err("an update over an unreadable directory or MANIFEST");
            let msg = format!("{e:#}");
            let named = self
                .broken
                .iter()
                .map(|(p, _)| p.clone())
                .chain(
                    self.manifests
                        .iter()
                        .filter(|(_, &d)| d)
                        .map(|(p, _)| p.clone()),
                )
                .any(|p| msg.contains(&*p.to_string_lossy()));
            assert!(named, "the error names no unreadable path: {msg}");
            assert_eq!(
                self.rows().ok(),
                before,
                "a failed update changed the index"
            );
        } else {
            let rep = r.unwrap();
            // Two records of one run in a month (a day moved onto a retry's day) are said.
            let other = rep.problems.iter().find(|p| !p.contains("the same run as"));
            assert!(other.is_none(), "{:?}", rep.problems);
            let rows = self.rows().unwrap();
            let records = self.records();
            assert_eq!(rows, records, "rows against records");
            self.check_rollups(records.len());
        }
    }

    /// The rollups hold what the job parts hold: as many jobs as records, and the same sums to
    /// the last bit (every question they answer, from them and from the job parts alone).
    fn check_rollups(&self, records: usize) {
        let eng = ParquetEngine::open(&self.settings.dir).unwrap();
        for keys in [vec![], vec![GroupKey::User, GroupKey::Partition]] {
            let mut q = Query::new(Q::Usage);
            q.group_by = keys;
            let plan = eng.plan(&q);
            assert!(plan.rollup_months.is_some(), "{plan:?}");
            let (got, want) = (eng.run(&q).unwrap(), eng.run_from_parts(&q).unwrap());
            assert_eq!(got, want, "rollups against job parts");
            let jobs: f64 = got
                .rows
                .iter()
                .map(|r| r[q.group_by.len()].as_f64().unwrap())
                .sum();
            assert_eq!(
                jobs as usize, records,
                "jobs in the rollups against records"
            );
        }
    }
}

fn run(ops: &[Op]) {
    let mut w = World::new();
    for op in ops {
        match op {
            Op::Update => w.update(),
            _ => w.apply(op),
        }
    }
    // Every fault undone: the index catches up with all of it.
    while !w.broken.is_empty() {
        w.apply(&Op::Restore);
    }
    let aside: Vec<PathBuf> = w.manifests.keys().cloned().collect();
    for dir in aside {
        let d = DAYS
            .iter()
            .position(|d| w.store.root().join(d) == dir)
            .unwrap();
        w.apply(&Op::ToggleManifest(d));
    }
    w.update();
}

proptest! {
    // Each case writes, breaks and updates a small archive (a few ms per update); 48 cases
    // keep this test a few seconds in release.
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn rows_equal_records_whatever_the_order_of_faults(ops in prop::collection::vec(op(), 1..40)) {
        run(&ops);
    }
}

/// Each sequence of issue 19 §1, as it was reproduced.
#[test]
fn the_reproduced_sequences() {
    use Op::*;
    // A day unreadable during one update, then back.
    run(&[
        Write(1, 0),
        Write(2, 0),
        Update,
        BreakDir(2, 0),
        Update,
        Restore,
        Update,
    ]);
    // Its year or month unreadable.
    run(&[
        Write(1, 2),
        Update,
        BreakDir(0, 2),
        Write(3, 3),
        Update,
        Restore,
        Update,
    ]);
    run(&[Write(1, 2), Update, BreakDir(1, 2), Update, Restore, Update]);
    // A MANIFEST missing during one update, then back; then unreadable.
    run(&[
        Write(1, 1),
        Write(2, 1),
        Update,
        ToggleManifest(1),
        Update,
        ToggleManifest(1),
        Update,
    ]);
    run(&[
        Write(1, 1),
        Update,
        ToggleManifestUnreadable(1),
        Update,
        ToggleManifestUnreadable(1),
        Update,
    ]);
    // A record without its line, then a month rebuild with its late line.
    run(&[
        Write(1, 1),
        Update,
        WriteWithoutLine(2, 1),
        Update,
        Write(2, 1),
        Update,
    ]);
    // A part copied over another month's, a state entry twice, a flipped byte.
    run(&[Write(1, 0), Write(2, 2), Update, CopyPart(0, 2), Update]);
    run(&[
        Write(1, 0),
        Write(2, 2),
        Update,
        DuplicateStateEntry(0),
        Update,
    ]);
    run(&[Write(1, 0), Update, FlipByte(0, 1000), Update]);
    // Compaction (more than 3 parts in a month) merges the rollups with their parts, and a
    // rollup damaged or copied over its jobs part is found.
    run(&[
        Write(1, 0),
        Update,
        Write(2, 0),
        Update,
        Write(3, 1),
        Update,
        Write(4, 1),
        Update,
        Write(5, 0),
        Update,
        Write(6, 1),
        Update,
    ]);
    run(&[
        Write(1, 0),
        Update,
        Write(2, 0),
        Update,
        FlipByte(2, 700),
        Update,
    ]);
    run(&[
        Write(1, 0),
        Update,
        Write(2, 0),
        Update,
        CopyPart(1, 2),
        Update,
    ]);
    // Issue 29 §3: an entry of state.json says another month, path, rows, end times or table than
    // its part, or is gone, or next_part went back; each with a month of two parts, then a later
    // write to it.
    for edit in EDITS {
        run(&[
            Write(1, 0),
            Update,
            Write(2, 1),
            Write(3, 2),
            Update,
            EditState(edit, 0),
            Update,
            Update,
            Write(4, 0),
            Update,
        ]);
    }
    // A stale lock does not stop an update; a day moved within its month.
    run(&[
        Write(1, 0),
        StaleLock,
        Update,
        MoveDay(0, 1),
        Update,
        Write(1, 0),
        Update,
    ]);
}

/// Not a check: the cost of an update on a 2 000-job archive, unchanged and after 5 new jobs
/// (`cargo nextest run --release --run-ignored only -E 'test(update_cost)' --no-capture`).
#[test]
#[ignore]
fn update_cost() {
    let w = World::new();
    for i in 0..2000u32 {
        let mut s = summary(1000 + i, (i % 4) as usize);
        s.scheduler_start_unix_s = Some(s.scheduler_start_unix_s.unwrap() + u64::from(i));
        w.store.write(&s).unwrap();
    }
    let idx = Index::new(&w.store, w.settings.clone());
    idx.update(false).unwrap();
    for round in 0..3 {
        let t = std::time::Instant::now();
        let r = idx.update(false).unwrap();
        eprintln!("no change: {:?} ({} days read)", t.elapsed(), r.days_read);
        for k in 0..5u32 {
            w.store.write(&summary(9000 + round * 10 + k, 3)).unwrap();
        }
        let t = std::time::Instant::now();
        let r = idx.update(false).unwrap();
        eprintln!("5 new jobs: {:?} ({} added)", t.elapsed(), r.jobs_added);
    }
}
