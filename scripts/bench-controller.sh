#!/usr/bin/env bash
# Tuning quality of the concurrency controller (issue 5, Performance 2): the controller against
# an exhaustive fixed-concurrency sweep on the simulated KV-bound and cap-bound servers
# (gen-tests `sim`, virtual time: deterministic, ~2 s of simulation after the release build).
# Prints the markdown table recorded in BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --release -p gen-pipeline --test controller_sim bench_controller \
    -- --ignored --nocapture --test-threads=1
