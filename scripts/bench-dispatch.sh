#!/usr/bin/env bash
# Dispatcher overhead (issue 5, Performance 1): `gen run` vs a Python asyncio + `openai` client
# of the SpecForge/speculators kind, side by side against the same instant fake server
# (`instant-openai`, tests/src/bin/instant-openai.rs), with N prompts queued.
#
#   scripts/bench-dispatch.sh                 # N=1000000 for gen, N_PY=100000 for Python
#   N=200000 N_PY=50000 CONCURRENCY=128 scripts/bench-dispatch.sh
#
# Env: DIR (work dir, default /tmp/gen-bench-dispatch; the prompts, run directory and outputs
# go there: ~1.3 GB at N=1M), N, N_PY (the Python peer's prompts, the first N_PY of the same
# file; it is ~10x slower, so it gets fewer and the comparison is per request), CONCURRENCY
# (both clients, default 128), SERVER_THREADS (the fake server's tokio workers, default 1),
# SERVER_ARGS (e.g. `--harness`: the test harness's fake server instead of the lean one),
# PYTHON (a Python 3 to build the venv from), GEN (a prebuilt `gen` to measure instead of
# this tree's, e.g. an older commit's), TOKEN_IDS=1 (`token-ids = true`: the fake server then
# sends token ids as vLLM does, and gen stores them), SAMPLES (`samples = k`: k answers per
# prompt, so N × k requests; default 1). N_PY=0 skips the Python peer. The peer's venv (PyPI
# `openai`) is created under DIR on first use. KEEP=1 keeps the run directory and outputs.
#
# What is measured:
# - gen: `gen prep` prepares the source first (not timed in the rate), then `gen run` sends
#   every prompt. Rate = completions / the time between the source's `generating` and `done`
#   events in events.jsonl (excludes start-up, the done-set rebuild and the counting pass;
#   the whole process's wall time is shown too). CPU and peak RSS are `gen run`'s own, from
#   /usr/bin/time.
# - Python: rate = completions / the time from its first request to its last answer (reading
#   the prompts excluded); CPU and peak RSS from /usr/bin/time.
# - The fake server's CPU time during each client's run (from /proc), to show it was not the
#   bottleneck.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=${DIR:-/tmp/gen-bench-dispatch}
count=${N:-1000000}
count_py=${N_PY:-100000}
concurrency=${CONCURRENCY:-128}
server_threads=${SERVER_THREADS:-1}
python=${PYTHON:-python3}
target=${CARGO_TARGET_DIR:-target}
token_ids=false
samples=${SAMPLES:-1}
[[ -z ${TOKEN_IDS:-} || ${TOKEN_IDS} == 0 ]] || token_ids=true

cargo build --release -p gen-pipeline -p gen-tests --bin gen --bin instant-openai
gen=${GEN:-$target/release/gen}
server_bin="$target/release/instant-openai"

mkdir -p "$dir"
if [[ ! -x $dir/venv/bin/python ]]; then
    "$python" -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet openai
fi
prompts="$dir/prompts-$count.jsonl"
if [[ ! -f $prompts ]]; then
    "$python" scripts/bench-dispatch/make_prompts.py "$count" "$prompts.partial"
    mv "$prompts.partial" "$prompts"
fi
prompts_py="$dir/prompts-py-$count_py.jsonl"
head -n "$count_py" "$prompts" > "$prompts_py"

# Removed first: the check below must not read the last run's URL before the redirect truncates it.
rm -f "$dir/server.url"
# shellcheck disable=SC2086 # SERVER_ARGS: extra words, e.g. --harness
"$server_bin" --threads "$server_threads" ${SERVER_ARGS:-} > "$dir/server.url" &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -s $dir/server.url ]] && break; sleep 0.1; done
url=$(head -n 1 "$dir/server.url")

# CPU seconds (user + sys) of a process so far.
cpu_of() {
    awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
}
# A field of /usr/bin/time -v's report.
field() { grep -F "$1" "$2" | sed 's/.*: //'; }
seconds_of() { # h:mm:ss or m:ss.xx -> seconds
    awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.2f", s }' <<<"$1"
}

run="$dir/run"
rm -rf "$run" "$dir/gen.toml"
cat > "$dir/gen.toml" <<EOF
[run]
dir = "run"

[server]
url = "$url"

[generation]
max-tokens = 64
temperature = 0.6
concurrency = $concurrency
token-ids = $token_ids
samples = $samples

[[source]]
name = "bench"
path = "$prompts"
id-field = "id"
limit = $count
EOF

echo "== gen prep: $count prompts"
/usr/bin/time -v -o "$dir/prep.time" "$gen" prep "$dir/gen.toml" --source bench --run-dir "$run" > "$dir/prep.log" 2>&1
echo "   $(seconds_of "$(field 'Elapsed (wall' "$dir/prep.time")") s"

echo "== gen run: $count prompts queued ($samples answers each), concurrency $concurrency, server $url"
server_before=$(cpu_of "$server_pid")
/usr/bin/time -v -o "$dir/gen.time" "$gen" run "$dir/gen.toml" --run-dir "$run" > "$dir/gen.log" 2>&1 || {
    tail -n 20 "$dir/gen.log"
    exit 1
}
server_gen=$(awk -v a="$server_before" -v b="$(cpu_of "$server_pid")" 'BEGIN { printf "%.2f", b - a }')
read -r gen_secs gen_done < <("$python" - "$run" <<'EOF'
import json, sys
start = end = None
for line in open(f"{sys.argv[1]}/events.jsonl"):
    e = json.loads(line)
    if e["event"] == "source_phase" and e.get("source") == "bench":
        if e["detail"].startswith("generating"):
            start = e["unix_ms"]
        elif e["detail"].startswith("done"):
            end = e["unix_ms"]
status = json.load(open(f"{sys.argv[1]}/status.json"))
done = sum(s["done"] for s in status["sources"])
print((end - start) / 1000, done)
EOF
)
gen_wall=$(seconds_of "$(field 'Elapsed (wall' "$dir/gen.time")")
gen_cpu=$(awk -v u="$(field 'User time' "$dir/gen.time")" -v s="$(field 'System time' "$dir/gen.time")" 'BEGIN { printf "%.2f", u + s }')
gen_rss=$(( $(field 'Maximum resident set size' "$dir/gen.time") / 1024 ))

if [[ $count_py == 0 ]]; then
    echo "gen run: $gen_done completions in $gen_secs s of generation, $gen_wall s wall, $gen_cpu s CPU, peak RSS $gen_rss MB, fake server CPU $server_gen s"
    [[ -n ${KEEP:-} ]] || rm -rf "$run"
    exit 0
fi
echo "== Python asyncio + openai: $count_py prompts, concurrency $concurrency"
server_before=$(cpu_of "$server_pid")
/usr/bin/time -v -o "$dir/py.time" "$dir/venv/bin/python" scripts/bench-dispatch/python_peer.py \
    "$url" instant-model "$prompts_py" "$dir/py-out.jsonl" "$concurrency" > "$dir/py.json" 2> "$dir/py.log"
server_py=$(awk -v a="$server_before" -v b="$(cpu_of "$server_pid")" 'BEGIN { printf "%.2f", b - a }')
read -r py_secs py_done < <("$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["seconds"], r["completed"])' "$dir/py.json")
py_wall=$(seconds_of "$(field 'Elapsed (wall' "$dir/py.time")")
py_cpu=$(awk -v u="$(field 'User time' "$dir/py.time")" -v s="$(field 'System time' "$dir/py.time")" 'BEGIN { printf "%.2f", u + s }')
py_rss=$(( $(field 'Maximum resident set size' "$dir/py.time") / 1024 ))

"$python" - "$gen_done" "$gen_secs" "$gen_wall" "$gen_cpu" "$gen_rss" "$server_gen" \
    "$py_done" "$py_secs" "$py_wall" "$py_cpu" "$py_rss" "$server_py" "$concurrency" <<'EOF'
import sys
a = sys.argv[1:]
gen = dict(done=int(a[0]), secs=float(a[1]), wall=float(a[2]), cpu=float(a[3]), rss=int(a[4]), server=float(a[5]))
py = dict(done=int(a[6]), secs=float(a[7]), wall=float(a[8]), cpu=float(a[9]), rss=int(a[10]), server=float(a[11]))
for r in (gen, py):
    r["rate"] = r["done"] / r["secs"]
    r["cpu_us"] = r["cpu"] / r["done"] * 1e6
print(f"\nconcurrency {a[12]}")
print("| client | completed | generation time | req/s | process wall | CPU (user+sys) | CPU per request | peak RSS | fake server CPU |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, r in (("gen run", gen), ("Python asyncio + openai", py)):
    print(f"| {name} | {r['done']} | {r['secs']:.1f} s | {r['rate']:.0f} | {r['wall']:.1f} s | {r['cpu']:.1f} s | {r['cpu_us']:.0f} µs | {r['rss']} MB | {r['server']:.1f} s |")
print(f"\nratio gen/Python: {gen['rate'] / py['rate']:.1f}x req/s, {py['cpu_us'] / gen['cpu_us']:.1f}x less CPU per request")
print(f"targets: >=20k req/s: {'met' if gen['rate'] >= 20000 else 'NOT met'} ({gen['rate']:.0f}); "
      f">=10x Python: {'met' if gen['rate'] >= 10 * py['rate'] else 'NOT met'}; "
      f"<=100 MB RSS with {gen['done']} queued: {'met' if gen['rss'] <= 100 else 'NOT met'} ({gen['rss']} MB)")
EOF

if [[ -z ${KEEP:-} ]]; then
    rm -rf "$run" "$dir/py-out.jsonl" "$prompts_py"
fi
