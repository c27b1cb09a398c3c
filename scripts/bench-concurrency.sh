#!/usr/bin/env bash
# Tuning quality against a real server (issue 5, Performance 2): `gen run` with fixed
# concurrency 1, 2, 4, 8 and with "auto", each in a fresh run directory, on the same prompts,
# against one llama-server (`-np 4 --metrics`, SmolLM2-135M, 127.0.0.1). Prints output tok/s
# per level and auto as a share of the best fixed level, as the markdown table in
# BENCHMARKS.md. ROUNDS=n repeats the whole sweep (levels interleaved) to show the spread.
#
# Environment: LLAMA_SERVER_BIN, GEN_TEST_MODEL (default: the cache the installer fills),
# PROMPTS (default 120), MAX_TOKENS (default 64), ROUNDS (default 1), LEVELS (default
# "1 2 4 8 auto"), GEN_BIN (default: build the release binary).
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_SERVER_BIN=${LLAMA_SERVER_BIN:-$HOME/.cache/gen/llama/bin/llama-server}
GEN_TEST_MODEL=${GEN_TEST_MODEL:-$HOME/.cache/gen/models/SmolLM2-135M-Instruct.Q4_1.gguf}
PROMPTS=${PROMPTS:-120}
MAX_TOKENS=${MAX_TOKENS:-64}
ROUNDS=${ROUNDS:-1}
LEVELS=${LEVELS:-1 2 4 8 auto}

if [[ -z ${GEN_BIN:-} ]]; then
    cargo build --release --locked -p gen-pipeline --bin gen >&2
    GEN_BIN="${CARGO_TARGET_DIR:-target}/release/gen"
fi

work=$(mktemp -d /tmp/gen-bench-concurrency.XXXXXX)
server_pid=
cleanup() {
    if [[ -n $server_pid ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$LLAMA_SERVER_BIN" -m "$GEN_TEST_MODEL" --alias smollm2-135m --host 127.0.0.1 --port "$port" \
    -np 4 -c 4096 -t 2 --metrics >"$work/llama-server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/llama-server.log" >&2; exit 1; }
    sleep 0.2
done

# Warm-up: the first requests of a fresh server are slower (model pages, caches); keep that
# out of whichever level runs first.
warmups=()
for i in 1 2 3 4; do
    curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
        -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Warm up $i.\"}],\"max_tokens\":16}" \
        >/dev/null &
    warmups+=($!)
done
wait "${warmups[@]}" || true

# Short, distinct prompts (distinct ids): a sentence about a numbered topic.
python3 - "$work/prompts.jsonl" "$PROMPTS" <<'EOF'
import json, sys
topics = ["rivers", "bread", "trains", "owls", "glass", "tides", "copper", "maps", "bees", "snow"]
with open(sys.argv[1], "w") as out:
    for i in range(int(sys.argv[2])):
        prompt = f"In two sentences, tell me something about {topics[i % len(topics)]} (note {i})."
        out.write(json.dumps({"prompt": prompt}) + "\n")
EOF

# One run: prints "tokens seconds".
run_level() {
    local level=$1 dir=$2 concurrency
    if [[ $level == auto ]]; then concurrency='"auto"'; else concurrency=$level; fi
    mkdir -p "$dir"
    cat >"$dir/bench.toml" <<EOF
[run]
dir = "run"

[server]
url = "http://127.0.0.1:$port"

[generation]
max-tokens = $MAX_TOKENS
temperature = 0.7
seed = 1
concurrency = $concurrency

[[source]]
name = "bench"
path = "$work/prompts.jsonl"
EOF
    local start end
    start=$(date +%s.%N)
    "$GEN_BIN" run "$dir/bench.toml" >"$dir/gen.log" 2>&1 || { cat "$dir/gen.log" >&2; exit 1; }
    end=$(date +%s.%N)
    "$GEN_BIN" export "$dir/bench.toml" --format jsonl -o "$dir/out.jsonl" >/dev/null 2>&1
    python3 - "$dir/out.jsonl" "$start" "$end" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
tokens = sum(r.get("completion_tokens") or 0 for r in rows)
print(tokens, float(sys.argv[3]) - float(sys.argv[2]), len(rows))
EOF
}

results="$work/results.txt"
for round in $(seq "$ROUNDS"); do
    for level in $LEVELS; do
        read -r tokens seconds rows < <(run_level "$level" "$work/r$round-$level")
        echo "$round $level $tokens $seconds $rows" >>"$results"
        printf 'round %s concurrency %-4s %6s tokens %7.1f s %s prompts\n' \
            "$round" "$level" "$tokens" "$seconds" "$rows" >&2
        grep -h "concurrency" "$work/r$round-$level/gen.log" | sed 's/^/    /' >&2 || true
    done
done

python3 - "$results" <<'EOF'
import sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    rnd, level, tokens, seconds, rows = line.split()
    runs[int(rnd)].append((level, int(tokens) / float(seconds)))
levels = [level for level, _ in runs[min(runs)]]
print("| round | " + " | ".join(f"c={l} tok/s" for l in levels) + " | best fixed | auto / best |")
print("|---" * (len(levels) + 3) + "|")
for rnd in sorted(runs):
    rates = dict(runs[rnd])
    fixed = {l: r for l, r in rates.items() if l != "auto"}
    best = max(fixed, key=fixed.get)
    share = f"{100 * rates['auto'] / fixed[best]:.1f}%" if "auto" in rates else "—"
    cells = " | ".join(f"{rates[l]:.1f}" for l in levels)
    print(f"| {rnd} | {cells} | c={best} | {share} |")
EOF
