#!/usr/bin/env bash
# Storage per token-id record (issue 26): what `token-ids = true` adds to
# completions.jsonl.zst, per token, compressed as gen writes it. Tokenizes this repository's
# English docs with the real llama-server and SmolLM2 (scripts/install-llama-server.sh,
# cached) and runs scripts/bench-token-ids/storage.py against it. Dispatcher throughput with
# token ids on and off is scripts/bench-dispatch.sh with TOKEN_IDS=1.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/install-llama-server.sh)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
"$LLAMA_SERVER_BIN" -m "$GEN_TEST_MODEL" --host 127.0.0.1 --port "$port" -c 512 > "$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 0.2
done
python3 scripts/bench-token-ids/storage.py "http://127.0.0.1:$port" \
    README.md ARCHITECTURE.md RELIABILITY.md BENCHMARKS.md docs/*.md
