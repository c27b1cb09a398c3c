"""The Python peer of `gen prep` for the benchmark: SpecForge-style preparation with PyPI
`datasets` (load_dataset("parquet") -> map(normalize) -> filter -> dedup -> seeded sample ->
to_json), applying the same rules as gen-sources for a ShareGPT-schema file: human/gpt roles,
leading gpt turns dropped, empty turns skipped, every user turn kept (`turns = "all"`).

usage: python_peer.py FILE LIMIT OUT_JSONL CACHE_DIR
"""

import json
import resource
import sys
import time

from datasets import load_dataset

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
         "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "system": "system"}


def normalize(row):
    users = []
    for turn in row["conversations"] or []:
        role = ROLES.get((turn.get("from") or "").lower())
        text = turn.get("value") or ""
        if role == "user" and text.strip():
            users.append({"role": "user", "content": text})
    return {"messages": users, "keep": bool(users)}


def main():
    path, limit, out, cache = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    started = time.time()
    ds = load_dataset("parquet", data_files=path, split="train", cache_dir=cache)
    ds = ds.map(normalize, remove_columns=ds.column_names)
    ds = ds.filter(lambda r: r["keep"])
    seen = set()
    keep = []
    for i, messages in enumerate(ds["messages"]):
        key = json.dumps(messages, ensure_ascii=False)
        if key not in seen:
            seen.add(key)
            keep.append(i)
    ds = ds.select(keep)
    ds = ds.shuffle(seed=0).select(range(min(limit, len(ds))))
    ds.remove_columns(["keep"]).to_json(out)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"mode": "python", "rows": len(keep), "kept": len(ds),
                      "seconds": round(time.time() - started, 2), "peak_rss_mb": round(peak, 1)}))


if __name__ == "__main__":
    main()
