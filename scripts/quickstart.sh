#!/usr/bin/env bash
# One command from a fresh clone: install what is missing (a local llama-server and the
# SmolLM2-135M model, cached), build `gen`, run the quickstart, show its status.
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(./scripts/install-llama-server.sh)"
export LLAMA_SERVER_BIN GEN_TEST_MODEL

cargo build --release --locked -p gen-pipeline
./target/release/gen run examples/quickstart.toml
./target/release/gen status examples/quickstart.toml
