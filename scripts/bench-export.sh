#!/usr/bin/env bash
# `gen export` of a finished run of N completions (default 1M, ~1.9 KB of JSON each with
# reasoning: a 611 MiB completions file), wall time and peak RSS per schema and format
# (`/usr/bin/time`). The run is built once by the resume benchmark's helper (`bench_resume
# project` + `gen prep` + `bench_resume finish`; no server) and kept in DIR.
# Usage: scripts/bench-export.sh [DIR] [N] [PROFILE]   (defaults: /tmp/gen-bench-export 1000000 debug)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/gen-bench-export}
count=${2:-1000000}
profile=${3:-debug}
flag=(); [ "$profile" = release ] && flag=(--release)
cargo build "${flag[@]}" -p gen-pipeline --example bench_resume --bin gen
target="${CARGO_TARGET_DIR:-target}/$profile"
gen=$(realpath "$target/gen")
timed() { /usr/bin/time -f "  %e s wall, %U s user, %M KB peak RSS" "$@"; }
project="$dir/project-$count"
source_dir="$project/runs/cfg/sources/bench"
if [ ! -f "$source_dir/completions.jsonl.zst" ]; then
  rm -rf "$project"
  "$target/examples/bench_resume" project "$project" "$count"
  (cd "$project" && "$gen" prep cfg.toml --source bench --run-dir runs/cfg >/dev/null)
  "$target/examples/bench_resume" finish "$source_dir"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for args in "--schema messages --format jsonl" "--schema specforge --format parquet" \
            "--schema sharegpt --format jsonl --per-turn"; do
  out="$dir/out"
  rm -rf "$out"
  echo "== gen export $args"
  timed "$gen" export "$project/runs/cfg" $args -o "$out" --allow-incomplete 2>&1 \
    | grep -v "does not carry" || true
  du -sh "$out/data"
done
rm -rf "$dir/out"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
