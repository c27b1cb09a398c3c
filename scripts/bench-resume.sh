#!/usr/bin/env bash
# Resume: rebuilding the done-set from 1M completed records (issue 5, Performance 3).
# Writes N realistic completion records (~1.9 KB of JSON each, with reasoning; 64 a frame, as
# `gen run` flushes them, each frame followed by its id index entry) through the real
# FrameWriter into DIR once, then times what `gen run` does per source on start —
# `completed_ids`, then FrameWriter::open's torn-tail check — REPEATS times (page cache warm)
# and prints each run, the medians, the process's CPU time and peak RSS, and the load average.
# NO_INDEX=1 writes and times a file as `gen` wrote it before the index (every frame decoded).
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
if [[ ${NO_INDEX:-} == 1 ]]; then
    file="$dir/completions-$count-noindex.jsonl.zst"
    flags=(--no-index)
else
    # v2: with id index entries (files of the earlier benchmark have none).
    file="$dir/completions-$count-v2.jsonl.zst"
    flags=()
fi
if [[ ! -f $file ]]; then
    "$bin" write "$file.partial" "$count" "${flags[@]}"
    mv "$file.partial" "$file"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/time -f "process: %e s wall, %U s user, %S s sys, %M KB peak RSS" \
    "$bin" rebuild "$file" "$repeats"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
