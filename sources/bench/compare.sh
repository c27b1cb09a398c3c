#!/usr/bin/env bash
# The preparation benchmark: a generated ShareGPT-schema Parquet file (snappy, as the Hub's),
# prepared by gen-sources (`prepare_with`, what `gen prep` runs, without writing the zstd prompts
# file), by `gen prep` itself (the worker: prompts file and manifest written) and by the Python
# peer (PyPI `datasets`), next to a bare Parquet decode (the floor); each size both sampling
# 10,000 prompts and keeping every row.
#
# usage: sources/bench/compare.sh [WORK_DIR] [ROWS...]   (default: /tmp/gen-bench 100000 1000000)
#   LIMITS="10000 all"   what to keep: a sample of N prompts, or every row ("all")
#   PEER_MAX_ROWS=N      skip the Python peer above N rows (it holds the dataset in memory:
#                        ~1.4 GB at 1M rows); default: no limit
#   KEEP_FILES=1         keep the generated Parquet files (default: each is deleted after its
#                        rows are measured, so a 10M-row file does not stay on the disk)
# Needs a Python with `datasets` as $PYTHON (default: python3). Prints a Markdown table with the
# peer's wall time and peak RSS divided by gen prep's.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-/tmp/gen-bench}"
shift || true
rows=("${@:-100000 1000000}")
limits=(${LIMITS:-10000 all})
peer_max="${PEER_MAX_ROWS:-}"
python="${PYTHON:-python3}"
# The peer reads a local file only; no progress bars in the table.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_DATASETS_DISABLE_PROGRESS_BARS=1
mkdir -p "$work"
(cd "$here/../.." && cargo build -q --release -p gen-sources --example prepare_bench -p gen-pipeline --bin gen)
bench="${CARGO_TARGET_DIR:-$here/../../target}/release/examples/prepare_bench"
gen="${CARGO_TARGET_DIR:-$here/../../target}/release/gen"
declare -A wall_of rss_of
measure() { # key, label, command...: one table row from /usr/bin/time
    local key="$1" label="$2"; shift 2
    /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$@" > /dev/null 2> "$work/stderr" \
        || { echo "failed: $label ($n rows, $limit): $(tail -3 "$work/stderr")" >&2; return 1; }
    read -r wall user sys rss < "$work/time"
    wall_of[$key]=$wall
    rss_of[$key]=$rss
    printf '| %s | %s | %s | %s s | %s s | %s s | %.0f MB |' "$n" "$limit" "$label" "$wall" "$user" "$sys" "$(echo "$rss / 1024" | bc -l)"
}
ratio() { # the peer's figure over gen prep's
    printf ' %.1f× / %.2f× |\n' "$(echo "${wall_of[peer]} / ${wall_of[gen]}" | bc -l)" "$(echo "${rss_of[peer]} / ${rss_of[gen]}" | bc -l)"
}
echo "| rows | keep | what | wall | CPU (user) | CPU (sys) | peak RSS | peer ÷ gen prep (wall / RSS) |"
echo "|---:|---|---|---:|---:|---:|---:|---|"
for n in ${rows[@]}; do
    file="$work/sharegpt-$n.parquet"
    [ -f "$file" ] || "$bench" generate "$file" "$n" > /dev/null
    cat "$file" > /dev/null  # page cache warm for everyone
    limit="-"
    measure floor "bare Parquet decode (floor)" "$bench" decode "$file"; echo " |"
    for limit in "${limits[@]}"; do
        toml_limit="$limit"; [ "$limit" = all ] && toml_limit=1000000000000
        measure lib "gen-sources prepare" "$bench" prepare "$file" "$limit"; echo " |"
        # The worker itself, also writing the zstd prompts file and manifest (no server is asked).
        printf '[server]\nurl = "http://127.0.0.1:9"\n[generation]\nmax-tokens = 16\n[[source]]\nname = "sharegpt"\npath = "%s"\nmessages-field = "conversations"\nturns = "all"\nlimit = %s\n' "$file" "$toml_limit" > "$work/gen-prep-$n.toml"
        rm -rf "$work/gen-prep-run"
        measure gen "gen prep (the worker)" "$gen" prep "$work/gen-prep-$n.toml" --source sharegpt --run-dir "$work/gen-prep-run"; echo " |"
        rm -rf "$work/gen-prep-run"
        if [ -n "$peer_max" ] && [ "$n" -gt "$peer_max" ]; then
            printf '| %s | %s | Python datasets peer | not run (PEER_MAX_ROWS=%s) | | | | |\n' "$n" "$limit" "$peer_max"
            continue
        fi
        rm -rf "$work/hf-cache"
        peer_limit="$toml_limit"
        measure peer "Python datasets peer" "$python" "$here/python_peer.py" "$file" "$peer_limit" "$work/peer.jsonl" "$work/hf-cache"
        ratio
        rm -rf "$work/hf-cache" "$work/peer.jsonl"
    done
    [ -n "${KEEP_FILES:-}" ] || rm -f "$file"
done
