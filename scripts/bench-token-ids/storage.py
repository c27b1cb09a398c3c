"""Storage per token-id record: what `token-ids = true` adds to `completions.jsonl.zst`.

Usage: storage.py LLAMA_URL TEXT_FILE... (scripts/bench-token-ids.sh starts the server)

Builds completion records as `gen run` stores them (prompt, answer text, usage, settings)
from real English text tokenized by a real tokenizer (llama-server's `/tokenize`: SmolLM2's
49,152-token vocabulary), once without and once with `token_ids = {prompt, completion}`,
writes each as `gen` does (a zstd frame, level 3, per 64 records) with the `zstd` CLI, and
prints the compressed bytes the ids add per token. Two packings a binary format could use are
measured beside the JSON arrays `gen` stores: base64 of little-endian u32, base64 of LEB128
varints.
"""
import base64, json, subprocess, sys, urllib.request

url, files = sys.argv[1], sys.argv[2:]
text = " ".join(open(f, encoding="utf-8").read() for f in files)
words = text.split()

def tokenize(s):
    body = json.dumps({"content": s, "add_special": False, "parse_special": True}).encode()
    req = urllib.request.Request(f"{url}/tokenize", body, {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req))["tokens"]

# 64 records (one frame) take 29k words: no text repeats inside a frame of the ~33k-word docs.
PROMPT_WORDS, ANSWER_WORDS, RECORDS = 60, 400, 1024
records = []
at = 0
for i in range(RECORDS):
    if at + PROMPT_WORDS + ANSWER_WORDS > len(words):
        at = (at * 7 + 13) % (len(words) // 2)
    prompt = " ".join(words[at:at + PROMPT_WORDS]); at += PROMPT_WORDS
    answer = " ".join(words[at:at + ANSWER_WORDS]); at += ANSWER_WORDS
    p_ids = tokenize(f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")
    c_ids = tokenize(answer + "<|im_end|>")
    records.append((prompt, answer, p_ids, c_ids, i))

def varint(ids):
    out = bytearray()
    for n in ids:
        while True:
            b = n & 0x7F; n >>= 7
            out.append(b | (0x80 if n else 0))
            if not n: break
    return base64.b64encode(bytes(out)).decode()

def u32(ids):
    return base64.b64encode(b"".join(n.to_bytes(4, "little") for n in ids)).decode()

def record(prompt, answer, p_ids, c_ids, i, ids):
    r = {"id": f"bench-{i:016x}", "source": "bench", "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
         "messages": [{"role": "user", "content": prompt}], "content": answer,
         "finish_reason": "stop",
         "usage": {"prompt_tokens": len(p_ids), "completion_tokens": len(c_ids),
                   "total_tokens": len(p_ids) + len(c_ids)},
         "attempts": 1, "latency_ms": 12345, "created_unix_ms": 1796388218000 + i,
         "settings": {"max_tokens": 8192, "temperature": 0.6, "return_token_ids": True}}
    if ids:
        r["token_ids"] = ids(p_ids, c_ids)
    return json.dumps(r, ensure_ascii=False, separators=(",", ":"))

def stored(ids):
    total = 0
    for start in range(0, len(records), 64):
        frame = "".join(record(*r, ids) + "\n" for r in records[start:start + 64]).encode()
        total += len(subprocess.run(["zstd", "-3", "-c", "-q"], input=frame,
                                    capture_output=True, check=True).stdout)
    return total

tokens = sum(len(r[2]) + len(r[3]) for r in records)
base = stored(None)
print(f"{len(records)} records, {tokens} tokens ({tokens / len(records):.0f} a record), "
      f"text only: {base} bytes compressed ({base / len(records):.0f} a record)")
for name, ids in [
    ("JSON arrays (stored)", lambda p, c: {"prompt": p, "completion": c}),
    ("base64 u32 LE", lambda p, c: {"prompt": u32(p), "completion": u32(c)}),
    ("base64 varint", lambda p, c: {"prompt": varint(p), "completion": varint(c)}),
]:
    size = stored(ids)
    print(f"{name}: {size} bytes, +{size - base} ({(size - base) / tokens:.2f} bytes a token, "
          f"+{100 * (size - base) / base:.0f}% over the text-only file)")
