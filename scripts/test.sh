#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs (or reuses, cached) the real llama-server and
# model the end-to-end tests need, then format check, clippy, and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(./scripts/install-llama-server.sh)"
export LLAMA_SERVER_BIN GEN_TEST_MODEL
# With this set, end-to-end tests fail instead of skipping when llama-server is missing.
export GEN_REQUIRE_LLAMA=1

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
cargo test --workspace --locked --doc
