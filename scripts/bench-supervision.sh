#!/usr/bin/env bash
# Supervision budgets of issue 4: a verdict within 1 s of a worker's exit, and supervision
# (RSS sampling every 500 ms, stall watchdog, log capture, kernel-log follower) under 1% of a
# core per worker. Runs `gen run` (release) on WORKERS custom workers that each sleep SECS
# seconds and then fail with a traceback, against a static stand-in for a server (python's
# http.server serving `/health` and `/v1/models` files). Prints gen's own CPU per worker and
# the verdict latencies read from worker.json.
set -euo pipefail
cd "$(dirname "$0")/.."
WORKERS="${WORKERS:-4}"
SECS="${SECS:-30}"

cargo build --release --locked -p gen-pipeline >&2
gen="$PWD/target/release/gen"
work="$(mktemp -d)"
trap 'kill "$server_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

mkdir -p "$work/www/v1"
echo '{"status":"ok"}' > "$work/www/health"
echo '{"object":"list","data":[{"id":"stand-in"}]}' > "$work/www/v1/models"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$work/www" >/dev/null 2>&1 &
server_pid=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done

{
  printf '[run]\nmax-parallel-prep = %s\n[server]\nurl = "http://127.0.0.1:%s"\n[generation]\nmax-tokens = 8\nconcurrency = 1\n' "$WORKERS" "$port"
  for i in $(seq "$WORKERS"); do
    printf '[[source]]\nname = "w%s"\ncommand = ["python3", "-c", "import time; time.sleep(%s); raise RuntimeError(\\"done sleeping\\")"]\n' "$i" "$SECS"
  done
} > "$work/cfg.toml"

# The same python processes alone, to subtract their own CPU.
/usr/bin/time -o "$work/time-python" -f "%U %S" bash -c "for i in \$(seq $WORKERS); do python3 -c 'import time; time.sleep(0.01); raise RuntimeError(1)' 2>/dev/null & done; wait" || true
python_cpu=$(tail -n 1 "$work/time-python" | awk '{print $1+$2}')
/usr/bin/time -o "$work/time" -f "%U %S %e" "$gen" run "$work/cfg.toml" >/dev/null 2>&1 || true
read -r user sys wall < <(tail -n 1 "$work/time")
gen_cpu=$(awk -v u="$user" -v s="$sys" -v p="$python_cpu" 'BEGIN { c = u + s - p; if (c < 0) c = 0; print c }')
per_worker=$(awk -v c="$gen_cpu" -v w="$wall" -v n="$WORKERS" 'BEGIN { printf "%.3f", 100 * c / (w * n) }')
latencies=$(for i in $(seq "$WORKERS"); do python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict_ms"])' "$work/runs/cfg/sources/w$i/worker.json"; done | sort -n | tr '\n' ' ')
echo "workers=$WORKERS sleep=${SECS}s wall=${wall}s gen_cpu=${gen_cpu}s (python alone ${python_cpu}s)"
echo "supervision CPU per worker: ${per_worker}% of a core (budget 1%)"
echo "verdict latency after exit (ms): ${latencies}(budget 1000)"
