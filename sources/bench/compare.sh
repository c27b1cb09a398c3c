#!/usr/bin/env bash
# The issue-3 benchmark: a generated ShareGPT-schema Parquet file (snappy, as the Hub's), prepared
# by gen-sources (`prepare_with`, what `gen prep` runs, without writing the zstd prompts file),
# by `gen prep` itself (the worker: prompts file and manifest written) and by the Python peer
# (PyPI `datasets`), next to a bare Parquet decode (the floor).
#
# usage: sources/bench/compare.sh [WORK_DIR] [ROWS...]   (default: /tmp/gen-bench 100000 1000000)
# Needs a Python with `datasets` as $PYTHON (default: python3). Prints a Markdown table.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-/tmp/gen-bench}"
shift || true
rows=("${@:-100000 1000000}")
python="${PYTHON:-python3}"
# The peer reads a local file only; no progress bars in the table.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_DATASETS_DISABLE_PROGRESS_BARS=1
mkdir -p "$work"
(cd "$here/../.." && cargo build -q --release -p gen-sources --example prepare_bench -p gen-pipeline --bin gen)
bench="${CARGO_TARGET_DIR:-$here/../../target}/release/examples/prepare_bench"
gen="${CARGO_TARGET_DIR:-$here/../../target}/release/gen"
measure() { # name, command...: one table row from /usr/bin/time
    local name="$1"; shift
    /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$@" > /dev/null 2> "$work/stderr"
    read -r wall user sys rss < "$work/time"
    printf '| %s | %s | %s s | %s s | %s s | %.0f MB |\n' "$n" "$name" "$wall" "$user" "$sys" "$(echo "$rss / 1024" | bc -l)"
}
echo "| rows | what | wall | CPU (user) | CPU (sys) | peak RSS |"
echo "|---:|---|---:|---:|---:|---:|"
for n in ${rows[@]}; do
    file="$work/sharegpt-$n.parquet"
    [ -f "$file" ] || "$bench" generate "$file" "$n" > /dev/null
    cat "$file" > /dev/null  # page cache warm for everyone
    measure "bare Parquet decode (floor)" "$bench" decode "$file"
    measure "gen-sources prepare" "$bench" prepare "$file" 10000
    # The worker itself, also writing the zstd prompts file and manifest (no server is asked).
    printf '[server]\nurl = "http://127.0.0.1:9"\n[generation]\nmax-tokens = 16\n[[source]]\nname = "sharegpt"\npath = "%s"\nmessages-field = "conversations"\nturns = "all"\nlimit = 10000\n' "$file" > "$work/gen-prep-$n.toml"
    rm -rf "$work/gen-prep-run"
    measure "gen prep (the worker)" "$gen" prep "$work/gen-prep-$n.toml" --source sharegpt --run-dir "$work/gen-prep-run"
    rm -rf "$work/hf-cache"
    measure "Python datasets peer" "$python" "$here/python_peer.py" "$file" 10000 "$work/peer.jsonl" "$work/hf-cache"
done
