#!/usr/bin/env bash
# Tuning quality against a real server (issue 5, Performance 2; issue 14): `gen run` with
# fixed concurrency 1, 2, 4, 8 and with "auto", each in a fresh run directory, on the same
# prompts, against llama-server (`-np 4 --metrics`, SmolLM2-135M, 127.0.0.1). Prints each
# run's makespan (the wall time of `gen run`, first request to exit) and output tokens, then
# a markdown table per round with auto as a share of the best fixed level, and the median
# over rounds. ROUNDS=n repeats the whole sweep (levels interleaved) to show the spread.
#
# Every run gets a freshly started llama-server, warmed up the same way: one server kept
# across runs carries its prompt cache (`--cache-ram`, 8 GiB by default) and its history
# into the next level, a confound between levels run in turn. Each run also
# prints how full gen kept the server's slots (from llama-server's log: what the controller
# decides), the server's CPU seconds per output token and the VM's steal time (what the host
# gave), to tell a slow host from a slow level.
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

# Starts a fresh llama-server on a free port and warms it up: the first requests of a new
# server are slower (model pages, caches). Sets `port` and `server_pid`.
start_server() {
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$LLAMA_SERVER_BIN" -m "$GEN_TEST_MODEL" --alias smollm2-135m --host 127.0.0.1 --port "$port" \
        -np 4 -c 4096 -t 2 --metrics >"$1/llama-server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 300); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
        kill -0 "$server_pid" 2>/dev/null || { cat "$1/llama-server.log" >&2; exit 1; }
        sleep 0.2
    done
    local warmups=() i
    for i in 1 2 3 4; do
        curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
            -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Warm up $i.\"}],\"max_tokens\":16}" \
            >/dev/null &
        warmups+=($!)
    done
    wait "${warmups[@]}" || true
}

stop_server() {
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
}

# CPU seconds (user + system) a process has used so far.
cpu_seconds() {
    awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

# How full gen kept the server, from llama-server's log: the mean number of busy slots from
# the first request after the warm-up to the last answer, and the share of that time every
# slot was busy. What the controller decides shows here; a slow host does not.
slot_use() {
    python3 - "$1" <<'EOF'
import re, sys
events, slots = [], None
for line in open(sys.argv[1], errors="replace"):
    stamp = re.match(r"(\d+)\.(\d+)\.(\d+)\.(\d+) ", line)
    found = re.search(r"n_slots = (\d+)", line)
    if found:
        slots = int(found.group(1))
    if not stamp or not re.search(r"slot +(launch_slot_|release):", line):
        continue
    m, s, ms, us = map(int, stamp.groups())
    events.append((m * 60 + s + ms / 1e3 + us / 1e6, 1 if "launch_slot_" in line else -1))
events = events[8:]  # the four warm-up requests, launched and released before `gen run`
if not events or slots is None:
    print("- -")
    sys.exit()
busy, area, full, last = 0, 0.0, 0.0, events[0][0]
for t, change in events:
    area += busy * (t - last)
    full += (t - last) if busy >= slots else 0.0
    busy, last = busy + change, t
span = last - events[0][0]
print(f"{area / span:.2f} {100 * full / span:.0f}%" if span > 0 else "- -")
EOF
}

# Seconds of CPU the hypervisor gave to others while this VM wanted it, over all CPUs.
steal_seconds() {
    awk -v hz="$(getconf CLK_TCK)" '/^cpu / { print $9 / hz }' /proc/stat
}

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
    local start end cpu0 cpu1 steal0 steal1
    cpu0=$(cpu_seconds "$server_pid")
    steal0=$(steal_seconds)
    start=$(date +%s.%N)
    "$GEN_BIN" run "$dir/bench.toml" >"$dir/gen.log" 2>&1 || { cat "$dir/gen.log" >&2; exit 1; }
    end=$(date +%s.%N)
    cpu1=$(cpu_seconds "$server_pid")
    steal1=$(steal_seconds)
    "$GEN_BIN" export "$dir/bench.toml" --format jsonl -o "$dir/out.jsonl" >/dev/null 2>&1
    python3 - "$dir/out.jsonl" "$start" "$end" "$cpu0" "$cpu1" "$steal0" "$steal1" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
tokens = sum(r.get("completion_tokens") or 0 for r in rows)
start, end, cpu0, cpu1, steal0, steal1 = map(float, sys.argv[2:])
cpu = cpu1 - cpu0
print(tokens, end - start, len(rows), f"{cpu:.1f}", f"{1000 * cpu / max(tokens, 1):.1f}",
      f"{steal1 - steal0:.1f}")
EOF
}

results="$work/results.txt"
for round in $(seq "$ROUNDS"); do
    for level in $LEVELS; do
        dir="$work/r$round-$level"
        mkdir -p "$dir"
        start_server "$dir"
        read -r tokens seconds rows server_cpu ms_per_token steal < <(run_level "$level" "$dir")
        stop_server
        read -r busy full < <(slot_use "$dir/llama-server.log")
        echo "$round $level $tokens $seconds $rows" >>"$results"
        printf 'round %s concurrency %-4s %6s tokens %7.1f s %s prompts; slots busy %s on average, all busy %s of the time; llama-server %s CPU s (%s ms per output token), VM steal %s s\n' \
            "$round" "$level" "$tokens" "$seconds" "$rows" "$busy" "$full" "$server_cpu" \
            "$ms_per_token" "$steal" >&2
        grep -h "concurrency" "$dir/gen.log" | sed 's/^/    /' >&2 || true
    done
done

python3 - "$results" <<'EOF'
import statistics, sys
from collections import defaultdict
runs = defaultdict(dict)
tokens = {}
for line in open(sys.argv[1]):
    rnd, level, toks, seconds, rows = line.split()
    runs[int(rnd)][level] = float(seconds)
    tokens[level] = int(toks)
levels = list(runs[min(runs)])
fixed = [l for l in levels if l != "auto"]

def share(times):
    if "auto" not in times or not fixed:
        return None, None
    best = min(fixed, key=lambda l: times[l])
    return best, times[best] / times["auto"]

def row(name, times):
    best, ratio = share(times)
    cells = " | ".join(f"{times[l]:.1f}" for l in levels)
    tail = f"c={best} | {ratio:.3f}" if ratio is not None else " | "
    print(f"| {name} | {cells} | {tail} |")
    return ratio

print("Makespan (s) per level; auto / best fixed is the best fixed makespan over auto's.")
print()
print("| round | " + " | ".join(f"c={l}" for l in levels) + " | best fixed | auto / best fixed |")
print("|---|" + "---:|" * len(levels) + "---|---:|")
shares = [r for r in (row(rnd, runs[rnd]) for rnd in sorted(runs)) if r is not None]
if len(runs) > 1:
    row("median", {l: statistics.median(runs[r][l] for r in runs) for l in levels})
    if shares:
        print()
        print(f"Median of the rounds' auto / best fixed: {statistics.median(shares):.3f} "
              f"(rounds {min(shares):.3f}-{max(shares):.3f}).")
print()
print("Output tokens per level: " + ", ".join(f"c={l} {tokens[l]}" for l in levels) + ".")
EOF
