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
#     HTTP; 800 prompts per job (GEN_BENCH_HTTP_PROMPTS), about 15 minutes;
#  4. issue 23's jobs of a few minutes (short answers on a small KV cache, prefill-heavy,
#     reasoning-length, cap-bound with the cap unreported, llama.cpp): `short` on virtual time,
#     `short-http` end to end over 127.0.0.1 at 4× the engine's speed (about 20 minutes).
#
# Prints the markdown tables recorded in BENCHMARKS.md. TABLES="steady jobs http" picks tables
# (`short` and `short-http` only when named); PROFILE=dev runs without a release build;
# GEN_BENCH_JOB_SIZES="800 2000" picks the whole-job sizes, GEN_BENCH_JOB_SERVERS="vLLM" the
# servers whose name contains it; GEN_BENCH_HTTP_ONLY the same for the end-to-end table.
set -euo pipefail
cd "$(dirname "$0")/.."
TABLES=${TABLES:-steady jobs http}
PROFILE=${PROFILE:-release}
bench() {
    cargo test --profile "$PROFILE" --locked -p gen-pipeline --test it "$1" \
        -- --ignored --exact --nocapture --test-threads=1
}
for table in $TABLES; do
    case $table in
        steady) bench controller_sim::bench_controller ;;
        jobs) bench controller_sim::bench_whole_jobs ;;
        http) bench controller_http::bench_controller_http ;;
        short) bench controller_sim::bench_short_jobs ;;
        short-http) bench controller_http::bench_short_jobs_http ;;
        *) echo "unknown table: $table" >&2; exit 2 ;;
    esac
done
