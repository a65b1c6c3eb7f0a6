//! The evaluation of a [`Query`] over Arrow record batches of job rows: the Parquet
//! engine reads only the columns a query needs into batches and calls [`evaluate`]; [`MemEngine`]
//! does the same over rows in memory (tests, small archives). Typed column access, no per-row serde.

use super::arrow::{job_batch, of, oi, Text, View};
use super::query::{
    day_text, month_text, wall_keys, Engine, GroupKey, Query, Report, Result, Zone, JOB_COLUMNS,
};
use super::rollup::{fixed, float, EFF_PAIRS};
use super::row::JobRow;
use super::table::{ColType, Table, Value};
use arrow_array::{Array, BooleanArray, Float64Array, Int64Array, RecordBatch};
use jobscope_model::time;
use std::collections::HashMap;

/// The columns [`matching`] reads: the end time and the filtered ones.
pub fn filter_columns(q: &Query) -> Vec<&'static str> {
    let mut c: Vec<&'static str> = vec!["end_unix_ms"];
    let f = &q.filters;
    let mut add = |n: &'static str| {
        if !c.contains(&n) {
            c.push(n)
        }
    };
    if f.uid.is_some() {
        add("uid");
    }
    for (list, col) in f.text_columns() {
        if !list.is_empty() {
            add(col);
        }
    }
    if !f.nodes.is_empty() {
        add("node_list");
    }
    if f.min_elapsed_s.is_some() {
        add("elapsed_s");
    }
    if f.gpu.is_some() {
        add("alloc_gpus");
    }
    c
}

/// The columns a query reads (the projection handed to the Parquet reader).
pub fn needed_columns(q: &Query) -> Vec<&'static str> {
    let mut c = filter_columns(q);
    let mut add = |n: &'static str| {
        if !c.contains(&n) {
            c.push(n)
        }
    };
    for k in q.keys() {
        add(match k {
            GroupKey::Node => "node_list",
            GroupKey::HourOfDay | GroupKey::DayOfWeek | GroupKey::Day | GroupKey::Month => {
                "start_unix_ms"
            }
            other => other.column(),
        });
        if k == GroupKey::Node {
            add("node_list");
        }
    }
    match q.report {
        Report::Usage | Report::TopWasters { .. } => {
            for n in USAGE_INPUTS {
                add(n);
            }
        }
        Report::Heatmap => {
            add("start_unix_ms");
            add("alloc_cores");
        }
        Report::Jobs | Report::GpuIdle | Report::CpuOnlyOnGpu { .. } => {
            // The listed columns, the times read as stored (milliseconds).
            for (n, _, _) in JOB_COLUMNS {
                add(match *n {
                    "start_unix_s" => "start_unix_ms",
                    "end_unix_s" => "end_unix_ms",
                    other => other,
                });
            }
            if q.report == Report::GpuIdle {
                add("gpus_idle");
                add("gpus_never_used");
                add("gpu_util_mean_pct");
            }
        }
    }
    c
}

/// The job figures a usage group sums, in the order of its sums.
pub(crate) const USAGE_INPUTS: &[&str] = &[
    "core_hours_alloc",
    "core_hours_used",
    "core_hours_wasted",
    "mem_gb_hours_alloc",
    "mem_gb_hours_used",
    "mem_gb_hours_wasted",
    "gpu_hours_alloc",
    "gpu_hours_used",
    "gpu_hours_wasted",
    "gpu_energy_kwh",
    "cpu_wait_hours",
];
/// How many sums a usage group keeps: one per [`USAGE_INPUTS`].
const N_INPUTS: usize = USAGE_INPUTS.len();

/// The rows of a batch that pass the window and the filters (the batch has at least
/// [`filter_columns`]).
pub fn matching(q: &Query, b: &RecordBatch) -> Result<Vec<usize>> {
    let v = View::new(b);
    let end = v.i("end_unix_ms")?;
    let f = &q.filters;
    let mut keep: Vec<usize> = (0..b.num_rows())
        .filter(|&i| oi(end, i).is_some_and(|e| q.window.contains_end_ms(e)))
        .collect();
    if let Some(uid) = f.uid {
        let a = v.i("uid")?;
        keep.retain(|&i| oi(a, i) == Some(i64::from(uid)));
    }
    for (list, col) in f.text_columns() {
        if !list.is_empty() {
            v.t(col)?.retain_in(&mut keep, list);
        }
    }
    if !f.nodes.is_empty() {
        let a = v.t("node_list")?;
        keep.retain(|&i| {
            a.get(i)
                .is_some_and(|l| l.split(',').any(|n| f.nodes.iter().any(|w| w == n)))
        });
    }
    if let Some(min) = f.min_elapsed_s {
        let a = v.f("elapsed_s")?;
        keep.retain(|&i| of(a, i).is_some_and(|e| e >= min));
    }
    if let Some(want) = f.gpu {
        let a = v.i("alloc_gpus")?;
        keep.retain(|&i| oi(a, i).is_some_and(|g| g > 0) == want);
    }
    Ok(keep)
}

/// A group key's value while grouping (borrowed text; time keys as numbers, worded at the end).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key<'a> {
    Null,
    Int(i64),
    Str(&'a str),
    Day(i64),
    Month(i64),
}

impl Key<'_> {
    fn value(&self) -> Value {
        match self {
            Key::Null => Value::Null,
            Key::Int(i) => Value::Int(*i),
            Key::Str(s) => Value::Text(s.to_string()),
            Key::Day(d) => Value::Text(day_text(*d)),
            Key::Month(m) => Value::Text(month_text(*m)),
        }
    }
}

/// A small, fast hasher for the grouping maps (keys are our own codes and short names, not
/// attacker-chosen in a way that matters: a slow audit is the worst a collision flood could do).
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type FxBuild = std::hash::BuildHasherDefault<Fx>;

const HOUR_MS: i64 = 3_600_000;

/// A zone's offsets at instants, looked up once per UTC hour: offsets change a few times a year,
/// and asking the zone (chrono's `Local`: a search in the zone's transitions) for each of a
/// million jobs would cost more than the rest of a report. Exact for any zone whose offset changes
/// at most once within an hour (every zone there is): an hour whose two ends disagree is searched
/// for the second of the change.
pub(crate) struct Offsets {
    zone: Zone,
    hours: HashMap<i64, HourOffsets, FxBuild>,
    /// The last hour looked up (jobs come in end-time order, so mostly the same hour again).
    last: Option<(i64, HourOffsets)>,
}

/// One UTC hour's offsets (ms east): `before` until `change_ms`, `after` from then.
#[derive(Clone, Copy)]
struct HourOffsets {
    before_ms: i64,
    change_ms: i64,
    after_ms: i64,
}

impl Offsets {
    pub(crate) fn new(zone: Zone) -> Offsets {
        Offsets {
            zone,
            hours: HashMap::default(),
            last: None,
        }
    }

    /// The offset (ms east) at `unix_ms` and the instant until which it holds at least (the
    /// next change, else the end of the UTC hour); `None` past chrono's range.
    fn at(&mut self, unix_ms: i64) -> Option<(i64, i64)> {
        if let Zone::Utc | Zone::Fixed(_) = self.zone {
            let o = i64::from(self.zone.offset_s(0)?) * 1000;
            return Some((o, i64::MAX));
        }
        let h = unix_ms.div_euclid(HOUR_MS);
        let ho = match self.last {
            Some((lh, ho)) if lh == h => ho,
            _ => {
                let ho = match self.hours.get(&h) {
                    Some(&ho) => ho,
                    None => {
                        let ho = self.hour(h)?;
                        self.hours.insert(h, ho);
                        ho
                    }
                };
                self.last = Some((h, ho));
                ho
            }
        };
        Some(if unix_ms < ho.change_ms {
            (ho.before_ms, ho.change_ms)
        } else {
            (ho.after_ms, (h + 1) * HOUR_MS)
        })
    }

    /// The offsets of UTC hour `h` (hours since the epoch), the second of a change searched by
    /// halving (offsets change on whole seconds).
    fn hour(&self, h: i64) -> Option<HourOffsets> {
        let off = |s: i64| self.zone.offset_s(s).map(|o| i64::from(o) * 1000);
        let (first_s, last_s) = (h.checked_mul(3600)?, h * 3600 + 3599);
        let (before_ms, after_ms) = (off(first_s)?, off(last_s)?);
        let mut change_s = last_s + 1;
        if before_ms != after_ms {
            let (mut lo, mut hi) = (first_s, last_s);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if off(mid)? == before_ms {
                    lo = mid
                } else {
                    hi = mid
                }
            }
            change_s = hi;
        }
        Some(HourOffsets {
            before_ms,
            change_ms: change_s * 1000,
            after_ms,
        })
    }

    /// The wall-clock reading of `unix_ms` in the zone, and the instant until which the wall clock
    /// stays in the same hour (the next local hour's start or offset change, whichever is first).
    pub(crate) fn wall(&mut self, unix_ms: i64) -> Option<(chrono::NaiveDateTime, i64)> {
        let (local_ms, until) = self.wall_ms(unix_ms)?;
        Some((time::wall(local_ms.div_euclid(1000))?, until))
    }

    /// [`Offsets::wall`] as milliseconds of the wall clock since its 1970-01-01 00:00 (what the
    /// heat map needs: its hour and weekday, [`hour_and_weekday`], without a calendar date).
    fn wall_ms(&mut self, unix_ms: i64) -> Option<(i64, i64)> {
        let (o, holds_until) = self.at(unix_ms)?;
        let local_ms = unix_ms.checked_add(o)?;
        let next_hour = local_ms.div_euclid(HOUR_MS).checked_add(1)? * HOUR_MS - o;
        Some((local_ms, next_hour.min(holds_until)))
    }
}

/// The hour (0–23) and ISO weekday (1–7, Monday 1) of a wall-clock reading in milliseconds since
/// its 1970-01-01 00:00, a Thursday: whole days and hours need no calendar (a test holds it to
/// [`wall_keys`] over chrono).
fn hour_and_weekday(local_ms: i64) -> (usize, usize) {
    let hour = local_ms.div_euclid(HOUR_MS).rem_euclid(24) as usize;
    let day = local_ms.div_euclid(24 * HOUR_MS);
    (hour, (day + 3).rem_euclid(7) as usize + 1)
}

/// At most this many group keys at once.
pub const MAX_KEYS: usize = 8;
/// A key position's code for "no value".
const NULL: u64 = u64::MAX;

/// The usage aggregation of one query, fed batch by batch ([`Usage::add`]), mergeable
/// ([`Usage::merge`]: the Parquet engine aggregates the parts on each core and merges), then
/// worded as the report's table ([`Usage::finish`]).
///
/// A group is a fixed array of codes (an interned id for text, the number for a time key) mapped to a
/// dense group number; the sums are arrays indexed by that number. Each batch first turns its
/// matching rows into (row, group) pairs, then adds one input column at a time over them. A
/// dictionary-encoded key column is resolved once per distinct value per batch, not per row.
pub struct Usage {
    keys: Vec<GroupKey>,
    node_pos: Option<usize>,
    offsets: Offsets,
    /// Per key position: text → id, id → text.
    ids: Vec<HashMap<String, u64, FxBuild>>,
    texts: Vec<Vec<String>>,
    groups: HashMap<[u64; MAX_KEYS], u32, FxBuild>,
    /// With one text key: the group of each interned id (`u32::MAX`: none yet), so a batch's
    /// dictionary values find their groups without hashing a group's codes.
    by_id: Vec<u32>,
    /// Per group number: its codes, job count, sums ([`USAGE_INPUTS`] order), which sums have a
    /// value, and Σ used, Σ alloc of the three weighted efficiencies.
    codes: Vec<[u64; MAX_KEYS]>,
    jobs: Vec<i64>,
    /// Exact: each figure is added as [`fixed`] units, so no order of additions (rows, cores,
    /// rollups) changes an answer.
    sums: Vec<[i128; N_INPUTS]>,
    /// Per group and input: its jobs without a value (a count, not a flag, so that an
    /// aggregation can be taken away from another: [`Usage::subtract`]).
    nulls: Vec<[i64; N_INPUTS]>,
    eff: Vec<[(i128, i128); 3]>,
}

/// Where one group key's values come from in a batch.
enum KeySrc<'a> {
    /// A text key; per dictionary key (or per row for plain text) its id, resolved once.
    T(Text<'a>, Vec<u64>),
    Time(&'a Int64Array, GroupKey),
    /// The month key from a rollup's start month (`year × 12 + month − 1` on the query zone's
    /// clock).
    Month(&'a Int64Array),
    Node(Text<'a>),
}

impl<'a> KeySrc<'a> {
    /// A text key's source, with an empty cache per dictionary value.
    fn text(t: Text<'a>) -> KeySrc<'a> {
        let n = match t {
            Text::Dict(_, values) => values.len(),
            Text::Plain(_) => 0,
        };
        KeySrc::T(t, vec![UNSEEN; n])
    }
}

/// A dictionary key not resolved yet in this batch ([`KeySrc::T`]'s cache).
const UNSEEN: u64 = u64::MAX - 1;

/// A column's null buffer, when it has a null.
fn nulls(a: &Float64Array) -> Option<arrow_buffer::NullBuffer> {
    a.nulls().filter(|n| n.null_count() > 0).cloned()
}

impl Usage {
    pub fn new(q: &Query) -> Result<Usage> {
        let keys = q.keys();
        anyhow::ensure!(keys.len() <= MAX_KEYS, "at most {MAX_KEYS} group keys");
        Ok(Usage {
            node_pos: keys.iter().position(|&k| k == GroupKey::Node),
            offsets: Offsets::new(q.zone),
            ids: vec![HashMap::default(); keys.len()],
            texts: vec![Vec::new(); keys.len()],
            groups: HashMap::default(),
            by_id: Vec::new(),
            codes: Vec::new(),
            jobs: Vec::new(),
            sums: Vec::new(),
            nulls: Vec::new(),
            eff: Vec::new(),
            keys,
        })
    }

    fn intern(&mut self, p: usize, t: &str) -> u64 {
        if let Some(&id) = self.ids[p].get(t) {
            return id;
        }
        let id = self.texts[p].len() as u64;
        self.texts[p].push(t.to_string());
        self.ids[p].insert(t.to_string(), id);
        id
    }

    fn group(&mut self, codes: [u64; MAX_KEYS]) -> u32 {
        if let Some(&g) = self.groups.get(&codes) {
            return g;
        }
        let g = self.codes.len() as u32;
        self.groups.insert(codes, g);
        self.codes.push(codes);
        self.jobs.push(0);
        self.sums.push([0; N_INPUTS]);
        self.nulls.push([0; N_INPUTS]);
        self.eff.push([(0, 0); 3]);
        g
    }

    /// A time key's code for a start instant, on the query zone's wall clock at that instant
    /// ([`NULL`] past chrono's range).
    fn time_code(&mut self, k: GroupKey, ms: i64) -> u64 {
        let Some((w, _)) = self.offsets.wall(ms) else {
            return NULL;
        };
        let (hour, dow, day, month) = wall_keys(w);
        (match k {
            GroupKey::HourOfDay => hour,
            GroupKey::DayOfWeek => dow,
            GroupKey::Day => day,
            _ => month,
        }) as u64
    }

    /// Adds the rows of `b` that pass the query's window and filters. Phases: each key's column
    /// ([`Usage::key_sources`]); each row's group, as (row, group) pairs ([`Usage::pairs_of_one_text`]
    /// for the common single text key, else [`Usage::pairs_of`]); the job counts; then the sums
    /// ([`Usage::add_sums`]) and the efficiencies' sums ([`Usage::add_efficiencies`]).
    pub fn add(&mut self, q: &Query, b: &RecordBatch) -> Result<()> {
        let rows = matching(q, b)?;
        if rows.is_empty() {
            return Ok(());
        }
        let v = View::new(b);
        let inputs: Vec<&Float64Array> =
            USAGE_INPUTS.iter().map(|n| v.f(n)).collect::<Result<_>>()?;
        let mut srcs = self.key_sources(&v)?;
        // (row, group) pairs and, when grouping by node, each pair's share of the job.
        let (pairs, shares) = match srcs.as_mut_slice() {
            [KeySrc::T(t, cache)] => (self.pairs_of_one_text(*t, cache, rows), Vec::new()),
            _ => self.pairs_of(&mut srcs, rows),
        };
        self.count_jobs(&pairs);
        let shares = (!shares.is_empty()).then_some(shares.as_slice());
        if !self.add_dense(&inputs, &pairs, shares) {
            self.add_sums(&inputs, &pairs, shares);
            self.add_efficiencies(&inputs, &pairs, shares);
        }
        Ok(())
    }

    /// Where each group key's values come from in batch `v`.
    fn key_sources<'a>(&self, v: &View<'a>) -> Result<Vec<KeySrc<'a>>> {
        let mut srcs: Vec<KeySrc> = Vec::with_capacity(self.keys.len());
        for &k in &self.keys {
            srcs.push(match k {
                GroupKey::Node => KeySrc::Node(v.t("node_list")?),
                GroupKey::HourOfDay | GroupKey::DayOfWeek | GroupKey::Day | GroupKey::Month => {
                    KeySrc::Time(v.i("start_unix_ms")?, k)
                }
                other => KeySrc::text(v.t(other.column())?),
            });
        }
        Ok(srcs)
    }

    /// The (row, group) pairs of `rows` under one text key `t`: group numbers cached per
    /// dictionary key in `cache` (plain text: per interned id).
    fn pairs_of_one_text(
        &mut self,
        t: Text,
        cache: &mut [u64],
        rows: Vec<usize>,
    ) -> Vec<(u32, u32)> {
        let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(rows.len());
        let mut null_group = None;
        for i in rows {
            let g = match t {
                Text::Dict(d, values) => {
                    if d.is_null(i) || values.is_null(d.keys().value(i) as usize) {
                        *null_group.get_or_insert_with(|| self.group(one_key(NULL)))
                    } else {
                        let k = d.keys().value(i) as usize;
                        if cache[k] == UNSEEN {
                            let id = self.intern(0, values.value(k));
                            cache[k] = u64::from(self.group_of_id(id));
                        }
                        cache[k] as u32
                    }
                }
                Text::Plain(_) => match t.get(i) {
                    None => *null_group.get_or_insert_with(|| self.group(one_key(NULL))),
                    Some(s) => {
                        let id = self.intern(0, s);
                        self.group_of_id(id)
                    }
                },
            };
            pairs.push((i as u32, g));
        }
        pairs
    }

    /// The group of interned id `id` of the one text key.
    fn group_of_id(&mut self, id: u64) -> u32 {
        let i = id as usize;
        if i >= self.by_id.len() {
            self.by_id.resize(i + 1, u32::MAX);
        }
        if self.by_id[i] == u32::MAX {
            self.by_id[i] = self.group(one_key(id));
        }
        self.by_id[i]
    }

    /// The (row, group) pairs of `rows` under any keys, and when grouping by node each pair's
    /// share of its job (a job on n nodes: one pair per node, each 1/n; on none: one pair, 1).
    fn pairs_of(&mut self, srcs: &mut [KeySrc], rows: Vec<usize>) -> (Vec<(u32, u32)>, Vec<f64>) {
        let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(rows.len());
        let mut shares: Vec<f64> = Vec::new();
        for i in rows {
            let mut key = [0u64; MAX_KEYS];
            for (p, s) in srcs.iter_mut().enumerate() {
                key[p] = match s {
                    KeySrc::Node(_) => NULL,
                    KeySrc::T(Text::Dict(d, values), cache) => {
                        if d.is_null(i) || values.is_null(d.keys().value(i) as usize) {
                            NULL
                        } else {
                            let k = d.keys().value(i) as usize;
                            if cache[k] == UNSEEN {
                                cache[k] = self.intern(p, values.value(k));
                            }
                            cache[k]
                        }
                    }
                    KeySrc::T(t, _) => match t.get(i) {
                        None => NULL,
                        Some(s) => self.intern(p, s),
                    },
                    KeySrc::Time(a, k) => match oi(a, i) {
                        None => NULL,
                        Some(ms) => self.time_code(*k, ms),
                    },
                    KeySrc::Month(a) => oi(a, i).map_or(NULL, |m| m as u64),
                };
            }
            match self.node_pos.map(|p| (p, &srcs[p])) {
                Some((p, KeySrc::Node(a))) => {
                    let list: Vec<&str> = a
                        .get(i)
                        .map(|l| l.split(',').filter(|x| !x.is_empty()).collect())
                        .unwrap_or_default();
                    if list.is_empty() {
                        pairs.push((i as u32, self.group(key)));
                        shares.push(1.0);
                    }
                    let share = 1.0 / list.len().max(1) as f64;
                    for n in list {
                        key[p] = self.intern(p, n);
                        pairs.push((i as u32, self.group(key)));
                        shares.push(share);
                    }
                }
                _ => pairs.push((i as u32, self.group(key))),
            }
        }
        (pairs, shares)
    }

    /// Adds the rows of a rollup batch (`crate::rollup::schema`, its text keys plain or as
    /// dictionaries) of `rows`' level whose end month is in its months (UTC, half-open) and that
    /// pass the query's filters. Only for a query the rollups can answer
    /// (`crate::index::rollups::rollup_cannot_answer`), on rollups whose start months are on the
    /// query zone's clock.
    pub fn add_rollup(
        &mut self,
        q: &Query,
        b: &RecordBatch,
        rows: ((i64, i64), i64),
    ) -> Result<()> {
        use crate::rollup::{values_column, RollupView, EFF_SUMS};
        let v = View::new(b);
        let mut keep = crate::rollup::rows_of(b, rows)?;
        retain_rollup_filters(q, b, &mut keep)?;
        if keep.is_empty() {
            return Ok(());
        }
        let mut srcs: Vec<KeySrc> = Vec::with_capacity(self.keys.len());
        for &k in &self.keys {
            srcs.push(match k {
                GroupKey::Month => KeySrc::Month(v.i("start_month")?),
                other if !crate::rollup::TEXT_KEYS.contains(&other.column()) => {
                    anyhow::bail!("a rollup has no {} key", k.column())
                }
                other => KeySrc::text(v.t(other.column())?),
            });
        }
        let pairs = match srcs.as_mut_slice() {
            [KeySrc::T(t, cache)] => self.pairs_of_one_text(*t, cache, keep),
            _ => self.pairs_of(&mut srcs, keep).0,
        };
        let r = RollupView { b };
        let jobs = r.int("jobs")?.values();
        for &(i, g) in &pairs {
            self.jobs[g as usize] += jobs[i as usize];
        }
        // Column by column; the common rows (no null: every job of the row had the figure, and
        // both figures of each efficiency) without a check per row.
        let mut plain = Vec::with_capacity(USAGE_INPUTS.len());
        for (c, n) in USAGE_INPUTS.iter().enumerate() {
            // A count of values left out is null in every row.
            let (sums, values) = (r.sum(n), r.opt_int(&values_column(n)));
            match (sums.dense(), values.filter(|v| v.null_count() < v.len())) {
                (Some(d), None) => {
                    for &(i, g) in &pairs {
                        self.sums[g as usize][c] += d.at(i as usize);
                    }
                }
                _ => {
                    for &(i, g) in &pairs {
                        let (i, g) = (i as usize, g as usize);
                        // A null count: every job of the row has the figure.
                        let n = values.and_then(|v| oi(v, i)).unwrap_or(jobs[i]);
                        self.sums[g][c] += sums.at(i).unwrap_or_default();
                        self.nulls[g][c] += jobs[i] - n;
                    }
                }
            }
            plain.push(sums);
        }
        for (e, ((u, a), (pu, pa))) in EFF_SUMS.iter().zip(EFF_PAIRS).enumerate() {
            let (used, alloc) = (r.sum(u), r.sum(a));
            if let (true, Some(ud), Some(ad)) =
                (used.all_null(), plain[pu].dense(), plain[pa].dense())
            {
                // Every row's efficiency sums are its plain sums.
                for &(i, g) in &pairs {
                    let (i, x) = (i as usize, &mut self.eff[g as usize][e]);
                    x.0 += ud.at(i);
                    x.1 += ad.at(i);
                }
                continue;
            }
            for &(i, g) in &pairs {
                let i = i as usize;
                // Null: the plain sums (every job has both figures).
                let (uu, aa) = match (used.at(i), alloc.at(i)) {
                    (Some(uu), Some(aa)) => (uu, aa),
                    _ => (
                        plain[pu].at(i).unwrap_or_default(),
                        plain[pa].at(i).unwrap_or_default(),
                    ),
                };
                let x = &mut self.eff[g as usize][e];
                x.0 += uu;
                x.1 += aa;
            }
        }
        Ok(())
    }

    /// Counts each pair's job in its group.
    fn count_jobs(&mut self, pairs: &[(u32, u32)]) {
        for &(_, g) in pairs {
            self.jobs[g as usize] += 1;
        }
    }

    /// Adds the [`USAGE_INPUTS`] over the pairs, one input column at a time (the same order of
    /// additions per group as row by row, so the sums do not depend on how the work is cut into
    /// columns), each times its pair's share when there are shares. A share of 1 is not
    /// multiplied (x × 1.0 is x). A null adds nothing and counts among its group's jobs without a value.
    fn add_sums(&mut self, inputs: &[&Float64Array], pairs: &[(u32, u32)], shares: Option<&[f64]>) {
        for (c, a) in inputs.iter().enumerate() {
            let vals = a.values();
            match (nulls(a), shares) {
                (None, None) => {
                    for &(r, g) in pairs {
                        self.sums[g as usize][c] += fixed(vals[r as usize]);
                    }
                }
                (None, Some(sh)) => {
                    for (&(r, g), share) in pairs.iter().zip(sh) {
                        self.sums[g as usize][c] += fixed(vals[r as usize] * share);
                    }
                }
                (Some(nb), sh) => {
                    for (k, &(r, g)) in pairs.iter().enumerate() {
                        let r = r as usize;
                        let g = g as usize;
                        if nb.is_valid(r) {
                            self.sums[g][c] += fixed(vals[r] * sh.map_or(1.0, |s| s[k]));
                        } else {
                            self.nulls[g][c] += 1;
                        }
                    }
                }
            }
        }
    }

    /// The common batch (no null in any figure, no shares): row by row, each figure made whole
    /// once and added to its sum and to its efficiency's, each group's sums touched once per row
    /// rather than once per column (the sums are exact, so the order of the additions does not
    /// matter). `false`: not such a batch, nothing added.
    fn add_dense(
        &mut self,
        inputs: &[&Float64Array],
        pairs: &[(u32, u32)],
        shares: Option<&[f64]>,
    ) -> bool {
        if shares.is_some() || inputs.len() != N_INPUTS || inputs.iter().any(|a| nulls(a).is_some())
        {
            return false;
        }
        let cols: [&[f64]; N_INPUTS] = std::array::from_fn(|c| inputs[c].values().as_ref());
        for &(r, g) in pairs {
            let f: [i128; N_INPUTS] = std::array::from_fn(|c| fixed(cols[c][r as usize]));
            let sums = &mut self.sums[g as usize];
            for (s, x) in sums.iter_mut().zip(f) {
                *s += x;
            }
            let eff = &mut self.eff[g as usize];
            for (x, (u, a)) in eff.iter_mut().zip(EFF_PAIRS) {
                x.0 += f[u];
                x.1 += f[a];
            }
        }
        true
    }

    /// Adds Σ used and Σ alloc of the three weighted efficiencies ([`EFF_PAIRS`]) over the pairs,
    /// from the rows that have both.
    fn add_efficiencies(
        &mut self,
        inputs: &[&Float64Array],
        pairs: &[(u32, u32)],
        shares: Option<&[f64]>,
    ) {
        for (e, (u, al)) in EFF_PAIRS.iter().enumerate() {
            let (ua, aa) = (inputs[*u], inputs[*al]);
            let (uv, av) = (ua.values(), aa.values());
            match (nulls(ua), nulls(aa), shares) {
                (None, None, None) => {
                    for &(r, g) in pairs {
                        let (r, x) = (r as usize, &mut self.eff[g as usize][e]);
                        x.0 += fixed(uv[r]);
                        x.1 += fixed(av[r]);
                    }
                }
                _ => {
                    for (k, &(r, g)) in pairs.iter().enumerate() {
                        let r = r as usize;
                        if ua.is_valid(r) && aa.is_valid(r) {
                            let share = shares.map_or(1.0, |s| s[k]);
                            let x = &mut self.eff[g as usize][e];
                            x.0 += fixed(uv[r] * share);
                            x.1 += fixed(av[r] * share);
                        }
                    }
                }
            }
        }
    }

    /// Adds another aggregation of the same query (another part of the index).
    pub fn merge(&mut self, o: Usage) {
        self.combine(o, 1);
    }

    /// Takes away an aggregation of the same query over jobs this one counted (a rollup month's
    /// jobs outside the window): every figure is a count or an exact sum, so what is left is
    /// what adding the other jobs alone gives, to the last bit. [`Usage::finish`] drops the
    /// groups left without a job.
    pub fn subtract(&mut self, o: Usage) {
        self.combine(o, -1);
    }

    /// Whether group `g` has a value of input `c` (a job with the figure).
    fn has(&self, g: usize, c: usize) -> bool {
        self.jobs[g] > self.nulls[g][c]
    }

    fn combine(&mut self, o: Usage, sign: i64) {
        let keys = self.keys.clone();
        for (og, codes) in o.codes.iter().enumerate() {
            let mut c = *codes;
            for (p, k) in keys.iter().enumerate() {
                let text = !matches!(
                    k,
                    GroupKey::HourOfDay | GroupKey::DayOfWeek | GroupKey::Day | GroupKey::Month
                );
                if text && c[p] != NULL {
                    c[p] = self.intern(p, &o.texts[p][c[p] as usize]);
                }
            }
            let g = self.group(c) as usize;
            let wide = i128::from(sign);
            self.jobs[g] += sign * o.jobs[og];
            for i in 0..N_INPUTS {
                self.sums[g][i] += wide * o.sums[og][i];
                self.nulls[g][i] += sign * o.nulls[og][i];
            }
            for e in 0..3 {
                self.eff[g][e].0 += wide * o.eff[og][e].0;
                self.eff[g][e].1 += wide * o.eff[og][e].1;
            }
        }
    }

    fn values(&self, g: usize) -> Vec<Value> {
        let f = |i: usize| {
            if self.has(g, i) {
                Value::Float(float(self.sums[g][i]))
            } else {
                Value::Null
            }
        };
        let eff = |e: usize| {
            let (used, alloc) = self.eff[g][e];
            if alloc > 0 {
                Value::Float(100.0 * float(used) / float(alloc))
            } else {
                Value::Null
            }
        };
        vec![
            Value::Int(self.jobs[g]),
            f(0),
            f(1),
            f(2),
            eff(0),
            f(3),
            f(4),
            f(5),
            eff(1),
            f(6),
            f(7),
            f(8),
            eff(2),
            f(9),
            f(10),
        ]
    }

    /// The report's table: groups in key order (top wasters: by waste, then key order).
    pub fn finish(self, q: &Query) -> Result<Table> {
        self.table(q)
    }

    /// [`Usage::finish`] without taking the sums: several reports of the same groups (top
    /// wasters by each metric) from one aggregation.
    pub fn table(&self, q: &Query) -> Result<Table> {
        if self.keys.is_empty() && self.codes.is_empty() {
            let mut t = q.empty_table();
            let mut row: Vec<Value> = vec![Value::Int(0)];
            row.extend(std::iter::repeat_n(Value::Null, t.columns.len() - 1));
            // The one row of a question without keys and without jobs (top wasters: if any).
            if !matches!(q.report, Report::TopWasters { n: 0, .. }) {
                t.rows.push(row);
            }
            return Ok(t);
        }
        // A subtraction that takes more than was there: the rollups and the job parts disagree.
        if (0..self.codes.len())
            .any(|g| self.jobs[g] < 0 || self.nulls[g].iter().any(|n| *n < 0 || *n > self.jobs[g]))
        {
            anyhow::bail!(
                "the index's rollups and job parts disagree (run `jobscope index rebuild`)"
            );
        }
        let keys = &self.keys;
        let key_of = |codes: &[u64; MAX_KEYS]| -> Vec<Key> {
            keys.iter()
                .enumerate()
                .map(|(p, k)| match (codes[p], k) {
                    (NULL, _) => Key::Null,
                    (c, GroupKey::HourOfDay | GroupKey::DayOfWeek) => Key::Int(c as i64),
                    (c, GroupKey::Day) => Key::Day(c as i64),
                    (c, GroupKey::Month) => Key::Month(c as i64),
                    (c, _) => Key::Str(&self.texts[p][c as usize]),
                })
                .collect()
        };
        // A group whose jobs were all taken away ([`Usage::subtract`]) is no group; the one row
        // of a question without keys stays.
        let mut list: Vec<(Vec<Key>, usize)> = self
            .codes
            .iter()
            .enumerate()
            .filter(|(g, _)| keys.is_empty() || self.jobs[*g] > 0)
            .map(|(g, c)| (key_of(c), g))
            .collect();
        list.sort_by(|a, b| a.0.cmp(&b.0));
        if let Report::TopWasters { metric, n } = q.report {
            let col = match metric {
                super::query::WasteMetric::CoreHours => 2,
                super::query::WasteMetric::MemGbHours => 5,
                super::query::WasteMetric::GpuHours => 8,
            };
            let sum = |g: usize| self.has(g, col).then_some(float(self.sums[g][col]));
            // Stable sort: ties keep the keys' ascending order.
            list.sort_by(|a, b| desc_nulls_last(sum(a.1), sum(b.1)));
            list.truncate(n);
        }
        let mut t = q.empty_table();
        for (k, g) in list {
            let mut row: Vec<Value> = k.iter().map(Key::value).collect();
            row.extend(self.values(g));
            t.rows.push(row);
        }
        Ok(t)
    }
}

/// Keeps the rows of a rollup batch that pass the query's filters (those a rollup keys: the uid
/// and the text columns).
pub fn retain_rollup_filters(q: &Query, b: &RecordBatch, keep: &mut Vec<usize>) -> Result<()> {
    let v = View::new(b);
    if let Some(uid) = q.filters.uid {
        let a = v.i("uid")?;
        keep.retain(|&i| oi(a, i) == Some(i64::from(uid)));
    }
    for (list, col) in q.filters.text_columns() {
        if !list.is_empty() {
            v.t(col)?.retain_in(keep, list);
        }
    }
    Ok(())
}

/// Codes of a group of one key (the other positions are 0, as in the general path).
fn one_key(code: u64) -> [u64; MAX_KEYS] {
    let mut c = [0; MAX_KEYS];
    c[0] = code;
    c
}

fn usage(q: &Query, batches: &[RecordBatch]) -> Result<Table> {
    let mut u = Usage::new(q)?;
    for b in batches {
        u.add(q, b)?;
    }
    u.finish(q)
}

/// One matching job, for the job reports: where it is and its sort fields.
struct JobRef {
    batch: usize,
    row: usize,
    end_ms: i64,
    job_id: i64,
}

fn job_values(b: &RecordBatch, i: usize) -> Result<Vec<Value>> {
    let v = View::new(b);
    JOB_COLUMNS
        .iter()
        .map(|(name, kind, _)| {
            Ok(match *name {
                "start_unix_s" | "end_unix_s" => {
                    let src = if *name == "start_unix_s" {
                        "start_unix_ms"
                    } else {
                        "end_unix_ms"
                    };
                    oi(v.i(src)?, i).map_or(Value::Null, |ms| Value::Int(ms.div_euclid(1000)))
                }
                _ => cell(&v, name, *kind, i)?,
            })
        })
        .collect()
}

fn cell(v: &View, name: &str, kind: ColType, i: usize) -> Result<Value> {
    Ok(match kind {
        ColType::Int => oi(v.i(name)?, i).map_or(Value::Null, Value::Int),
        ColType::Float => of(v.f(name)?, i).map_or(Value::Null, Value::Float),
        ColType::Text => v
            .t(name)?
            .get(i)
            .map_or(Value::Null, |s| Value::Text(s.to_string())),
        ColType::Bool => {
            let a: &BooleanArray = v.col(name)?;
            if a.is_null(i) {
                Value::Null
            } else {
                Value::Bool(a.value(i))
            }
        }
    })
}

fn desc_nulls_last(a: Option<f64>, b: Option<f64>) -> std::cmp::Ordering {
    match (a, b) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    }
}

/// The rows of `batches` that `q` matches and `keep` keeps (it gets a batch and its matching
/// rows, and takes its columns once per batch).
fn job_refs(
    q: &Query,
    batches: &[RecordBatch],
    keep: impl Fn(&View, &mut Vec<usize>) -> Result<()>,
) -> Result<Vec<JobRef>> {
    let mut out = Vec::new();
    for (bi, b) in batches.iter().enumerate() {
        let v = View::new(b);
        let end = v.i("end_unix_ms")?;
        let id = v.i("job_id")?;
        let mut rows = matching(q, b)?;
        keep(&v, &mut rows)?;
        for i in rows {
            out.push(JobRef {
                batch: bi,
                row: i,
                end_ms: end.value(i),
                job_id: oi(id, i).unwrap_or(0),
            });
        }
    }
    Ok(out)
}

/// Each batch's float column `name` (`None`: the batch has none), looked up once.
fn float_cols<'a>(batches: &'a [RecordBatch], name: &str) -> Vec<Option<&'a Float64Array>> {
    batches.iter().map(|b| View::new(b).f(name).ok()).collect()
}

fn jobs(q: &Query, batches: &[RecordBatch]) -> Result<Table> {
    let mut refs = job_refs(q, batches, |_, _| Ok(()))?;
    refs.sort_by_key(|r| (r.end_ms, r.job_id));
    let mut t = q.empty_table();
    for r in refs.iter().take(q.limit.unwrap_or(usize::MAX)) {
        t.rows.push(job_values(&batches[r.batch], r.row)?);
    }
    Ok(t)
}

fn gpu_idle(q: &Query, batches: &[RecordBatch]) -> Result<Table> {
    let mut refs = job_refs(q, batches, |v, rows| {
        let (idle, never) = (v.i("gpus_idle")?, v.i("gpus_never_used")?);
        rows.retain(|&i| oi(idle, i).is_some_and(|n| n > 0) || oi(never, i).is_some_and(|n| n > 0));
        Ok(())
    })?;
    let wasted_cols = float_cols(batches, "gpu_hours_wasted");
    let wasted = |r: &JobRef| wasted_cols[r.batch].and_then(|a| of(a, r.row));
    refs.sort_by(|a, b| {
        desc_nulls_last(wasted(a), wasted(b)).then((a.end_ms, a.job_id).cmp(&(b.end_ms, b.job_id)))
    });
    let mut t = q.empty_table();
    for r in refs.iter().take(q.limit.unwrap_or(usize::MAX)) {
        let b = &batches[r.batch];
        let v = View::new(b);
        let mut row = job_values(b, r.row)?;
        row.push(cell(&v, "gpus_idle", ColType::Int, r.row)?);
        row.push(cell(&v, "gpus_never_used", ColType::Int, r.row)?);
        row.push(cell(&v, "gpu_util_mean_pct", ColType::Float, r.row)?);
        t.rows.push(row);
    }
    Ok(t)
}

fn cpu_only_on_gpu(q: &Query, batches: &[RecordBatch], busy_pct: f64) -> Result<Table> {
    cpu_only_on_gpu_of(q, batches, batches, busy_pct)
}

/// The `cpu-on-gpu` report with the partitions' occupancy read from `occupancy` (at least every
/// job of the window's GPU partitions that the caller may see, with `partition`, the times,
/// `alloc_cores` and `alloc_gpus`) and the jobs listed from `listed` (at least the CPU-only jobs of
/// those partitions, with the report's columns): the Parquet engine reads the two apart, the
/// job columns only for the jobs it lists.
pub fn cpu_only_on_gpu_of(
    q: &Query,
    occupancy: &[RecordBatch],
    listed: &[RecordBatch],
    busy_pct: f64,
) -> Result<Table> {
    let (occ, refs) = cpu_only_refs(q, occupancy, listed, true)?;
    let mut t = q.empty_table();
    for r in refs.iter().take(q.limit.unwrap_or(usize::MAX)) {
        t.rows
            .push(cpu_only_row(&occ, &listed[r.batch], r.row, busy_pct)?);
    }
    Ok(t)
}

/// What the cluster report shows of the `cpu-on-gpu` report: how many jobs it lists and how many
/// of them started while their partition was busy, their core-hours allocated per partition
/// (busy, otherwise; the partitions in order of first listing), and the first `top_n` busy jobs'
/// rows (the report's columns and order). The same figures as the whole report's table, without
/// making a row of every job.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuOnGpuSummary {
    pub jobs: u64,
    pub busy_jobs: u64,
    /// (partition, core-hours allocated of its jobs that started while it was busy, of the others).
    pub partitions: Vec<(Option<String>, f64, f64)>,
    /// The report's table with the first `top_n` busy jobs.
    pub busy: Table,
}

/// [`CpuOnGpuSummary`] from the occupancy batches alone (as [`cpu_only_on_gpu_of`]'s, with
/// `job_id`, `cluster`, the columns of `q`'s filters and `core_hours_alloc`): the jobs it counts are read
/// from them; `fetch` is handed the (job id, end ms) of the first `top_n` busy jobs and returns
/// batches with the report's columns holding at least those jobs (the Parquet engine decodes the
/// wide columns of those few rows only).
pub fn cpu_only_on_gpu_summary(
    q: &Query,
    occupancy: &[RecordBatch],
    busy_pct: f64,
    top_n: usize,
    fetch: impl FnOnce(&[(i64, i64)]) -> Result<Vec<RecordBatch>>,
) -> Result<CpuOnGpuSummary> {
    let (occ, refs) = cpu_only_refs(q, occupancy, occupancy, true)?;
    let mut out = CpuOnGpuSummary {
        jobs: 0,
        busy_jobs: 0,
        partitions: Vec::new(),
        busy: q.empty_table(),
    };
    // (cluster, job id, end ms): a run's key in a window.
    type Key = (Option<String>, i64, i64);
    let key_of = |v: &View, r: &JobRef| -> Result<Key> {
        Ok((
            v.t("cluster")?.get(r.row).map(str::to_string),
            r.job_id,
            r.end_ms,
        ))
    };
    let mut top: Vec<Key> = Vec::new();
    for r in refs.iter().take(q.limit.unwrap_or(usize::MAX)) {
        let v = View::new(&occupancy[r.batch]);
        let part = v.t("partition")?.get(r.row).map(str::to_string);
        let busy = occ.of_row(&v, r.row)?.is_some_and(|p| p >= busy_pct);
        let h = of(v.f("core_hours_alloc")?, r.row).unwrap_or(0.0);
        let i = match out.partitions.iter().position(|x| x.0 == part) {
            Some(i) => i,
            None => {
                out.partitions.push((part, 0.0, 0.0));
                out.partitions.len() - 1
            }
        };
        out.jobs += 1;
        if busy {
            out.partitions[i].1 += h;
            out.busy_jobs += 1;
            if top.len() < top_n {
                top.push(key_of(&v, r)?);
            }
        } else {
            out.partitions[i].2 += h;
        }
    }
    if top.is_empty() {
        return Ok(out);
    }
    // The busy jobs' rows, in the list's order.
    let ids: Vec<(i64, i64)> = top.iter().map(|k| (k.1, k.2)).collect();
    let details = fetch(&ids)?;
    let mut at: HashMap<Key, (usize, usize)> = HashMap::new();
    for r in job_refs(q, &details, |_, _| Ok(()))? {
        let v = View::new(&details[r.batch]);
        at.entry(key_of(&v, &r)?).or_insert((r.batch, r.row));
    }
    for key in &top {
        let &(bi, row) = at
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("job {} is gone from the index", key.1))?;
        out.busy
            .rows
            .push(cpu_only_row(&occ, &details[bi], row, busy_pct)?);
    }
    Ok(out)
}

/// A run's key in a window: (cluster, job id, start second).
pub type RunKey = (Option<String>, i64, i64);

/// The jobs the `cpu-on-gpu` report marks busy, from the occupancy batches alone (as
/// [`cpu_only_on_gpu_summary`]'s): each as (cluster, job id, start second) with its partition's
/// busy share at its start, in the report's order.
pub fn cpu_only_busy_runs(
    q: &Query,
    occupancy: &[RecordBatch],
    busy_pct: f64,
) -> Result<Vec<(RunKey, f64)>> {
    // In the report's order only where a limit takes its first ones: the runs are a set.
    let (occ, refs) = cpu_only_refs(q, occupancy, occupancy, q.limit.is_some())?;
    // Each batch's columns once, not per row.
    let cols = occupancy
        .iter()
        .map(|b| {
            let v = View::new(b);
            Ok((v.t("partition")?, v.i("start_unix_ms")?, v.t("cluster")?))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut out = Vec::new();
    for r in refs.iter().take(q.limit.unwrap_or(usize::MAX)) {
        let (part, start, cluster) = &cols[r.batch];
        let start_ms = oi(start, r.row);
        if let Some(pct) = occ
            .busy_pct(part.get(r.row), start_ms)
            .filter(|p| *p >= busy_pct)
        {
            let cluster = cluster.get(r.row).map(str::to_string);
            let start_s = start_ms.map_or(-1, |ms| ms.div_euclid(1000));
            out.push(((cluster, r.job_id, start_s), pct));
        }
    }
    Ok(out)
}

/// The GPU partitions' occupancy: per partition, the cores allocated at each job start (sorted by
/// start) and the most seen allocated at once (its observed capacity).
struct Occupancy {
    gpu_parts: std::collections::HashSet<String>,
    at_start: HashMap<String, Vec<(i64, i64)>>,
    capacity: HashMap<String, i64>,
}

impl Occupancy {
    /// [`Occupancy::busy_pct`] of the job in row `row` of `v` (its partition and start).
    fn of_row(&self, v: &View, row: usize) -> Result<Option<f64>> {
        Ok(self.busy_pct(v.t("partition")?.get(row), oi(v.i("start_unix_ms")?, row)))
    }

    /// The share of its partition's capacity allocated when a job started there.
    fn busy_pct(&self, part: Option<&str>, start_ms: Option<i64>) -> Option<f64> {
        let (part, s) = (part?, start_ms?);
        let cap = *self.capacity.get(part).filter(|c| **c > 0)?;
        let starts = self.at_start.get(part)?;
        let k = starts.binary_search_by_key(&s, |x| x.0).ok()?;
        Some(100.0 * starts[k].1 as f64 / cap as f64)
    }

    fn of(q: &Query, occupancy: &[RecordBatch]) -> Result<Occupancy> {
        // Partition figures come from every job of the window the caller may see (the uid rule
        // only), not from the other filters: how busy a partition was does not depend on whose
        // jobs are listed.
        let mut scope = q.clone();
        scope.filters = super::query::Filters {
            uid: q.filters.uid,
            ..Default::default()
        };
        // (partition) → [(start, end, cores)]
        let mut parts: HashMap<String, Vec<(i64, i64, i64)>> = HashMap::new();
        let mut gpu_parts: std::collections::HashSet<String> = Default::default();
        for b in occupancy {
            let v = View::new(b);
            let (p, s, e, c, g) = (
                v.t("partition")?,
                v.i("start_unix_ms")?,
                v.i("end_unix_ms")?,
                v.i("alloc_cores")?,
                v.i("alloc_gpus")?,
            );
            for i in matching(&scope, b)? {
                let Some(part) = p.get(i) else { continue };
                if oi(g, i).is_some_and(|n| n > 0) && !gpu_parts.contains(part) {
                    gpu_parts.insert(part.to_string());
                }
                if let (Some(s), Some(e)) = (oi(s, i), oi(e, i)) {
                    let c = oi(c, i).unwrap_or(0);
                    match parts.get_mut(part) {
                        Some(list) => list.push((s, e, c)),
                        None => {
                            parts.insert(part.to_string(), vec![(s, e, c)]);
                        }
                    }
                }
            }
        }
        // Per partition: cores allocated at each job start; the largest is the observed capacity.
        let mut at_start: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
        let mut capacity: HashMap<String, i64> = HashMap::new();
        for (part, mut jobs) in parts {
            if !gpu_parts.contains(&part) {
                continue;
            }
            jobs.sort_unstable();
            let mut running: std::collections::BinaryHeap<std::cmp::Reverse<(i64, i64)>> =
                Default::default();
            let mut starts = Vec::new();
            let mut sum = 0i64;
            let mut cap = 0i64;
            let mut k = 0;
            while k < jobs.len() {
                let t = jobs[k].0;
                while let Some(std::cmp::Reverse((end, cores))) = running.peek().copied() {
                    if end <= t {
                        running.pop();
                        sum -= cores;
                    } else {
                        break;
                    }
                }
                while k < jobs.len() && jobs[k].0 == t {
                    let (_, e, c) = jobs[k];
                    if e > t {
                        running.push(std::cmp::Reverse((e, c)));
                        sum += c;
                    }
                    k += 1;
                }
                starts.push((t, sum));
                cap = cap.max(sum);
            }
            capacity.insert(part.clone(), cap);
            at_start.insert(part, starts);
        }
        Ok(Occupancy {
            gpu_parts,
            at_start,
            capacity,
        })
    }
}

/// The occupancy and the jobs the `cpu-on-gpu` report lists, `in_order`: in its order
/// (core-hours allocated, largest first; then end time and job id).
fn cpu_only_refs(
    q: &Query,
    occupancy: &[RecordBatch],
    listed: &[RecordBatch],
    in_order: bool,
) -> Result<(Occupancy, Vec<JobRef>)> {
    let occ = Occupancy::of(q, occupancy)?;
    let mut refs = job_refs(q, listed, |v, rows| {
        let (gpus, part) = (v.i("alloc_gpus")?, v.t("partition")?);
        rows.retain(|&i| {
            oi(gpus, i).is_none_or(|n| n <= 0)
                && part.get(i).is_some_and(|p| occ.gpu_parts.contains(p))
        });
        Ok(())
    })?;
    if !in_order {
        return Ok((occ, refs));
    }
    let alloc_cols = float_cols(listed, "core_hours_alloc");
    let alloc = |r: &JobRef| alloc_cols[r.batch].and_then(|a| of(a, r.row));
    refs.sort_by(|a, b| {
        desc_nulls_last(alloc(a), alloc(b)).then((a.end_ms, a.job_id).cmp(&(b.end_ms, b.job_id)))
    });
    Ok((occ, refs))
}

/// A `cpu-on-gpu` row: the job's columns, its partition's busy share at its start, and whether
/// that is at least `busy_pct`.
fn cpu_only_row(occ: &Occupancy, b: &RecordBatch, row: usize, busy_pct: f64) -> Result<Vec<Value>> {
    let v = View::new(b);
    let pct = occ.of_row(&v, row)?;
    let mut out = job_values(b, row)?;
    out.push(pct.map_or(Value::Null, Value::Float));
    out.push(Value::Bool(pct.is_some_and(|p| p >= busy_pct)));
    Ok(out)
}

/// Whole weeks of a job beyond this many are spread evenly over the hours of the week instead of
/// walked hour by hour: exact at a fixed offset; in a zone with daylight saving within the hour a
/// change moves, once per change. A year: no job runs that long, but a row may say so.
const HEATMAP_WALK_WEEKS: i64 = 53;

fn heatmap(q: &Query, batches: &[RecordBatch]) -> Result<Table> {
    let mut h = Heat::new(q);
    for b in batches {
        h.add(q, b)?;
    }
    Ok(h.finish(q))
}

/// The heat map's sums: core-hours allocated per weekday and hour of the query zone's wall clock,
/// each piece of a job as whole units ([`fixed`]), so that parts added on several cores and merged
/// give the answer of one, to the last bit.
pub struct Heat {
    cells: [[i128; 24]; 7],
    offsets: Offsets,
}

impl Heat {
    pub fn new(q: &Query) -> Heat {
        Heat {
            cells: [[0; 24]; 7],
            offsets: Offsets::new(q.zone),
        }
    }

    /// Adds the jobs of batch `b` that `q` selects.
    pub fn add(&mut self, q: &Query, b: &RecordBatch) -> Result<()> {
        const WEEK_MS: i64 = 7 * 24 * HOUR_MS;
        let v = View::new(b);
        let (s, e, c) = (
            v.i("start_unix_ms")?,
            v.i("end_unix_ms")?,
            v.i("alloc_cores")?,
        );
        for i in matching(q, b)? {
            let (Some(s), Some(e), Some(cores)) = (oi(s, i), oi(e, i), oi(c, i)) else {
                continue;
            };
            if e <= s {
                continue;
            }
            let cores = cores as f64;
            let mut t = s;
            let weeks = (e - s) / WEEK_MS - HEATMAP_WALK_WEEKS;
            if weeks > 0 {
                let x = fixed(weeks as f64 * cores);
                for row in self.cells.iter_mut() {
                    for c in row.iter_mut() {
                        *c += x;
                    }
                }
                t += weeks * WEEK_MS;
            }
            // Piece by piece, each inside one hour of the wall clock at its own offset.
            while t < e {
                let Some((local_ms, until)) = self.offsets.wall_ms(t) else {
                    break;
                };
                let next = until.min(e);
                let (hour, dow) = hour_and_weekday(local_ms);
                self.cells[dow - 1][hour] += fixed(cores * (next - t) as f64 / HOUR_MS as f64);
                t = next;
            }
        }
        Ok(())
    }

    pub fn merge(&mut self, o: &Heat) {
        for (row, orow) in self.cells.iter_mut().zip(&o.cells) {
            for (c, oc) in row.iter_mut().zip(orow) {
                *c += oc;
            }
        }
    }

    pub fn finish(&self, q: &Query) -> Table {
        let mut t = q.empty_table();
        for (d, row) in self.cells.iter().enumerate() {
            let mut r = vec![Value::Int(d as i64 + 1)];
            r.extend(row.iter().map(|&x| Value::Float(float(x))));
            t.rows.push(r);
        }
        t
    }
}

/// Answers `q` over batches of job rows (any column subset that includes [`needed_columns`]).
pub fn evaluate(q: &Query, batches: &[RecordBatch]) -> Result<Table> {
    match &q.report {
        Report::Usage | Report::TopWasters { .. } => usage(q, batches),
        Report::Jobs => jobs(q, batches),
        Report::GpuIdle => gpu_idle(q, batches),
        Report::CpuOnlyOnGpu { busy_pct } => cpu_only_on_gpu(q, batches, *busy_pct),
        Report::Heatmap => heatmap(q, batches),
    }
}

/// An engine over rows held in memory (tests, small archives). It runs the same [`evaluate`] as
/// the Parquet engine, so it is no reference for it: tests compare both with their own sums.
pub struct MemEngine {
    batch: RecordBatch,
}

impl MemEngine {
    pub fn new(rows: &[JobRow]) -> Result<MemEngine> {
        Ok(MemEngine {
            batch: job_batch(rows)?,
        })
    }
}

impl Engine for MemEngine {
    fn run(&self, q: &Query) -> Result<Table> {
        evaluate(q, std::slice::from_ref(&self.batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::StringArray;

    #[test]
    fn a_job_on_n_nodes_is_one_pair_per_node_of_a_nth_share() {
        let mut q = Query::new(Report::Usage);
        q.group_by = vec![GroupKey::Node];
        let mut u = Usage::new(&q).unwrap();
        let list = StringArray::from(vec![Some("n1,n2"), Some(""), None, Some("n2")]);
        let mut srcs = vec![KeySrc::Node(Text::Plain(&list))];
        let (pairs, shares) = u.pairs_of(&mut srcs, vec![0, 1, 2, 3]);
        // Groups in order of first sight: n1, n2, then the job without nodes (null).
        assert_eq!(pairs, [(0, 0), (0, 1), (1, 2), (2, 2), (3, 1)]);
        assert_eq!(shares, [0.5, 0.5, 1.0, 1.0, 1.0]);
        assert_eq!(u.texts[0], ["n1", "n2"]);
        assert_eq!(u.codes[2][0], NULL);
        u.count_jobs(&pairs);
        assert_eq!(u.jobs, [1, 2, 2]);
    }

    #[test]
    fn a_null_adds_nothing_and_leaves_its_group_without_a_value() {
        let mut u = Usage::new(&Query::new(Report::Usage)).unwrap();
        let (g0, g1) = (u.group(one_key(1)), u.group(one_key(2)));
        let a = Float64Array::from(vec![Some(2.0), None, Some(3.0)]);
        let pairs = [(0, g0), (1, g1), (2, g0)];
        u.count_jobs(&pairs);
        u.add_sums(&[&a], &pairs, None);
        assert_eq!((float(u.sums[0][0]), u.has(0, 0)), (5.0, true));
        assert_eq!((u.sums[1][0], u.has(1, 0)), (0, false));
        // With shares (grouping by node): each value times its pair's share.
        let full = Float64Array::from(vec![4.0, 8.0]);
        let pairs = [(0, g0), (1, g1)];
        u.count_jobs(&pairs);
        u.add_sums(&[&full], &pairs, Some(&[0.5, 0.25]));
        assert_eq!((float(u.sums[0][0]), float(u.sums[1][0])), (7.0, 2.0));
        assert!(u.has(1, 0));
    }

    /// The heat map's hour and weekday by arithmetic are chrono's (through [`wall_keys`]) at every
    /// hour of 1969-2040 and at odd milliseconds around midnight, before 1970 included.
    #[test]
    fn hour_and_weekday_are_chronos() {
        let check = |ms: i64| {
            let w = time::wall(ms.div_euclid(1000)).unwrap();
            let (h, d, _, _) = wall_keys(w);
            assert_eq!(
                hour_and_weekday(ms),
                (h as usize, d as usize),
                "at {ms} ms ({w})"
            );
        };
        let (from, to) = (-365 * 24, 70 * 365 * 24);
        for hour in from..to {
            check(hour * HOUR_MS + 1_234_567);
        }
        for day in [-1_000i64, -1, 0, 1, 20_000] {
            for ms in [-1, 0, 1, 999, 1000] {
                check(day * 24 * HOUR_MS + ms);
            }
        }
    }
}
