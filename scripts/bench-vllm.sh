#!/usr/bin/env bash
# Auto concurrency against a real vLLM (issue 23): `gen run` with fixed concurrency levels and
# with "auto", each in a fresh run directory against a freshly started vLLM (PyPI's CPU build,
# the tiny local model of scripts/install-vllm.sh, 127.0.0.1, its default `max_num_seqs` of 128
# on CPU, which it reports in no endpoint). Per run it prints the whole-job makespan (the wall
# time of `gen run`, first request to exit), the output tokens, and the most requests the
# server held at once (running + waiting, from its own /metrics sampled every 0.2 s); then a
# markdown table per round with each level's makespan as a share of the best fixed level's,
# and the median over rounds.
#
# What it leaves out: the server's start-up (60-140 s here, the same for every level) is not
# in the makespan; the tiny model makes this a scheduling benchmark (how full gen keeps the
# engine), not a model-speed one; 2 shared cores make single runs noisy (ROUNDS=n repeats the
# sweep, levels interleaved).
#
# The tiny model never ends an answer itself, so every answer is `max-tokens` long: with one
# budget all requests of a wave finish together (a lockstep no real job has). MAX_TOKENS may
# list several budgets ("64 128 256 512"): the prompts are split into one source per budget
# (`[source.generation] max-tokens`), sent interleaved, so answer lengths vary as in a real job.
#
# Environment: GEN_VLLM_PYTHON, GEN_VLLM_MODEL (default: what scripts/install-vllm.sh gives),
# PROMPTS (default 400), MAX_TOKENS (default 256; a list: a source per budget), ROUNDS
# (default 1), LEVELS (default "32 64 128 192 auto"), GEN_BIN (default: build the release
# binary).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -z ${GEN_VLLM_PYTHON:-} || -z ${GEN_VLLM_MODEL:-} ]]; then
    eval "$(./scripts/install-vllm.sh)"
fi
PROMPTS=${PROMPTS:-400}
MAX_TOKENS=${MAX_TOKENS:-256}
ROUNDS=${ROUNDS:-1}
LEVELS=${LEVELS:-32 64 128 192 auto}

if [[ -z ${GEN_BIN:-} ]]; then
    cargo build --release --locked -p gen-pipeline --bin gen >&2
    GEN_BIN="${CARGO_TARGET_DIR:-target}/release/gen"
fi

work=$(mktemp -d /tmp/gen-bench-vllm.XXXXXX)
server_pid=
stop_server() {
    if [[ -n $server_pid ]]; then
        # The API server and its engine core share the process group setsid gave them.
        kill -KILL -- "-$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=
    fi
}
cleanup() {
    stop_server
    rm -rf "$work"
}
trap cleanup EXIT

# Starts a fresh vLLM on a free port in its own process group and warms it up. Sets `port`
# and `server_pid`.
start_server() {
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=auto \
        HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
        setsid "$GEN_VLLM_PYTHON" -m vllm.entrypoints.openai.api_server --model "$GEN_VLLM_MODEL" \
        --served-model-name tiny-think --host 127.0.0.1 --port "$port" --max-model-len 1024 \
        >"$1/vllm.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1800); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
        kill -0 "$server_pid" 2>/dev/null || { tail -30 "$1/vllm.log" >&2; exit 1; }
        sleep 0.5
    done
    for i in 1 2 3 4; do
        curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
            -d "{\"model\":\"tiny-think\",\"messages\":[{\"role\":\"user\",\"content\":\"warm up $i\"}],\"max_tokens\":16}" \
            >/dev/null
    done
}

budgets=($MAX_TOKENS)
python3 - "$work" "$PROMPTS" "${#budgets[@]}" <<'PY'
import json, random, sys
rng = random.Random(11)
words = ["the", "model", "answer", "prompt", "token", "data", "server", "reason", "why", "how"]
work, prompts, sources = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files = [open(f"{work}/prompts-{k}.jsonl", "w") for k in range(sources)]
for i in range(prompts):
    text = " ".join(rng.choice(words) for _ in range(rng.randint(8, 120)))
    files[i % sources].write(json.dumps({"prompt": f"{i}: {text}"}) + "\n")
PY
# One source per budget; `gen` interleaves the sources' prompts.
sources_toml=""
for k in "${!budgets[@]}"; do
    sources_toml+="
[[source]]
name = \"bench-$k\"
path = \"$work/prompts-$k.jsonl\"
[source.generation]
max-tokens = ${budgets[$k]}
"
done

declare -A makespan
for round in $(seq "$ROUNDS"); do
    for level in $LEVELS; do
        dir="$work/r$round-$level"
        mkdir -p "$dir"
        start_server "$dir"
        if [[ $level == auto ]]; then conc='"auto"'; else conc=$level; fi
        cat >"$dir/cfg.toml" <<TOML
[run]
dir = "$dir/run"
[server]
url = "http://127.0.0.1:$port"
[generation]
max-tokens = ${budgets[0]}
concurrency = $conc
$sources_toml
TOML
        # The server's own count of what it holds, sampled until the run ends.
        python3 - "$port" "$dir/peak" <<'PY' &
import sys, time, urllib.request
port, out = sys.argv[1], sys.argv[2]
peak = 0.0
while True:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except Exception:
        break
    held = sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
               if l.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")))
    peak = max(peak, held)
    with open(out, "w") as f:
        f.write(f"{peak:.0f}\n")
    time.sleep(0.2)
PY
        sampler=$!
        t0=$(date +%s.%N)
        "$GEN_BIN" run "$dir/cfg.toml" >"$dir/gen.out" 2>"$dir/gen.err" || { cat "$dir/gen.err" >&2; exit 1; }
        t1=$(date +%s.%N)
        stop_server
        wait "$sampler" 2>/dev/null || true
        secs=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
        tokens=$("$GEN_BIN" status "$dir/cfg.toml" --json | python3 -c 'import json,sys; print(sum(s.get("output_tokens") or 0 for s in json.load(sys.stdin)["sources"]))')
        makespan[$round,$level]=$secs
        echo "round $round level $level: makespan ${secs} s, ${tokens} output tokens, peak held at the server $(cat "$dir/peak")" >&2
        if [[ $level == auto ]]; then
            grep -E "concurrency (auto|[0-9]+ →)" "$dir/gen.err" | head -12 | sed 's/^/    /' >&2 || true
        fi
    done
done

for round in $(seq "$ROUNDS"); do
    best=
    for level in $LEVELS; do
        [[ $level == auto ]] && continue
        v=${makespan[$round,$level]}
        if [[ -z $best ]] || python3 -c "import sys; sys.exit(0 if $v < $best else 1)"; then best=$v; fi
    done
    echo
    echo "round $round (best fixed ${best} s)"
    echo "| level | makespan (s) | best fixed / level |"
    echo "|---|---|---|"
    for level in $LEVELS; do
        v=${makespan[$round,$level]}
        echo "| $level | $v | $(python3 -c "print(f'{$best / $v:.3f}')") |"
    done
done
