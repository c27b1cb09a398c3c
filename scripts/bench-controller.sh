#!/usr/bin/env bash
# Tuning quality of `concurrency = "auto"` against fixed levels (issues 5 and 14), three tables:
#
#  1. steady state: the controller against an exhaustive fixed-concurrency sweep on the
#     simulated KV-bound and cap-bound servers (gen-tests `sim`, virtual time, 6 h per run,
#     measured from minute 10);
#  2. whole jobs of 800, 2,000 and 20,000 prompts, makespan from the first request, the
#     controller reading each server's own endpoints (SGLang, vLLM, llama.cpp flavours) as
#     `gen run` does (virtual time, deterministic);
#  3. end to end: real `gen run` against the fake server's simulated mode over 127.0.0.1 (real
#     clock, 100× the engine's speed), the tuner reading SGLang's and vLLM's endpoints over
#     HTTP; 800 prompts per job (GEN_BENCH_HTTP_PROMPTS), about 15 minutes.
#
# Prints the markdown tables recorded in BENCHMARKS.md. TABLES="steady jobs http" picks tables;
# GEN_BENCH_JOB_SIZES="800 2000" picks the whole-job sizes, GEN_BENCH_JOB_SERVERS="vLLM" the
# servers whose name contains it; GEN_BENCH_HTTP_ONLY the same for the end-to-end table.
set -euo pipefail
cd "$(dirname "$0")/.."
TABLES=${TABLES:-steady jobs http}
for table in $TABLES; do
    case $table in
        steady)
            cargo test --release --locked -p gen-pipeline --test it controller_sim::bench_controller \
                -- --ignored --exact --nocapture --test-threads=1 ;;
        jobs)
            cargo test --release --locked -p gen-pipeline --test it controller_sim::bench_whole_jobs \
                -- --ignored --exact --nocapture --test-threads=1 ;;
        http)
            cargo test --release --locked -p gen-pipeline --test it \
                controller_http::bench_controller_http -- --ignored --exact --nocapture --test-threads=1 ;;
        *) echo "unknown table: $table" >&2; exit 2 ;;
    esac
done
