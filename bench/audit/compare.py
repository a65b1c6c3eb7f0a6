"""The same audit question answered by DuckDB and by Polars over jobscope's Parquet index, and by the
slurm-usage tool's own `analyze` over its own layout of the same jobs (bench/audit/run.sh runs this).

    compare.py layout INDEX_DIR SLURM_USAGE_DATA_DIR     write slurm-usage's layout of the index's jobs
    compare.py query INDEX_DIR END_YYYY-MM-DD REPEAT     time DuckDB and Polars: usage by user, year and 30 days
    compare.py rollups INDEX_DIR END_YYYY-MM-DD REPEAT AUDIT_GEN
                                                         time DuckDB given what jobscope reads (its plan from
                                                         `AUDIT_GEN plan`): a year and 30 days

The question is jobscope's usage report grouped by user (audit/src/query.rs): jobs, sums of
core-/GB-/GPU-hours allocated, used and wasted, weighted efficiencies, energy; window on END time.
"""
import glob
import os
import statistics
import sys
import time
from datetime import datetime, timezone


def parts(index):
    return sorted(glob.glob(os.path.join(index, "jobs", "*", "*.parquet")))


def parts_in_window(index, since_ms, until_ms):
    """The job parts whose end-time range (index/state.json: each part's min_end_ms and
    max_end_ms, what jobscope's engine prunes by) meets [since, until): the same files jobscope
    opens, so the peers get the same advantage (issue 19 §5). An admin without the state file gets
    about the same from the month directories: jobs/YYYY-MM/*.parquet for the window's months."""
    import json

    with open(os.path.join(index, "state.json")) as f:
        state = json.load(f)
    out = []
    for p in state["jobs"]:
        lo, hi = p.get("min_end_ms"), p.get("max_end_ms")
        if lo is None or hi is None or (hi >= since_ms and lo < until_ms):
            out.append(os.path.join(index, p["file"]))
    return sorted(out)


def derived():
    """The columns jobscope's index files leave out because they are exact functions of stored ones
    (audit/src/arrow.rs `DERIVED`), as Polars expressions: what an admin's own query adds."""
    import polars as pl

    h = pl.col("elapsed_s") / 3600.0
    core_alloc = pl.col("alloc_cores") * h
    core_used = pl.col("cpu_usage_s") / 3600.0
    mem_alloc = pl.col("alloc_mem_per_node_bytes") / 1073741824.0 * pl.col("node_count").clip(lower_bound=1) * h
    return [
        core_alloc.alias("core_hours_alloc"),
        core_used.alias("core_hours_used"),
        (core_alloc - core_used).clip(lower_bound=0).alias("core_hours_wasted"),
        mem_alloc.alias("mem_gb_hours_alloc"),
        (mem_alloc - pl.col("mem_gb_hours_used")).clip(lower_bound=0).alias("mem_gb_hours_wasted"),
        (pl.col("gpu_hours_alloc") - pl.col("gpu_hours_wasted")).clip(lower_bound=0).alias("gpu_hours_used"),
    ]


# The same in SQL (CASE, not greatest(): greatest() skips a NULL where the figure must stay NULL).
DERIVED_SQL = """
  alloc_cores * (elapsed_s / 3600.0) AS core_hours_alloc,
  cpu_usage_s / 3600.0 AS core_hours_used,
  CASE WHEN alloc_cores * (elapsed_s / 3600.0) - cpu_usage_s / 3600.0 < 0 THEN 0
       ELSE alloc_cores * (elapsed_s / 3600.0) - cpu_usage_s / 3600.0 END AS core_hours_wasted,
  alloc_mem_per_node_bytes / 1073741824.0 * greatest(node_count, 1) * (elapsed_s / 3600.0) AS mem_gb_hours_alloc,
  CASE WHEN alloc_mem_per_node_bytes / 1073741824.0 * greatest(node_count, 1) * (elapsed_s / 3600.0) - mem_gb_hours_used < 0 THEN 0
       ELSE alloc_mem_per_node_bytes / 1073741824.0 * greatest(node_count, 1) * (elapsed_s / 3600.0) - mem_gb_hours_used END AS mem_gb_hours_wasted,
  CASE WHEN gpu_hours_alloc - gpu_hours_wasted < 0 THEN 0 ELSE gpu_hours_alloc - gpu_hours_wasted END AS gpu_hours_used
"""


def layout(index, data):
    """slurm-usage keeps one Parquet file per day under data/processed/YYYY-MM-DD.parquet with its
    ProcessedJob columns and types (slurm_usage.py `ProcessedJob.get_polars_schema`: times are
    Datetime(us, UTC)); the jobs are put under the day they ended."""
    import polars as pl

    out = os.path.join(data, "processed")
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    lf = pl.scan_parquet(parts(index)).with_columns(derived()).select(
        pl.col("job_id").cast(pl.Utf8),
        pl.col("user").fill_null(""),
        pl.col("name").fill_null("").str.slice(0, 50).alias("job_name"),
        pl.col("partition").fill_null(""),
        pl.col("state"),
        # jobscope's row has no submit time (schema 2): the start stands in (wait 0).
        pl.from_epoch(pl.col("start_unix_ms"), time_unit="ms").cast(pl.Datetime("us", "UTC")).alias("submit_time"),
        pl.from_epoch(pl.col("start_unix_ms"), time_unit="ms").cast(pl.Datetime("us", "UTC")).alias("start_time"),
        pl.from_epoch(pl.col("end_unix_ms"), time_unit="ms").cast(pl.Datetime("us", "UTC")).alias("end_time"),
        pl.col("node_list"),
        pl.col("elapsed_s").cast(pl.Int64).alias("elapsed_seconds"),
        pl.col("alloc_cores").fill_null(0).cast(pl.Int64).alias("alloc_cpus"),
        (pl.col("alloc_mem_per_node_bytes").fill_null(0) * pl.col("node_count") / 1048576.0).alias("req_mem_mb"),
        (pl.col("mem_peak_bytes").fill_null(0) / 1048576.0).alias("max_rss_mb"),
        pl.col("cpu_usage_s").fill_null(0.0).alias("total_cpu_seconds"),
        pl.col("alloc_gpus").fill_null(0).cast(pl.Int64).alias("alloc_gpus"),
        pl.col("cpu_eff_pct").fill_null(0.0).clip(0, 100).alias("cpu_efficiency"),
        pl.col("mem_eff_pct").fill_null(0.0).clip(0, 100).alias("memory_efficiency"),
        pl.col("core_hours_wasted").fill_null(0.0).alias("cpu_hours_wasted"),
        pl.col("mem_gb_hours_wasted").fill_null(0.0).alias("memory_gb_hours_wasted"),
        pl.col("core_hours_alloc").fill_null(0.0).alias("cpu_hours_reserved"),
        pl.col("mem_gb_hours_alloc").fill_null(0.0).alias("memory_gb_hours_reserved"),
        pl.col("gpu_hours_alloc").fill_null(0.0).alias("gpu_hours_reserved"),
        pl.lit(datetime.now(timezone.utc)).cast(pl.Datetime("us", "UTC")).alias("processed_date"),
        pl.lit(True).alias("is_complete"),
        pl.from_epoch(pl.col("end_unix_ms"), time_unit="ms").dt.strftime("%Y-%m-%d").alias("_day"),
    )
    df = lf.collect()
    n = 0
    for (day,), g in df.group_by(["_day"]):
        g.drop("_day").write_parquet(os.path.join(out, f"{day}.parquet"))
        n += 1
    print(f"slurm-usage layout: {len(df)} jobs in {n} daily files, {time.perf_counter() - t0:.1f} s")


USAGE_SQL = """
SELECT "user", count(*) AS jobs,
  sum(core_hours_alloc), sum(core_hours_used), sum(core_hours_wasted),
  100 * sum(core_hours_used) FILTER (WHERE core_hours_used IS NOT NULL AND core_hours_alloc IS NOT NULL)
      / nullif(sum(core_hours_alloc) FILTER (WHERE core_hours_used IS NOT NULL AND core_hours_alloc IS NOT NULL), 0),
  sum(mem_gb_hours_alloc), sum(mem_gb_hours_used), sum(mem_gb_hours_wasted),
  100 * sum(mem_gb_hours_used) FILTER (WHERE mem_gb_hours_used IS NOT NULL AND mem_gb_hours_alloc IS NOT NULL)
      / nullif(sum(mem_gb_hours_alloc) FILTER (WHERE mem_gb_hours_used IS NOT NULL AND mem_gb_hours_alloc IS NOT NULL), 0),
  sum(gpu_hours_alloc), sum(gpu_hours_used), sum(gpu_hours_wasted),
  100 * sum(gpu_hours_used) FILTER (WHERE gpu_hours_used IS NOT NULL AND gpu_hours_alloc IS NOT NULL)
      / nullif(sum(gpu_hours_alloc) FILTER (WHERE gpu_hours_used IS NOT NULL AND gpu_hours_alloc IS NOT NULL), 0),
  sum(gpu_energy_kwh)
FROM (SELECT "user", end_unix_ms, mem_gb_hours_used, gpu_hours_alloc, gpu_hours_wasted, gpu_energy_kwh,
  """ + DERIVED_SQL + """
  FROM read_parquet($files)
  WHERE end_unix_ms >= $since AND end_unix_ms < $until)
GROUP BY "user" ORDER BY "user"
"""


def timed(f, repeat):
    t = []
    out = None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        out = f()
        t.append((time.perf_counter() - t0) * 1000)
    rest = sorted(t[1:]) or t
    return t[0], statistics.median(rest), rest[0], out


def query(index, end, repeat):
    import duckdb
    import polars as pl

    end_s = int(datetime.strptime(end, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp())
    files = parts(index)
    con = duckdb.connect()
    both = lambda c: (pl.col(c[0]).is_not_null() & pl.col(c[1]).is_not_null())

    def polars_usage(files, since_ms, until_ms):
        effs = []
        for used, alloc, name in [
            ("core_hours_used", "core_hours_alloc", "cpu_eff_pct"),
            ("mem_gb_hours_used", "mem_gb_hours_alloc", "mem_eff_pct"),
            ("gpu_hours_used", "gpu_hours_alloc", "gpu_eff_pct"),
        ]:
            m = both((used, alloc))
            effs.append((100 * pl.col(used).filter(m).sum() / pl.col(alloc).filter(m).sum()).alias(name))
        return (
            pl.scan_parquet(files)
            .filter((pl.col("end_unix_ms") >= since_ms) & (pl.col("end_unix_ms") < until_ms))
            .with_columns(derived())
            .group_by("user")
            .agg(
                [pl.len().alias("jobs")]
                + [
                    pl.col(c).sum()
                    for c in [
                        "core_hours_alloc", "core_hours_used", "core_hours_wasted",
                        "mem_gb_hours_alloc", "mem_gb_hours_used", "mem_gb_hours_wasted",
                        "gpu_hours_alloc", "gpu_hours_used", "gpu_hours_wasted", "gpu_energy_kwh",
                    ]
                ]
                + effs
            )
            .sort("user")
            .collect()
        )

    for label, days in [("year by user", 365), ("30 days by user", 30)]:
        since_ms, until_ms = (end_s - days * 86400) * 1000, end_s * 1000
        # Every file (what the peers got before), then the files jobscope itself opens.
        for scope, fs in [("all files", files), ("same files", parts_in_window(index, since_ms, until_ms))]:
            tag = f"{label}, {scope} ({len(fs)})"
            f, med, best, out = timed(
                lambda: con.execute(USAGE_SQL, {"files": fs, "since": since_ms, "until": until_ms}).fetchall(),
                repeat,
            )
            print(f"duckdb   {tag:<34} first {f:8.1f} ms  median {med:8.1f} ms  best {best:8.1f} ms  ({len(out)} users)")
            f, med, best, out = timed(lambda: polars_usage(fs, since_ms, until_ms), repeat)
            print(f"polars   {tag:<34} first {f:8.1f} ms  median {med:8.1f} ms  best {best:8.1f} ms  ({len(out)} users)")

def month_of(ms):
    d = datetime.fromtimestamp(ms // 1000, tz=timezone.utc)
    return d.year * 12 + d.month - 1


def plan(gen, index, end, days):
    """jobscope's own plan for the question (audit-gen plan: audit/src/index/rollups.rs
    `ParquetEngine::plan`): the months the rollups give, the windows read from the job parts, and
    the windows of the rollups' edge months outside the question, read from the job parts and
    taken away."""
    import json
    import subprocess

    out = subprocess.run(
        [gen, "plan", "--index", index, "--end", end, "--days", str(days)],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)


def rollups_in(index, m0, m1):
    """The rollup parts of the job parts whose end times meet the months [m0, m1): the files jobscope
    opens for them."""
    import json

    with open(os.path.join(index, "state.json")) as f:
        state = json.load(f)
    seq = lambda p: (p["month"], p["file"].rsplit("/", 1)[1])
    reach = {
        seq(p)
        for p in state["jobs"]
        if p.get("max_end_ms") is None
        or (month_of(p["max_end_ms"]) >= m0 and month_of(p["min_end_ms"]) < m1)
    }
    return sorted(os.path.join(index, p["file"]) for p in state["rollups"] if seq(p) in reach)


INPUTS = [
    "core_hours_alloc", "core_hours_used", "core_hours_wasted",
    "mem_gb_hours_alloc", "mem_gb_hours_used", "mem_gb_hours_wasted",
    "gpu_hours_alloc", "gpu_hours_used", "gpu_hours_wasted", "gpu_energy_kwh", "cpu_wait_hours",
]
EFFS = [
    ("core_hours_used", "core_hours_alloc", "cpu_eff_core_hours_used", "cpu_eff_core_hours_alloc"),
    ("mem_gb_hours_used", "mem_gb_hours_alloc", "mem_eff_gb_hours_used", "mem_eff_gb_hours_alloc"),
    ("gpu_hours_used", "gpu_hours_alloc", "gpu_eff_gpu_hours_used", "gpu_eff_gpu_hours_alloc"),
]


def units(col):
    """A rollup sum in hours from its two columns (audit/src/rollup.rs `sum_columns`)."""
    return f"(sum({col}_units_hi)::HUGEINT * 4611686018427387904 + sum({col}_units)) / 1125899906842624.0"


def parts_sql(files, windows, sign):
    """The usage by user of the job rows of `files` that ended in `windows` ($<p>k bounds), each
    figure times `sign` (-1: taken away)."""
    pe = []
    for i, (u, a, _, _) in enumerate(EFFS):
        both = f"{u} IS NOT NULL AND {a} IS NOT NULL"
        pe += [f"{sign} * sum({u}) FILTER (WHERE {both}) AS eu{i}", f"{sign} * sum({a}) FILTER (WHERE {both}) AS ea{i}"]
    window = " OR ".join(f"(end_unix_ms >= ${files}s{k} AND end_unix_ms < ${files}u{k})" for k in range(len(windows)))
    return (
        f'SELECT "user", {sign} * count(*) AS jobs, '
        + ", ".join(f"{sign} * sum({n}) AS {n}" for n in INPUTS)
        + ", " + ", ".join(pe)
        + ' FROM (SELECT "user", end_unix_ms, mem_gb_hours_used, gpu_hours_alloc, gpu_hours_wasted,'
        + " gpu_energy_kwh, cpu_wait_hours, " + DERIVED_SQL
        + f" FROM read_parquet(${files}) WHERE {window}) GROUP BY \"user\""
    )


def planned_sql(have_rollups, plus, minus):
    """The usage by user as jobscope answers it: the rollup rows of its months and level (the
    per-user rows for this question, in row groups of their own that DuckDB skips by their
    statistics as jobscope does), plus the job rows of
    the windows it reads from the job parts, less those of the windows it takes away."""
    pieces = []
    if have_rollups:
        effs = []
        for i, (u, a, eu, ea) in enumerate(EFFS):
            # Null efficiency sums in a rollup row are its plain sums (every job had both figures).
            for col, e, plain in [(f"eu{i}", eu, u), (f"ea{i}", ea, a)]:
                effs.append(
                    f"(sum(coalesce({e}_units_hi, {plain}_units_hi))::HUGEINT * 4611686018427387904"
                    f" + sum(coalesce({e}_units, {plain}_units))) / 1125899906842624.0 AS {col}"
                )
        pieces.append(
            'SELECT "user", sum(jobs) AS jobs, '
            + ", ".join(f"{units(n)} AS {n}" for n in INPUTS)
            + ", " + ", ".join(effs)
            + " FROM read_parquet($rfiles) WHERE end_month >= $m0 AND end_month < $m1 AND level = $level"
            + ' GROUP BY "user"'
        )
    if plus:
        pieces.append(parts_sql("pfiles", plus, 1))
    if minus:
        pieces.append(parts_sql("mfiles", minus, -1))
    both = " UNION ALL BY NAME ".join(f"({p})" for p in pieces)
    out = ", ".join(f"sum({n}) AS {n}" for n in INPUTS)
    eff = ", ".join(f"100 * sum(eu{i}) / nullif(sum(ea{i}), 0)" for i in range(3))
    return (
        f'SELECT "user", sum(jobs), {out}, {eff} FROM ({both}) GROUP BY "user"'
        ' HAVING sum(jobs) > 0 ORDER BY "user"'
    )


def query_rollups(index, end, repeat, gen):
    """DuckDB given what jobscope reads for the question: the rollup files of the months it takes
    from them and the job parts of the windows it reads or takes away (issue 33 §2: DuckDB may read
    what jobscope reads). Its answer is checked against DuckDB's own over the job rows (jobs equal,
    sums within 1e-9)."""
    import duckdb

    end_s = int(datetime.strptime(end, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp())
    con = duckdb.connect()
    for label, days in [("year by user", 365), ("30 days by user", 30)]:
        since_ms, until_ms = (end_s - days * 86400) * 1000, end_s * 1000
        p = plan(gen, index, end, days)
        params = {}
        rfiles = []
        if p["rollup_months"]:
            m0, m1 = p["rollup_months"]
            rfiles = rollups_in(index, m0, m1)
            params.update({"rfiles": rfiles, "m0": m0, "m1": m1, "level": p["rollup_level"]})
        nfiles = {}
        for name, ws in [("pfiles", p["part_windows"]), ("mfiles", p["minus_windows"])]:
            if ws:
                files = sorted({f for s, u in ws for f in parts_in_window(index, s, u)})
                nfiles[name] = len(files)
                params[name] = files
                for k, (s, u) in enumerate(ws):
                    params[f"{name}s{k}"], params[f"{name}u{k}"] = s, u
        sql = planned_sql(bool(rfiles), p["part_windows"], p["minus_windows"])
        f, med, best, out = timed(lambda: con.execute(sql, params).fetchall(), repeat)
        tag = f"{label}, as jobscope reads it"
        print(f"duckdb   {tag:<34} first {f:8.1f} ms  median {med:8.1f} ms  best {best:8.1f} ms  ({len(out)} users)")
        print(f"         {'':<34} {len(rfiles)} rollup parts, job parts: {nfiles.get('pfiles', 0)} added, {nfiles.get('mfiles', 0)} taken away ({p['explain']})")
        want = con.execute(USAGE_SQL, {"files": parts(index), "since": since_ms, "until": until_ms}).fetchall()
        worst = 0.0
        for g, w in zip(out, want):
            assert g[0] == w[0] and g[1] == w[1], (g[:2], w[:2])
            for a, b in [(g[2], w[2]), (g[3], w[3]), (g[5], w[6]), (g[8], w[10])]:
                if a is not None and b is not None:
                    worst = max(worst, abs(a - b) / max(abs(b), 1.0))
        assert len(out) == len(want) and worst < 1e-9, (len(out), len(want), worst)
        print(f"         {'':<34} the same users, jobs and sums as DuckDB over the job rows (largest difference {worst:.1e})")


if __name__ == "__main__":
    if sys.argv[1] == "layout":
        layout(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "query":
        query(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "rollups":
        query_rollups(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(__doc__)
