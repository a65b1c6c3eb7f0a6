#!/bin/bash
# The audit benchmark (issue 10 §4): prints figures, is not a test. As root or not; needs cargo and
# python3 (a venv with DuckDB, Polars and the slurm-usage tool is made under target/ from PyPI).
#
#   bench/audit/run.sh [--jobs 10000000] [--repeat 7] [--keep] [--no-build]
#
# 1. audit-gen gen: a seeded index of N jobs over 3 years ending today (bench/audit/gen.rs), and
#    its size, the rollups' apart.
# 2. jobscope's Parquet engine: usage by user over the last year and the last 30 days (what
#    answered, and the same from the job parts alone).
# 3. DuckDB and Polars: the same question over the same Parquet files (bench/audit/compare.py);
#    DuckDB given the rollup files and job parts jobscope reads (its plan from `audit-gen plan`),
#    for the year and the 30 days.
# 4. slurm-usage's own `analyze --days 365|30` over its own layout of the same jobs (one Parquet
#    file per day, its ProcessedJob columns): it prints several reports, not only the one asked.
# 5. Index update per job on a real JSON archive (audit-gen update).
# 6. The timer's command on a copy of the N-job index: the index part and what follows it
#    (cohorts, run history) apart, for nothing new, batches, one job, the daily whole rewrite
#    (audit-gen timer).
# 7. The cluster report (`jobscope audit report --html`) and the alerts' dry run over the last
#    year, as whole commands: seconds and peak memory (/usr/bin/time).
# Work files go to target/bench-audit/ (removed at the end unless --keep).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
JOBS=10000000 REPEAT=7 KEEP=0 BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v cargo >/dev/null 2>&1 || export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
WORK=$TARGET/bench-audit
VENV=$TARGET/bench-audit-venv
END=$(date -u +%F)   # slurm-usage's analyze counts days back from now
mkdir -p "$WORK"
[ "$KEEP" = 1 ] || trap 'rm -rf "$WORK"' EXIT

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q duckdb polars pyarrow slurm-usage
fi
echo "== machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB; $("$VENV/bin/python" -c 'import duckdb, polars; print("duckdb", duckdb.__version__, "polars", polars.__version__)'), slurm-usage $("$VENV/bin/pip" show slurm-usage 2>/dev/null | awk '/^Version/{print $2}')"
[ "$BUILD" = 0 ] || cargo build -q --release -p jobscope-audit --example audit-gen -p jobscope-cli
GEN=$TARGET/release/examples/audit-gen

echo "== 1. generate $JOBS jobs (3 years ending $END)"
rm -rf "$WORK/index"
"$GEN" gen --jobs "$JOBS" --years 3 --end "$END" --seed 1 --index "$WORK/index"
echo "index size: $(du -sh "$WORK/index" | cut -f1) ($(du -sb "$WORK/index" | cut -f1) bytes)"

echo "== 2. jobscope (Parquet engine)"
"$GEN" query --index "$WORK/index" --end "$END" --repeat "$REPEAT"

echo "== 3. DuckDB and Polars over the same Parquet files"
"$VENV/bin/python" bench/audit/compare.py query "$WORK/index" "$END" "$REPEAT"
"$VENV/bin/python" bench/audit/compare.py rollups "$WORK/index" "$END" "$REPEAT" "$GEN"

echo "== 4. slurm-usage analyze over its own layout of the same jobs"
rm -rf "$WORK/slurm-usage"
"$VENV/bin/python" bench/audit/compare.py layout "$WORK/index" "$WORK/slurm-usage"
echo "slurm-usage layout size: $(du -sh "$WORK/slurm-usage" | cut -f1)"
for days in 365 30; do
  t0=$(date +%s.%N)
  COLUMNS=120 "$VENV/bin/slurm-usage" analyze --data-dir "$WORK/slurm-usage" --days "$days" >"$WORK/slurm-usage-$days.txt" 2>&1 || {
    echo "slurm-usage analyze failed:"; tail -5 "$WORK/slurm-usage-$days.txt"; }
  t1=$(date +%s.%N)
  printf 'slurm-usage analyze --days %-4s %8.1f ms (whole command: Python start, load, every report it prints)\n' \
    "$days" "$(echo "($t1 - $t0) * 1000" | bc -l)"
done
grep -m1 "Loaded" "$WORK/slurm-usage-365.txt" || true

echo "== 5. index update per job (real JSON archive)"
"$GEN" update --work "$WORK/update" --base 2000 --add 200

echo "== 6. the timer's command on a copy of the index (audit-gen timer)"
"$GEN" timer --index "$WORK/index" --work "$WORK/timer" --add 200

echo "== 7. the cluster report and the alerts' dry run over the last year"
# The index alone: an empty archive (nothing for the command's own update to add) and every alert
# rule on over 365 days.
mkdir -p "$WORK/empty-archive"
{
  printf '[paths]\narchive_dir = "%s"\n[audit]\nindex_dir = "%s"\n' "$WORK/empty-archive" "$WORK/index"
  for rule in gpu_idle cpu_efficiency mem_request timeouts cpu_on_gpu; do
    printf '[alerts.%s]\nenabled = true\nwindow_days = 365\n' "$rule"
  done
} >"$WORK/jobscope.toml"
JS=$TARGET/release/jobscope
for i in 1 2 3; do
  rm -f "$WORK/report.html"
  /usr/bin/time -f "cluster report, last 365 days: %e s, peak %M KiB" \
    "$JS" --config "$WORK/jobscope.toml" audit report --last 365d --until "$END" \
    --html "$WORK/report.html" >/dev/null 2>"$WORK/report.err" || cat "$WORK/report.err"
  grep "cluster report, last" "$WORK/report.err" || true
done
for i in 1 2 3; do
  /usr/bin/time -f "alerts --dry-run, every rule over 365 days: %e s, peak %M KiB" \
    "$JS" --config "$WORK/jobscope.toml" alerts --dry-run >/dev/null 2>"$WORK/alerts.err" || true
  grep "alerts --dry-run" "$WORK/alerts.err" || tail -3 "$WORK/alerts.err"
done
