#!/usr/bin/env bash
# Resuming a run at 1M, release build:
# 1. Done-set rebuild: writes N realistic completion records (~1.9 KB of JSON each, with
#    reasoning; 64 a frame, as `gen run` flushes them, each frame followed by its id index
#    entry) through the real FrameWriter into DIR once, then times what `gen run` does per source
#    on start — `completed_ids`, then FrameWriter::open's torn-tail check — REPEATS times (page
#    cache warm) and prints each run, the medians, the process's CPU time and peak RSS.
#    NO_INDEX=1 writes and times a file as `gen` wrote it before the index (every frame decoded).
# 2. No-op restart of a finished run, through the real `gen run`: a project of N prompts
#    (prepared by `gen`'s own preparation worker; its server is a closed port, never reached),
#    a completion stored for every prompt, then `gen run` timed REPEATS times without the
#    prompt ids recorded in the manifest (a run directory an older `gen` wrote: the prompts are
#    read, done ones not parsed) and REPEATS times with them (what a counting pass leaves).
# 3. `gen verify` of that run directory, REPEATS times.
# Each timed command prints wall time and peak RSS; the load average is printed around them.
# Usage: scripts/bench-resume.sh [DIR] [N] [REPEATS]   (defaults: /tmp/gen-bench-resume 1000000 5)
# ONLY=rebuild|restart|verify runs one part.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/gen-bench-resume}
count=${2:-1000000}
repeats=${3:-5}
only=${ONLY:-}
cargo build --release -p gen-pipeline --example bench_resume --bin gen
target=${CARGO_TARGET_DIR:-target}
bin="$target/release/examples/bench_resume"
gen=$(realpath "$target/release/gen")
mkdir -p "$dir"
timed() {
    /usr/bin/time -f "  %e s wall, %U s user, %S s sys, %M KB peak RSS" "$@"
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ -z $only || $only == rebuild ]]; then
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
    echo "== done-set rebuild of $count records ($repeats in one process)"
    timed "$bin" rebuild "$file" "$repeats"
fi

project="$dir/project-$count"
source_dir="$project/runs/cfg/sources/bench"
if [[ (-z $only || $only == restart || $only == verify) && ! -f $source_dir/completions.jsonl.zst ]]; then
    rm -rf "$project"
    "$bin" project "$project" "$count"
    # The worker `gen run` starts per source.
    (cd "$project" && timed "$gen" prep cfg.toml --source bench --run-dir runs/cfg)
    "$bin" finish "$source_dir"
fi

if [[ -z $only || $only == restart ]]; then
    echo "== no-op restart of a finished run of $count prompts, no prompt ids recorded"
    for _ in $(seq "$repeats"); do
        "$bin" forget-ids "$source_dir"
        (cd "$project" && timed "$gen" run cfg.toml 2>&1 | grep -v '^gen: ' || true)
    done
    echo "== the same with the prompt ids the last one recorded"
    for _ in $(seq "$repeats"); do
        (cd "$project" && timed "$gen" run cfg.toml 2>&1 | grep -v '^gen: ' || true)
    done
fi

if [[ -z $only || $only == verify ]]; then
    echo "== gen verify of $count completions"
    for _ in $(seq "$repeats"); do
        timed "$gen" verify "$project/runs/cfg" 2>&1 >/dev/null | tail -1
    done
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
