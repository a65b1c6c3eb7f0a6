//! Rollups: beside each job part of the index, the sums the usage reports need, per end month and
//! per the keys the cluster report groups and filters by (docs/audit.md, "Rollups"). A question
//! whose window and grouping they can answer reads them for the whole months of its window and the
//! job parts only for the days at its ends ([`crate::index::ParquetEngine::plan`]); any other reads
//! the job parts.
//!
//! Per month, not per day: on the benchmark's index (10 M jobs of 4 000 users over 3 years, users
//! drawn from a Zipf law) a day holds 9 000 jobs of 1 600 users, so rows per (day, user) would be a
//! sixth of the jobs; per (month, user, account, partition) they are 7 %. The keys are those of the
//! cluster report and the access rule (cluster, user, uid, account, partition, QOS, start month);
//! state, class and group would take the rollups to 16 % of the jobs (measured), so questions by
//! those read the job parts.
//!
//! Two levels of rows ([`ALL_KEYS`], [`PER_USER`]): per every key, and per user alone in row groups
//! of their own, which a question by user, cluster or month reads instead (a fifth of the rows).
//!
//! Exact: every sum, from the job parts or from the rollups, is a sum of integers, each figure
//! taken as a whole number of [`UNITS_PER_HOUR`]ths ([`fixed`]), so the order of the additions,
//! and whether a job was added to a rollup row first, cannot change a bit of an answer (a test
//! compares every report both ways over a generated index). Floats added in another order can.
//!
//! One rollup part per job part, with its number, written and committed with it: what makes the
//! job parts right (one row per run, whatever fails, audit/src/index/faults.rs) makes the rollups
//! right, and an update costs what its new jobs cost.

use crate::arrow::with_derived;
use crate::eval::USAGE_INPUTS;
use crate::metrics::EFF_BUCKETS;
use crate::query::{wall_keys, Zone};
use anyhow::{Context, Result};
use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::collections::HashMap;
use std::sync::Arc;

/// Text keys of a rollup row: the job row's columns of the same names.
pub const TEXT_KEYS: [&str; 5] = ["cluster", "user", "account", "partition", "qos"];

/// Units of a stored sum per hour (or per GB-hour, kWh, percent point): 2⁵⁰, a unit of 3.2 ps.
/// A power of two, so a figure times it is exact, and a figure of 8 hours or more (whose last bit
/// is worth 2⁻⁴⁹ or more) is a whole number of units as it is: its sums are the exact sums of the
/// figures, rounded once. A smaller figure is rounded to the unit, 10⁻¹⁵ of an hour: the sums
/// stay within 10⁻⁹ of the float sums of figures of a second or more (the tests' tolerance).
pub const UNITS_PER_HOUR: f64 = 1_125_899_906_842_624.0;
/// The largest figure taken whole: 10¹⁴ hours. Past it a figure is taken as this (no job runs
/// 10¹⁰ years; a row may say so). With it, 10⁹ figures add up inside an i128.
const MAX_FIGURE: f64 = 1e14;

/// A figure as a whole number of units: what every usage sum adds. The same figure always gives
/// the same number, so sums of these are exact in any order.
#[inline]
pub fn fixed(v: f64) -> i128 {
    let x = v * UNITS_PER_HOUR;
    // The common case without a call: `as i64` truncates (one instruction), and twice the part
    // truncated, truncated, is the step that rounds half away from zero. `f64::round` and a
    // conversion to i128 are library calls, and were half the time of a usage report.
    if x.abs() < 4.0e18 {
        let t = x as i64;
        return i128::from(t + ((x - t as f64) * 2.0) as i64);
    }
    // NaN (no archived figure is one) is taken as 0 rather than poisoning a sum.
    (v.clamp(-MAX_FIGURE, MAX_FIGURE) * UNITS_PER_HOUR).round() as i128
}

/// A sum of [`fixed`] figures as a float: one rounding, at the end.
pub fn float(x: i128) -> f64 {
    x as f64 / UNITS_PER_HOUR
}

/// The efficiency histograms' buckets: `≤ EFF_BUCKETS[0]`, …, `≤ 100`, then `> 100`.
pub const HIST_BUCKETS: usize = EFF_BUCKETS.len() + 1;

/// The bucket of an efficiency in percent (`None`: none measured, or not a number).
pub fn bucket_of(pct: Option<f64>) -> Option<usize> {
    let p = pct.filter(|p| p.is_finite())?;
    Some(
        EFF_BUCKETS
            .iter()
            .position(|b| p <= *b)
            .unwrap_or(EFF_BUCKETS.len()),
    )
}

/// The per-job efficiencies whose histograms a rollup keeps: (job column, rollup column prefix).
pub const HISTOGRAMS: [(&str, &str); 2] = [("cpu_eff_pct", "cpu_eff"), ("mem_eff_pct", "mem_eff")];

/// Σ used and Σ alloc of the weighted efficiencies, over the jobs that have both: the rollup
/// columns, in [`crate::eval`]'s order (CPU, memory, GPU).
pub const EFF_SUMS: [(&str, &str); 3] = [
    ("cpu_eff_core_hours_used", "cpu_eff_core_hours_alloc"),
    ("mem_eff_gb_hours_used", "mem_eff_gb_hours_alloc"),
    ("gpu_eff_gpu_hours_used", "gpu_eff_gpu_hours_alloc"),
];

/// The job columns a rollup is made of.
pub fn inputs() -> Vec<&'static str> {
    let mut c: Vec<&'static str> = TEXT_KEYS.to_vec();
    c.extend(["uid", "end_unix_ms", "start_unix_ms"]);
    c.extend(USAGE_INPUTS);
    c.extend(HISTOGRAMS.iter().map(|h| h.0));
    c
}

/// The name of the count of values of a usage sum (a sum over no value is null, never 0); null
/// in a row where every job has the value (most: it costs nothing stored).
pub fn values_column(input: &str) -> String {
    format!("{input}_values")
}

/// The two columns a sum is stored in, `(low, high)`: the sum in units is high × 2⁶² + low, with
/// 0 ≤ low < 2⁶² (plain 64-bit integers compress and decode far better than 128-bit decimals; the
/// high part is 0 in nearly every row).
pub fn sum_columns(name: &str) -> (String, String) {
    (format!("{name}_units"), format!("{name}_units_hi"))
}

const SPLIT: i128 = 1 << 62;

fn split(x: i128) -> (i64, i64) {
    (x.rem_euclid(SPLIT) as i64, x.div_euclid(SPLIT) as i64)
}

/// A sum from its two stored parts.
#[inline]
pub fn join(lo: i64, hi: i64) -> i128 {
    i128::from(hi) * SPLIT + i128::from(lo)
}

/// The name of a histogram bucket's job count.
pub fn bucket_column(prefix: &str, i: usize) -> String {
    match EFF_BUCKETS.get(i) {
        Some(b) => format!("{prefix}_jobs_le_{b}"),
        None => format!("{prefix}_jobs_gt_{}", EFF_BUCKETS[EFF_BUCKETS.len() - 1]),
    }
}

/// The rollup table's columns: the keys (`end_month`: the month of the job's end in UTC as
/// `year × 12 + month − 1`, what a window selects it by; `start_month`: its start's month on the
/// wall clock of the part's zone, what `--by month` groups by), `jobs`, each usage sum (in
/// 2⁻⁵⁰-hour units, [`sum_columns`]) with its count of values, the weighted efficiencies' sums (null
/// where they are the plain sums), the efficiency histograms.
pub fn schema() -> SchemaRef {
    let mut f = vec![
        Field::new("end_month", DataType::Int64, false),
        Field::new("level", DataType::Int64, false),
        Field::new("start_month", DataType::Int64, true),
        Field::new("uid", DataType::Int64, true),
    ];
    f.extend(
        TEXT_KEYS
            .iter()
            .map(|k| Field::new(*k, DataType::Utf8, true)),
    );
    f.push(Field::new("jobs", DataType::Int64, false));
    let sum = |f: &mut Vec<Field>, name: &str, nullable: bool| {
        let (lo, hi) = sum_columns(name);
        f.push(Field::new(lo, DataType::Int64, nullable));
        f.push(Field::new(hi, DataType::Int64, nullable));
    };
    for n in USAGE_INPUTS {
        sum(&mut f, n, false);
        f.push(Field::new(values_column(n), DataType::Int64, true));
    }
    for (u, a) in EFF_SUMS {
        sum(&mut f, u, true);
        sum(&mut f, a, true);
    }
    for (_, p) in HISTOGRAMS {
        for i in 0..HIST_BUCKETS {
            f.push(Field::new(bucket_column(p, i), DataType::Int64, false));
        }
        f.push(Field::new(
            format!("{p}_jobs_unknown"),
            DataType::Int64,
            false,
        ));
        sum(&mut f, &format!("{p}_pct"), false);
    }
    Arc::new(Schema::new(f))
}

/// A UTC month (`year × 12 + month − 1`) of an instant in milliseconds.
pub fn month_of_ms(unix_ms: i64) -> i64 {
    let (y, m, _) = jobscope_model::time::civil_from_days(unix_ms.div_euclid(86_400_000));
    y * 12 + i64::from(m) - 1
}

/// The first instant (Unix seconds, UTC) of a month (`year × 12 + month − 1`).
pub fn month_start_s(month: i64) -> Option<i64> {
    let y = i32::try_from(month.div_euclid(12)).ok()?;
    let d = chrono::NaiveDate::from_ymd_opt(y, month.rem_euclid(12) as u32 + 1, 1)?;
    Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp())
}

/// The rows of a rollup part: per every key ([`ALL_KEYS`]), then, in row groups of their own, per
/// user alone ([`PER_USER`]: cluster, user, uid and start month; account, partition and QOS
/// null). A question by user, cluster or month over a year reads a fifth of the rows from the
/// second (measured: 48 000 rows instead of 230 000 for 10 M jobs); they cost a fifth more space.
pub const ALL_KEYS: i64 = 0;
pub const PER_USER: i64 = 1;

/// The text keys a [`PER_USER`] row keeps (the others are null in it).
pub const PER_USER_KEYS: [&str; 2] = ["cluster", "user"];

/// One rollup row's sums while it is made.
#[derive(Clone, Default)]
struct Sums {
    jobs: i64,
    sums: [i128; USAGE_INPUTS.len()],
    values: [i64; USAGE_INPUTS.len()],
    eff: [(i128, i128); 3],
    hist: [[i64; HIST_BUCKETS]; 2],
    unknown: [i64; 2],
    pct_sum: [i128; 2],
}

impl Sums {
    fn add(&mut self, o: &Sums) {
        self.jobs += o.jobs;
        for c in 0..USAGE_INPUTS.len() {
            self.sums[c] += o.sums[c];
            self.values[c] += o.values[c];
        }
        for e in 0..3 {
            self.eff[e].0 += o.eff[e].0;
            self.eff[e].1 += o.eff[e].1;
        }
        for h in 0..2 {
            for k in 0..HIST_BUCKETS {
                self.hist[h][k] += o.hist[h][k];
            }
            self.unknown[h] += o.unknown[h];
            self.pct_sum[h] += o.pct_sum[h];
        }
    }
}

/// (used, alloc) positions in [`USAGE_INPUTS`] of the three weighted efficiencies.
pub const EFF_PAIRS: [(usize, usize); 3] = [(1, 0), (4, 3), (7, 6)];

/// The rollup of a batch of job rows as stored (or whole: the derived columns are computed from
/// the stored ones either way), start days on `zone`'s wall clock: one batch per level
/// ([`ALL_KEYS`], [`PER_USER`]), each with one row per distinct key, ordered by end month, then
/// the keys.
pub fn of_jobs(stored: &[RecordBatch], zone: Zone) -> Result<Vec<RecordBatch>> {
    let cols = inputs();
    let derived: Vec<RecordBatch> = stored
        .iter()
        .map(|b| with_derived(b, &cols))
        .collect::<Result<_>>()?;
    let mut groups: HashMap<Key, usize> = HashMap::new();
    let mut rows: Vec<(Key, Sums)> = Vec::new();
    let mut offsets = crate::eval::Offsets::new(zone);
    for b in &derived {
        let text: Vec<&StringArray> = TEXT_KEYS
            .iter()
            .map(|k| {
                b.column_by_name(k)
                    .and_then(|a| a.as_any().downcast_ref::<StringArray>())
                    .with_context(|| format!("rollup: job column {k}"))
            })
            .collect::<Result<_>>()?;
        let int = |n: &str| {
            b.column_by_name(n)
                .and_then(|a| a.as_any().downcast_ref::<Int64Array>())
                .with_context(|| format!("rollup: job column {n}"))
        };
        let flt = |n: &str| {
            b.column_by_name(n)
                .and_then(|a| a.as_any().downcast_ref::<Float64Array>())
                .with_context(|| format!("rollup: job column {n}"))
        };
        let (uid, end, start) = (int("uid")?, int("end_unix_ms")?, int("start_unix_ms")?);
        let figures: Vec<&Float64Array> =
            USAGE_INPUTS.iter().map(|n| flt(n)).collect::<Result<_>>()?;
        let effs: Vec<&Float64Array> =
            HISTOGRAMS.iter().map(|h| flt(h.0)).collect::<Result<_>>()?;
        let get = |a: &Float64Array, i: usize| (!a.is_null(i)).then(|| a.value(i));
        let geti = |a: &Int64Array, i: usize| (!a.is_null(i)).then(|| a.value(i));
        for i in 0..b.num_rows() {
            // A row without an end is in no window: the job parts' reports never count it either.
            let Some(end_ms) = geti(end, i) else { continue };
            let start_month = geti(start, i)
                .and_then(|ms| offsets.wall(ms))
                .map(|(w, _)| wall_keys(w).3);
            let mut t = [None; TEXT_KEYS.len()];
            for (k, a) in text.iter().enumerate() {
                t[k] = (!a.is_null(i)).then(|| a.value(i));
            }
            let key = (month_of_ms(end_ms), start_month, geti(uid, i), t);
            let g = *groups.entry(key).or_insert_with(|| {
                rows.push((key, Sums::default()));
                rows.len() - 1
            });
            let s = &mut rows[g].1;
            s.jobs += 1;
            for (c, a) in figures.iter().enumerate() {
                if let Some(v) = get(a, i) {
                    s.sums[c] += fixed(v);
                    s.values[c] += 1;
                }
            }
            for (e, (u, al)) in EFF_PAIRS.iter().enumerate() {
                if let (Some(u), Some(a)) = (get(figures[*u], i), get(figures[*al], i)) {
                    s.eff[e].0 += fixed(u);
                    s.eff[e].1 += fixed(a);
                }
            }
            for (h, a) in effs.iter().enumerate() {
                let v = get(a, i);
                match bucket_of(v) {
                    Some(k) => {
                        s.hist[h][k] += 1;
                        s.pct_sum[h] += fixed(v.unwrap_or_default());
                    }
                    None => s.unknown[h] += 1,
                }
            }
        }
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    // The per-user rows, from the rows per every key (sorted: a user's rows of a month and start
    // month are not all adjacent, so a map).
    let keep = |k: usize| PER_USER_KEYS.contains(&TEXT_KEYS[k]);
    let mut per_user: std::collections::BTreeMap<Key, Sums> = std::collections::BTreeMap::new();
    for (k, sums) in &rows {
        let mut t = k.3;
        for (i, v) in t.iter_mut().enumerate() {
            if !keep(i) {
                *v = None;
            }
        }
        per_user.entry((k.0, k.1, k.2, t)).or_default().add(sums);
    }
    let per_user: Vec<(Key, Sums)> = per_user.into_iter().collect();
    Ok(vec![
        rollup_batch(&rows, ALL_KEYS)?,
        rollup_batch(&per_user, PER_USER)?,
    ])
}

/// A rollup key: end month, start month, uid, the text keys.
type Key<'a> = (
    i64,
    Option<i64>,
    Option<i64>,
    [Option<&'a str>; TEXT_KEYS.len()],
);

/// The batch of rollup rows of one level ([`ALL_KEYS`], [`PER_USER`]).
fn rollup_batch(rows: &[(Key, Sums)], level: i64) -> Result<RecordBatch> {
    let schema = schema();
    let int_col = |f: &dyn Fn(&(Key, Sums)) -> i64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(rows.iter().map(f)))
    };
    let opt_col = |f: &dyn Fn(&(Key, Sums)) -> Option<i64>| -> ArrayRef {
        Arc::new(Int64Array::from_iter(rows.iter().map(f)))
    };
    // A sum's two columns; `None` rows are null in both.
    let sum_cols = |out: &mut Vec<ArrayRef>, f: &dyn Fn(&(Key, Sums)) -> Option<i128>| {
        out.push(opt_col(&|r| f(r).map(|x| split(x).0)));
        out.push(opt_col(&|r| f(r).map(|x| split(x).1)));
    };
    let mut out: Vec<ArrayRef> = vec![
        int_col(&|r| r.0 .0),
        int_col(&|_| level),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.0 .1))),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.0 .2))),
    ];
    for k in 0..TEXT_KEYS.len() {
        out.push(Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.0 .3[k]),
        )));
    }
    out.push(int_col(&|r| r.1.jobs));
    for c in 0..USAGE_INPUTS.len() {
        sum_cols(&mut out, &|r| Some(r.1.sums[c]));
        out.push(opt_col(&|r| {
            (r.1.values[c] != r.1.jobs).then_some(r.1.values[c])
        }));
    }
    for (e, (u, a)) in EFF_PAIRS.iter().enumerate() {
        // Null where the efficiency's sums are the plain sums (every job has both figures).
        let plain = |r: &(Key, Sums)| r.1.eff[e] == (r.1.sums[*u], r.1.sums[*a]);
        sum_cols(&mut out, &|r| (!plain(r)).then_some(r.1.eff[e].0));
        sum_cols(&mut out, &|r| (!plain(r)).then_some(r.1.eff[e].1));
    }
    for h in 0..HISTOGRAMS.len() {
        for k in 0..HIST_BUCKETS {
            out.push(int_col(&|r| r.1.hist[h][k]));
        }
        out.push(int_col(&|r| r.1.unknown[h]));
        sum_cols(&mut out, &|r| Some(r.1.pct_sum[h]));
    }
    Ok(RecordBatch::try_new(schema, out)?)
}

/// The zone a new rollup's start days are taken in: the local one when it has a name (a query in
/// the same zone groups by day from the rollups), else UTC.
pub fn writer_zone() -> (Zone, String) {
    match Zone::Local.name() {
        Some(n) => (Zone::Local, n),
        None => (Zone::Utc, "UTC".into()),
    }
}

/// The rows of a rollup batch of level `level` whose end month is in `months` (UTC, half-open).
pub fn rows_of(b: &RecordBatch, (months, level): ((i64, i64), i64)) -> Result<Vec<usize>> {
    let v = RollupView { b };
    let (end_month, lv) = (v.int("end_month")?.values(), v.int("level")?.values());
    Ok((0..b.num_rows())
        .filter(|&i| lv[i] == level && (months.0..months.1).contains(&end_month[i]))
        .collect())
}

/// Typed access to a rollup batch's columns.
pub struct RollupView<'a> {
    pub b: &'a RecordBatch,
}

impl<'a> RollupView<'a> {
    pub fn int(&self, n: &str) -> Result<&'a Int64Array> {
        self.opt_int(n)
            .with_context(|| format!("the rollup has no Int64 column {n}"))
    }
    /// A column a reader may have left out ([`may_leave_out`]).
    pub fn opt_int(&self, n: &str) -> Option<&'a Int64Array> {
        self.b
            .column_by_name(n)
            .and_then(|a| a.as_any().downcast_ref::<Int64Array>())
    }
    /// A stored sum's two columns ([`sum_columns`]); a row's sum is [`Sum::at`]. Either may be
    /// absent from the batch ([`may_leave_out`]).
    pub fn sum(&self, name: &str) -> Sum<'a> {
        let (lo, hi) = sum_columns(name);
        Sum {
            lo: self.opt_int(&lo),
            hi: self.opt_int(&hi),
        }
    }
}

/// Whether a reader may leave column `name` of a rollup row group undecoded, from what its
/// statistics say of it (`all_null`: null in every row; `all_zero`: 0 in every row): a sum or a
/// count of values that is null in every row (read absent as null), a sum's high part that is 0 or
/// null in every row (read absent as 0: a null high part goes with a null low part). Most row
/// groups need only a third of their columns so (every job had every figure; no sum reaches 2⁶²
/// units).
pub fn may_leave_out(name: &str, all_null: bool, all_zero: bool) -> bool {
    if name.ends_with("_units_hi") {
        all_null || all_zero
    } else {
        all_null && (name.ends_with("_units") || name.ends_with("_values"))
    }
}

/// A stored sum's columns in one batch (`None`: left out, [`may_leave_out`]).
pub struct Sum<'a> {
    lo: Option<&'a Int64Array>,
    hi: Option<&'a Int64Array>,
}

/// A sum's columns without a null.
pub struct Dense<'a> {
    lo: &'a [i64],
    hi: Option<&'a [i64]>,
}

impl Dense<'_> {
    pub fn at(&self, i: usize) -> i128 {
        join(self.lo[i], self.hi.map_or(0, |h| h[i]))
    }
}

impl<'a> Sum<'a> {
    /// The sum in row `i` (`None`: null, see [`schema`]).
    pub fn at(&self, i: usize) -> Option<i128> {
        let lo = self.lo.filter(|lo| !lo.is_null(i))?;
        let hi = self
            .hi
            .filter(|hi| !hi.is_null(i))
            .map_or(0, |hi| hi.value(i));
        Some(join(lo.value(i), hi))
    }

    /// The values, when no row is null.
    pub fn dense(&self) -> Option<Dense<'a>> {
        let lo = self.lo.filter(|lo| lo.null_count() == 0)?;
        match self.hi {
            Some(hi) if hi.null_count() > 0 => None,
            hi => Some(Dense {
                lo: lo.values().as_ref(),
                hi: hi.map(|h| h.values().as_ref()),
            }),
        }
    }

    /// Whether every row is null.
    pub fn all_null(&self) -> bool {
        self.lo.is_none_or(|lo| lo.null_count() == lo.len())
    }
}

/// The efficiency histogram of some jobs: per bucket ([`bucket_of`]) its jobs, the jobs without
/// a figure, and the Σ of the figures ([`fixed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Histogram {
    pub jobs: [u64; HIST_BUCKETS],
    pub unknown: u64,
    pub pct_sum: i128,
}

impl Histogram {
    pub fn add(&mut self, pct: Option<f64>) {
        match bucket_of(pct) {
            Some(k) => {
                self.jobs[k] += 1;
                self.pct_sum += fixed(pct.unwrap_or_default());
            }
            None => self.unknown += 1,
        }
    }

    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.jobs.iter_mut().zip(o.jobs) {
            *a += b;
        }
        self.unknown += o.unknown;
        self.pct_sum += o.pct_sum;
    }

    /// Takes away the histogram of some of these jobs (exact: counts and a sum of whole units);
    /// `false`, and nothing sure, when `o` holds jobs this one does not.
    pub fn subtract(&mut self, o: &Histogram) -> bool {
        let mut ok = true;
        for (a, b) in self.jobs.iter_mut().zip(o.jobs) {
            ok &= *a >= b;
            *a = a.wrapping_sub(b);
        }
        ok &= self.unknown >= o.unknown;
        self.unknown = self.unknown.wrapping_sub(o.unknown);
        self.pct_sum -= o.pct_sum;
        ok
    }

    /// Jobs with a figure.
    pub fn count(&self) -> u64 {
        self.jobs.iter().sum()
    }

    /// The buckets' names: `≤ 10 %`, `10–25 %`, …, `> 100 %`.
    pub fn labels() -> Vec<String> {
        let mut v = Vec::with_capacity(EFF_BUCKETS.len() + 1);
        let mut lo: Option<f64> = None;
        for b in EFF_BUCKETS {
            v.push(match lo {
                None => format!("≤ {b} %"),
                Some(l) => format!("{l}–{b} %"),
            });
            lo = Some(b);
        }
        v.push(format!("> {} %", EFF_BUCKETS[EFF_BUCKETS.len() - 1]));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user's per-user row holds what that user's rows per every key hold, each count and sum,
    /// a job without a CPU efficiency among them; its account, partition and QOS are null.
    #[test]
    fn the_per_user_rows_hold_what_the_rows_per_every_key_hold() {
        use crate::testing::{spec, summary};
        let specs = [
            spec(1, "ann", 1001, "cpu", 0),
            spec(2, "ann", 1001, "gpu", 0),
            spec(3, "bob", 1002, "cpu", 1),
            spec(4, "ann", 1001, "bigmem", 2),
            spec(5, "bob", 1002, "gpu", 1),
            spec(6, "ann", 1001, "cpu", 40),
        ];
        let rows: Vec<crate::row::JobRow> = specs
            .iter()
            .map(|sp| {
                let mut s = summary(sp);
                if sp.id == 5 {
                    s.cpu.usage_s = None;
                    s.efficiency.cpu_pct = None;
                }
                crate::row::JobRow::of(&s)
            })
            .collect();
        let b = crate::arrow::stored_job_batch(&crate::arrow::job_batch(&rows).unwrap()).unwrap();
        let out = of_jobs(&[b], Zone::Utc).unwrap();
        assert_eq!(out.len(), 2);
        let int = |b: &RecordBatch, n: &str| RollupView { b }.int(n).unwrap().clone();
        assert!(int(&out[0], "level")
            .values()
            .iter()
            .all(|l| *l == ALL_KEYS));
        assert!(int(&out[1], "level")
            .values()
            .iter()
            .all(|l| *l == PER_USER));
        // (end month, start month, uid, user) → per column: the Σ of its counts and sums.
        type Totals = std::collections::BTreeMap<(i64, i64, i64, String), Vec<i128>>;
        let totals = |b: &RecordBatch| -> Totals {
            let v = RollupView { b };
            let user = b.column_by_name("user").unwrap();
            let user = user.as_any().downcast_ref::<StringArray>().unwrap();
            let mut cols: Vec<Box<dyn Fn(usize) -> i128>> = Vec::new();
            let jobs = int(b, "jobs");
            cols.push(Box::new(move |i| i128::from(jobs.value(i))));
            for n in USAGE_INPUTS {
                let s = v.sum(n);
                let (lo, hi) = (s.lo.cloned(), s.hi.cloned());
                cols.push(Box::new(move |i| {
                    Sum {
                        lo: lo.as_ref(),
                        hi: hi.as_ref(),
                    }
                    .at(i)
                    .unwrap()
                }));
                let (vals, jobs) = (int(b, &values_column(n)), int(b, "jobs"));
                cols.push(Box::new(move |i| {
                    i128::from(if vals.is_null(i) {
                        jobs.value(i)
                    } else {
                        vals.value(i)
                    })
                }));
            }
            for (_, p) in HISTOGRAMS {
                let mut names: Vec<String> =
                    (0..HIST_BUCKETS).map(|k| bucket_column(p, k)).collect();
                names.push(format!("{p}_jobs_unknown"));
                for n in names {
                    let a = int(b, &n);
                    cols.push(Box::new(move |i| i128::from(a.value(i))));
                }
                let (lo, hi) = sum_columns(&format!("{p}_pct"));
                let (lo, hi) = (int(b, &lo), int(b, &hi));
                cols.push(Box::new(move |i| join(lo.value(i), hi.value(i))));
            }
            let (em, sm, uid) = (int(b, "end_month"), int(b, "start_month"), int(b, "uid"));
            let mut t = Totals::new();
            for i in 0..b.num_rows() {
                let k = (
                    em.value(i),
                    sm.value(i),
                    uid.value(i),
                    user.value(i).to_string(),
                );
                let e = t.entry(k).or_insert_with(|| vec![0; cols.len()]);
                for (c, f) in cols.iter().enumerate() {
                    e[c] += f(i);
                }
            }
            t
        };
        let (all, per_user) = (totals(&out[0]), totals(&out[1]));
        assert_eq!(all, per_user);
        assert_eq!(per_user.len(), 3, "{per_user:?}");
        assert!(out[0].num_rows() > out[1].num_rows());
        // Bob's job without its CPU time is an unknown CPU efficiency in his per-user row.
        assert_eq!(
            int(&out[1], "cpu_eff_jobs_unknown")
                .values()
                .iter()
                .sum::<i64>(),
            1
        );
        for k in ["account", "partition", "qos"] {
            assert_eq!(
                out[1].column_by_name(k).unwrap().null_count(),
                out[1].num_rows()
            );
        }
    }

    #[test]
    fn fixed_sums_do_not_depend_on_the_order() {
        let v = [0.1, 1e-13, 12_345.678_9, 3.0e9, 0.2, 7.25e-7];
        let a: i128 = v.iter().map(|&x| fixed(x)).sum();
        let b: i128 = v.iter().rev().map(|&x| fixed(x)).sum();
        assert_eq!(a, b);
        // Floats do not give that (the reason for all this).
        assert_ne!((0.1 + 0.2) + 0.3, (0.3 + 0.2) + 0.1);
        let (x, y) = (
            fixed(0.1) + fixed(0.2) + fixed(0.3),
            fixed(0.3) + fixed(0.2) + fixed(0.1),
        );
        assert_eq!(float(x).to_bits(), float(y).to_bits());
        assert_eq!(fixed(1.5), 3 << 49);
        assert_eq!(float(fixed(0.25)), 0.25);
        assert_eq!(fixed(1e300), fixed(1e14));
        assert_eq!(fixed(f64::NAN), 0);
        // Half a unit away from zero, as f64::round.
        for units in [2.5, -2.5, 0.7, -0.7, 1.4999] {
            let v = units / UNITS_PER_HOUR;
            assert_eq!(fixed(v), (v * UNITS_PER_HOUR).round() as i128, "{v}");
        }
        for v in [
            123.456_789_012_345_6,
            3.29e-4,
            -3.0e6,
            4.1e6,
            4095.9,
            4096.1,
        ] {
            assert_eq!(fixed(v), (v * UNITS_PER_HOUR).round() as i128, "{v}");
        }
        // A figure of 8 hours or more is whole units as it is: nothing is lost.
        for v in [8.0, 12_345.678_9, 1.0e7 / 3.0] {
            assert_eq!(float(fixed(v)), v);
        }
    }

    #[test]
    fn buckets_follow_the_upper_bounds() {
        assert_eq!(bucket_of(Some(0.0)), Some(0));
        assert_eq!(bucket_of(Some(10.0)), Some(0));
        assert_eq!(bucket_of(Some(10.01)), Some(1));
        assert_eq!(bucket_of(Some(100.0)), Some(5));
        assert_eq!(bucket_of(Some(180.0)), Some(6));
        assert_eq!(bucket_of(None), None);
        assert_eq!(bucket_of(Some(f64::INFINITY)), None);
        assert_eq!(bucket_column("cpu_eff", 0), "cpu_eff_jobs_le_10");
        assert_eq!(bucket_column("cpu_eff", 6), "cpu_eff_jobs_gt_100");
    }

    #[test]
    fn a_sum_is_its_two_columns() {
        for x in [
            0,
            1,
            (1 << 62) - 1,
            1 << 62,
            -1,
            7 << 70,
            -(5 << 66) + 3,
            i128::from(i64::MAX) * 9,
        ] {
            let (lo, hi) = split(x);
            assert!((0..1 << 62).contains(&lo), "{x}");
            assert_eq!(join(lo, hi), x);
        }
    }

    #[test]
    fn months_and_their_first_instants() {
        // 2024-02-29 13:05:00 UTC; 1969-12-31 23:59:59 UTC.
        assert_eq!(month_of_ms(1_709_211_900_000), 2024 * 12 + 1);
        assert_eq!(month_of_ms(-1000), 1969 * 12 + 11);
        assert_eq!(month_start_s(2024 * 12 + 1), Some(1_706_745_600));
        assert_eq!(month_start_s(1970 * 12), Some(0));
    }
}
