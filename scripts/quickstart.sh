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

# The config finds the server and model where install-llama-server.sh caches them; one found
# elsewhere (on PATH, or named by the variables) is said in the line to type.
cache="${GEN_CACHE:-$HOME/.cache/gen}"
again="./target/release/gen run examples/quickstart.toml"
[ "$LLAMA_SERVER_BIN" = "$cache/llama/bin/llama-server" ] || again="LLAMA_SERVER_BIN=$LLAMA_SERVER_BIN $again"
[ "$GEN_TEST_MODEL" = "$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf" ] || again="GEN_TEST_MODEL=$GEN_TEST_MODEL $again"
echo "quickstart: run it again (a no-op once every prompt is answered) with: $again"
