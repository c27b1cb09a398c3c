#!/usr/bin/env bash
# The kill -9 soak: for each seed, `gen run` is killed with SIGKILL 20 times at seeded points
# (a quarter during preparation, the rest during generation, timed from observed progress),
# then rerun cleanly; `gen verify` must report 0 lost and 0 duplicated, and every prompt must
# have exactly one completion. Runs the ignored test `soak_twenty_kills` in release mode
# against the fake OpenAI server on 127.0.0.1; prints a summary table at the end.
#
#   ./scripts/soak.sh                      # seed 1, 20 kills
#   GEN_SOAK_SEEDS="1 2 3" ./scripts/soak.sh
#   GEN_SOAK_KILLS=50 ./scripts/soak.sh
#   GEN_SOAK_ROWS=1000000 ./scripts/soak.sh   # rows per source (default 400 000)
set -euo pipefail
cd "$(dirname "$0")/.."

seeds=${GEN_SOAK_SEEDS:-1}
kills=${GEN_SOAK_KILLS:-20}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

cargo test --release --locked -p gen-pipeline --test it --no-run >/dev/null 2>&1 ||
    cargo test --release -p gen-pipeline --test it --no-run

failed=0
for seed in $seeds; do
    log="$logs/$seed.log"
    started=$(date +%s)
    if GEN_FAULTS_SEED=$seed GEN_SOAK_KILLS=$kills cargo test --release -p gen-pipeline \
        --test it -- --ignored --exact faults::soak_twenty_kills --nocapture >"$log" 2>&1; then
        result=ok
    else
        result=FAILED
        failed=1
        # The panic message first: with a backtrace it scrolls out of the tail.
        grep -A3 "panicked at" "$log" >&2 || true
        tail -40 "$log" >&2
    fi
    echo "$seed $result $(( $(date +%s) - started ))" >>"$logs/results"
done

printf '\n%-8s %5s %5s %5s %5s %8s %9s %5s %5s %6s %7s\n' \
    seed kills prep both gen prompts completed lost dup secs result
while read -r seed result secs; do
    log="$logs/$seed.log"
    count() { grep -cE "^ +[0-9]+  $1 " "$log" || true; }
    final=$(grep -E '^final: ' "$log" | tail -1 || true)
    num() { sed -nE "s/.* ([0-9]+) $1.*/\\1/p" <<<"$final"; }
    printf '%-8s %5s %5s %5s %5s %8s %9s %5s %5s %6s %7s\n' "$seed" \
        "$(grep -cE '^ +[0-9]+  (preparation|both|generation) ' "$log" || true)" \
        "$(count preparation)" "$(count both)" "$(count generation)" \
        "$(num prompts,)" "$(num completed)" "$(num lost)" "$(num duplicated)" "$secs" "$result"
done <"$logs/results"
exit $failed
