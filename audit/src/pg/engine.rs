//! The audit's reports as SQL over `jobscope.jobs` (audit/src/pg/schema.rs): the same
//! [`Query`] → [`Table`] contract as the Parquet engine, with the rules written down in
//! audit/src/query.rs and followed by the reference evaluation (audit/src/eval.rs):
//! sums over non-null values, weighted efficiencies over rows with both figures, text ordered by
//! bytes (`COLLATE "C"`), nulls first among keys, a job's figures shared equally among its nodes.
//! Row-level security applies as it does to any query: a role mapped to a uid gets that uid's rows.

use super::schema::ident;
use crate::query::{Engine, GroupKey, Query, Report, Result, WasteMetric, Zone, JOB_COLUMNS};
use crate::table::{ColType, Table, Value};
use postgres::types::ToSql;
use postgres::Client;
use std::sync::Mutex;

pub struct PgEngine {
    client: Mutex<Client>,
}

impl PgEngine {
    pub fn new(client: Client) -> PgEngine {
        PgEngine {
            client: Mutex::new(client),
        }
    }
}

/// SQL text and its parameters, built together so placeholders always match.
struct Sql {
    params: Vec<Box<dyn ToSql + Sync>>,
}

impl Sql {
    fn p<T: ToSql + Sync + 'static>(&mut self, v: T) -> String {
        self.params.push(Box::new(v));
        format!("${}", self.params.len())
    }
}

/// The WHERE conditions of the window and (unless `uid_only`) every filter. `spans` are the
/// database's `max_span_s`/`max_lead_s`: with them the END-time window also bounds the start
/// second (the partition key), so PostgreSQL reads only the months that can hold matching jobs.
fn conditions(q: &Query, s: &mut Sql, spans: Option<(i64, i64)>, uid_only: bool) -> String {
    let mut c = vec!["TRUE".to_string()];
    // Saturating: a window or a span (the database's) at the ends of i64 bounds nothing, and
    // must not overflow (issue 29 §4).
    if let Some(since) = q.window.since_unix_s {
        c.push(format!(
            "end_unix_ms >= {}",
            s.p(since.saturating_mul(1000))
        ));
        if let Some((span, _)) = spans {
            c.push(format!(
                "key_start_s >= {}",
                s.p(since.saturating_sub(span))
            ));
        }
    }
    if let Some(until) = q.window.until_unix_s {
        c.push(format!("end_unix_ms < {}", s.p(until.saturating_mul(1000))));
        if let Some((_, lead)) = spans {
            c.push(format!(
                "key_start_s <= {}",
                s.p(until.saturating_add(lead))
            ));
        }
    }
    let f = &q.filters;
    if let Some(uid) = f.uid {
        c.push(format!("uid = {}", s.p(i64::from(uid))));
    }
    if uid_only {
        return c.join(" AND ");
    }
    for (list, col) in f.text_columns() {
        if !list.is_empty() {
            c.push(format!("{} = ANY({})", ident(col), s.p(list.to_vec())));
        }
    }
    if !f.nodes.is_empty() {
        c.push(format!(
            "string_to_array(node_list, ',') && {}::text[]",
            s.p(f.nodes.clone())
        ));
    }
    if let Some(min) = f.min_elapsed_s {
        c.push(format!("elapsed_s >= {}", s.p(min)));
    }
    match f.gpu {
        Some(true) => c.push("alloc_gpus > 0".into()),
        Some(false) => c.push("NOT coalesce(alloc_gpus > 0, false)".into()),
        None => {}
    }
    c.join(" AND ")
}

/// The query's zone as `AT TIME ZONE` takes it: a zone name (PostgreSQL's own tz database gives
/// each instant its offset), or a fixed offset as an interval (east positive; a text offset would
/// be read with POSIX's inverted sign).
fn zone_sql(q: &Query, s: &mut Sql) -> Result<String> {
    Ok(match q.zone {
        Zone::Fixed(o) => format!("make_interval(secs => {})", s.p(f64::from(o))),
        z => {
            let name = z.name().ok_or_else(|| {
                anyhow::anyhow!(
                    "the local time zone has no name to give PostgreSQL: set TZ (e.g. \
                     TZ=Europe/Oslo) or use --utc"
                )
            })?;
            format!("{}::text", s.p(name))
        }
    })
}

/// The wall-clock time (`timestamp`) in zone `zone` of the instant `ms_expr` (Unix ms).
fn wall_sql(ms_expr: &str, zone: &str) -> String {
    format!("(to_timestamp({ms_expr}::float8 / 1000.0::float8) AT TIME ZONE {zone})")
}

/// The expression of a group key over the row source `w` (and `x.node` for nodes).
fn key_expr(k: GroupKey, zone: &str) -> String {
    let wall = wall_sql("w.start_unix_ms", zone);
    match k {
        GroupKey::Node => "x.node COLLATE \"C\"".into(),
        GroupKey::HourOfDay => format!("extract(hour FROM {wall})::bigint"),
        GroupKey::DayOfWeek => format!("extract(isodow FROM {wall})::bigint"),
        GroupKey::Day => format!("to_char({wall}, 'YYYY-MM-DD')"),
        GroupKey::Month => format!("to_char({wall}, 'YYYY-MM')"),
        other => format!("w.{} COLLATE \"C\"", ident(other.column())),
    }
}

fn usage_sql(q: &Query, s: &mut Sql, spans: Option<(i64, i64)>) -> Result<String> {
    let keys = q.keys();
    let timed = keys.iter().any(|k| {
        matches!(
            k,
            GroupKey::HourOfDay | GroupKey::DayOfWeek | GroupKey::Day | GroupKey::Month
        )
    });
    // Every placeholder must appear in the text (PostgreSQL counts them from it).
    let zone = if timed {
        zone_sql(q, s)?
    } else {
        String::new()
    };
    let cond = conditions(q, s, spans, false);
    let by_node = keys.contains(&GroupKey::Node);
    let from = if by_node {
        // A job counts once on each node of its list, its additive figures shared equally; a job
        // without nodes is one row with a null node.
        "jobscope.jobs w CROSS JOIN LATERAL (
            SELECT nd.node, 1.0::float8 / greatest(cardinality(a.arr), 1) AS share
            FROM (SELECT array_remove(string_to_array(w.node_list, ','), '') AS arr) a,
                 LATERAL unnest(CASE WHEN cardinality(a.arr) = 0 THEN ARRAY[NULL]::text[]
                                     ELSE a.arr END) AS nd(node)) x"
    } else {
        "jobscope.jobs w CROSS JOIN LATERAL (SELECT 1.0::float8 AS share) x"
    };
    let sum = |c: &str| format!("sum(x.share * w.{c})");
    let eff = |used: &str, alloc: &str| {
        format!(
            "100.0::float8 * sum(CASE WHEN w.{used} IS NOT NULL AND w.{alloc} IS NOT NULL THEN x.share * w.{used} END)
             / NULLIF(sum(CASE WHEN w.{used} IS NOT NULL AND w.{alloc} IS NOT NULL THEN x.share * w.{alloc} END), 0)"
        )
    };
    let mut sel: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| format!("{} AS k{i}", key_expr(*k, &zone)))
        .collect();
    sel.push("count(*)::bigint".into());
    sel.extend([
        sum("core_hours_alloc"),
        sum("core_hours_used"),
        sum("core_hours_wasted"),
        eff("core_hours_used", "core_hours_alloc"),
        sum("mem_gb_hours_alloc"),
        sum("mem_gb_hours_used"),
        sum("mem_gb_hours_wasted"),
        eff("mem_gb_hours_used", "mem_gb_hours_alloc"),
        sum("gpu_hours_alloc"),
        sum("gpu_hours_used"),
        sum("gpu_hours_wasted"),
        eff("gpu_hours_used", "gpu_hours_alloc"),
        sum("gpu_energy_kwh"),
        sum("cpu_wait_hours"),
    ]);
    let knames: Vec<String> = (0..keys.len()).map(|i| format!("k{i}")).collect();
    let group = if keys.is_empty() {
        String::new()
    } else {
        format!("GROUP BY {}", knames.join(", "))
    };
    let key_order: Vec<String> = knames
        .iter()
        .map(|k| format!("{k} ASC NULLS FIRST"))
        .collect();
    let order = match q.report {
        Report::TopWasters { metric, n } => {
            let col = match metric {
                WasteMetric::CoreHours => "core_hours_wasted",
                WasteMetric::MemGbHours => "mem_gb_hours_wasted",
                WasteMetric::GpuHours => "gpu_hours_wasted",
            };
            let mut o = vec![format!("{} DESC NULLS LAST", sum(col))];
            o.extend(key_order);
            format!("ORDER BY {} LIMIT {}", o.join(", "), s.p(n as i64))
        }
        _ if keys.is_empty() => String::new(),
        _ => format!("ORDER BY {}", key_order.join(", ")),
    };
    Ok(format!(
        "SELECT {} FROM {from} WHERE {cond} {group} {order}",
        sel.join(", ")
    ))
}

/// The job columns over row source `w`.
fn job_select() -> String {
    JOB_COLUMNS
        .iter()
        .map(|(n, _, _)| match *n {
            "start_unix_s" => "w.start_unix_ms / 1000".to_string(),
            "end_unix_s" => "w.end_unix_ms / 1000".to_string(),
            other => format!("w.{}", ident(other)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn limit(q: &Query, s: &mut Sql) -> String {
    match q.limit {
        Some(n) => format!("LIMIT {}", s.p(n as i64)),
        None => String::new(),
    }
}

fn jobs_sql(q: &Query, s: &mut Sql, spans: Option<(i64, i64)>) -> String {
    let cond = conditions(q, s, spans, false);
    let lim = limit(q, s);
    format!(
        "SELECT {} FROM jobscope.jobs w WHERE {cond} ORDER BY w.end_unix_ms, w.job_id {lim}",
        job_select()
    )
}

fn gpu_idle_sql(q: &Query, s: &mut Sql, spans: Option<(i64, i64)>) -> String {
    let cond = conditions(q, s, spans, false);
    let lim = limit(q, s);
    format!(
        "SELECT {}, w.gpus_idle, w.gpus_never_used, w.gpu_util_mean_pct
         FROM jobscope.jobs w
         WHERE {cond} AND (w.gpus_idle > 0 OR w.gpus_never_used > 0)
         ORDER BY w.gpu_hours_wasted DESC NULLS LAST, w.end_unix_ms, w.job_id {lim}",
        job_select()
    )
}

/// CPU-only jobs in partitions that had GPU jobs, with how busy the partition was when each
/// started: the cores allocated then (Σ over jobs with start <= t < end, from +cores/-cores
/// events summed up to t) against the largest such figure at any job start (the capacity seen).
/// The partition figures use the window and the uid rule only, like the reference.
fn cpu_only_sql(q: &Query, s: &mut Sql, spans: Option<(i64, i64)>, busy_pct: f64) -> String {
    let scope = conditions(q, s, spans, true);
    let cond = conditions(q, s, spans, false);
    let busy = s.p(busy_pct);
    let lim = limit(q, s);
    format!(
        "WITH scope AS (
            SELECT \"partition\" AS p, start_unix_ms AS st, end_unix_ms AS en,
                   coalesce(alloc_cores, 0) AS c, alloc_gpus AS g
            FROM jobscope.jobs WHERE {scope} AND \"partition\" IS NOT NULL),
         gp AS (SELECT DISTINCT p FROM scope WHERE g > 0),
         ev AS (
            SELECT p, st AS t, CASE WHEN en > st THEN c ELSE 0 END AS d, true AS is_start
              FROM scope WHERE p IN (SELECT p FROM gp)
            UNION ALL
            SELECT p, en AS t, -c AS d, false FROM scope WHERE p IN (SELECT p FROM gp) AND en > st),
         run AS (
            SELECT p, t, is_start,
                   (sum(d) OVER (PARTITION BY p ORDER BY t RANGE UNBOUNDED PRECEDING))::bigint AS n
            FROM ev),
         at_start AS (SELECT DISTINCT p, t, n FROM run WHERE is_start),
         cap AS (SELECT p, max(n) AS cap FROM at_start GROUP BY p),
         listed AS (
            SELECT {jobs}, w.end_unix_ms AS sort_end, w.job_id AS sort_id,
                   w.core_hours_alloc AS sort_alloc,
                   CASE WHEN cap.cap > 0 THEN 100.0::float8 * a.n::float8 / cap.cap::float8 END AS pct
            FROM jobscope.jobs w
            JOIN gp ON gp.p = w.\"partition\"
            LEFT JOIN at_start a ON a.p = w.\"partition\" AND a.t = w.start_unix_ms
            LEFT JOIN cap ON cap.p = w.\"partition\"
            WHERE {cond} AND NOT coalesce(w.alloc_gpus > 0, false))
         SELECT {outer}, pct, coalesce(pct >= {busy}, false)
         FROM listed
         ORDER BY sort_alloc DESC NULLS LAST, sort_end, sort_id {lim}",
        jobs = JOB_COLUMNS
            .iter()
            .zip(job_select().split(", "))
            .map(|((n, _, _), e)| format!("{e} AS {}", ident(&format!("c_{n}"))))
            .collect::<Vec<_>>()
            .join(", "),
        outer = JOB_COLUMNS
            .iter()
            .map(|(n, _, _)| ident(&format!("c_{n}")))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// Each job's cores × its time in each hour of the wall clock: its UTC hours (`h`), each cut
/// where the wall clock starts a new hour inside it (a zone offset by part of an hour), each piece
/// put in the weekday and hour of the wall clock at its own start (so at its own offset).
fn heatmap_sql(q: &Query, s: &mut Sql, spans: Option<(i64, i64)>) -> Result<String> {
    let zone = zone_sql(q, s)?;
    let cond = conditions(q, s, spans, false);
    let wall = |ms: &str| wall_sql(ms, &zone);
    Ok(format!(
        "WITH j AS (
            SELECT alloc_cores::float8 AS cores, start_unix_ms AS s, end_unix_ms AS e
            FROM jobscope.jobs w
            WHERE {cond} AND alloc_cores IS NOT NULL AND end_unix_ms > start_unix_ms),
         hr AS (
            SELECT j.cores, greatest(h * 3600000, j.s) AS a, least((h + 1) * 3600000, j.e) AS b
            FROM j, LATERAL generate_series(floor(j.s / 3600000.0)::bigint,
                                             floor((j.e - 1) / 3600000.0)::bigint) AS h),
         cut AS (
            SELECT cores, a, b, least(b, a + (extract(epoch FROM date_trunc('hour', {wall_a})
                   + interval '1 hour' - {wall_a}) * 1000)::bigint) AS c
            FROM hr),
         piece AS (
            SELECT cores, a AS p, c - a AS ms FROM cut
            UNION ALL
            SELECT cores, c, b - c FROM cut WHERE c < b)
         SELECT extract(isodow FROM {wall_p})::bigint, extract(hour FROM {wall_p})::bigint,
                sum(cores * ms::float8 / 3600000.0::float8)
         FROM piece
         GROUP BY 1, 2",
        wall_a = wall("a"),
        wall_p = wall("p"),
    ))
}

fn cell(row: &postgres::Row, i: usize, kind: ColType) -> Result<Value> {
    Ok(match kind {
        ColType::Int => row
            .try_get::<_, Option<i64>>(i)?
            .map_or(Value::Null, Value::Int),
        ColType::Float => row
            .try_get::<_, Option<f64>>(i)?
            .map_or(Value::Null, Value::Float),
        ColType::Text => row
            .try_get::<_, Option<String>>(i)?
            .map_or(Value::Null, Value::Text),
        ColType::Bool => row
            .try_get::<_, Option<bool>>(i)?
            .map_or(Value::Null, Value::Bool),
    })
}

impl PgEngine {
    fn spans(client: &mut Client) -> Result<Option<(i64, i64)>> {
        let rows = client.query(
            "SELECT k, v FROM jobscope.meta WHERE k IN ('max_span_s', 'max_lead_s')",
            &[],
        )?;
        let get = |name: &str| {
            rows.iter()
                .find(|r| r.get::<_, String>(0) == name)
                .map(|r| r.get::<_, i64>(1))
        };
        Ok(get("max_span_s").zip(get("max_lead_s")))
    }
}

impl Engine for PgEngine {
    fn run(&self, q: &Query) -> Result<Table> {
        let mut client = self
            .client
            .lock()
            .map_err(|_| anyhow::anyhow!("PostgreSQL connection poisoned"))?;
        let spans = Self::spans(&mut client)?;
        let mut s = Sql { params: Vec::new() };
        let sql = match &q.report {
            Report::Usage | Report::TopWasters { .. } => usage_sql(q, &mut s, spans)?,
            Report::Jobs => jobs_sql(q, &mut s, spans),
            Report::GpuIdle => gpu_idle_sql(q, &mut s, spans),
            Report::CpuOnlyOnGpu { busy_pct } => cpu_only_sql(q, &mut s, spans, *busy_pct),
            Report::Heatmap => heatmap_sql(q, &mut s, spans)?,
        };
        let refs: Vec<&(dyn ToSql + Sync)> = s.params.iter().map(|b| b.as_ref()).collect();
        let rows = client.query(&sql, &refs)?;
        let mut t = q.empty_table();
        if q.report == Report::Heatmap {
            let mut cells = [[0.0f64; 24]; 7];
            for r in &rows {
                let (d, h, v): (i64, i64, Option<f64>) = (r.get(0), r.get(1), r.get(2));
                cells[(d - 1) as usize][h as usize] += v.unwrap_or(0.0);
            }
            for (d, row) in cells.iter().enumerate() {
                let mut r = vec![Value::Int(d as i64 + 1)];
                r.extend(row.iter().map(|&x| Value::Float(x)));
                t.rows.push(r);
            }
            return Ok(t);
        }
        let kinds: Vec<ColType> = t.columns.iter().map(|c| c.kind).collect();
        for r in &rows {
            t.rows.push(
                kinds
                    .iter()
                    .enumerate()
                    .map(|(i, k)| cell(r, i, *k))
                    .collect::<Result<_>>()?,
            );
        }
        Ok(t)
    }
}
