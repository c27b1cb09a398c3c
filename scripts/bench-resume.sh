#!/usr/bin/env bash
# Resume: rebuilding the done-set from 1M completed records (issue 5, Performance 3).
# Writes N realistic completion records (~1.9 KB of JSON each, with reasoning; 64 a frame, as
# `gen run` flushes them) through the real FrameWriter into DIR once, then times
# `completed_ids` — what `gen run` calls on start — REPEATS times (page cache warm) and prints
# each run, the median, and the process's CPU time and peak RSS.
# Usage: scripts/bench-resume.sh [DIR] [N] [REPEATS]   (defaults: /tmp/gen-bench-resume 1000000 5)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/gen-bench-resume}
count=${2:-1000000}
repeats=${3:-5}
cargo build --release -p gen-pipeline --example bench_resume
target=${CARGO_TARGET_DIR:-target}
bin="$target/release/examples/bench_resume"
mkdir -p "$dir"
file="$dir/completions-$count.jsonl.zst"
if [[ ! -f $file ]]; then
    "$bin" write "$file.partial" "$count"
    mv "$file.partial" "$file"
fi
/usr/bin/time -f "process: %e s wall, %U s user, %S s sys, %M KB peak RSS" \
    "$bin" rebuild "$file" "$repeats"
