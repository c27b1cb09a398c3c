"""Writes N distinct chat prompts as JSONL ({"id", "messages": [{"role": "user", ...}]}),
100-300 bytes of text each. Usage: make_prompts.py N OUTPUT.jsonl"""

import json
import sys

WORDS = (
    "explain compare summarize translate outline describe list define rewrite critique "
    "photosynthesis recursion entropy inflation gradient descent protein folding tides "
    "compilers caching consensus vaccines volcanoes bridges sorting hashing markets"
).split()

count, path = int(sys.argv[1]), sys.argv[2]
with open(path, "w") as out:
    for i in range(count):
        n = 12 + (i * 7919) % 30
        text = " ".join(WORDS[(i * 31 + k * 17 + k * k) % len(WORDS)] for k in range(n))
        row = {"id": f"p{i}", "messages": [{"role": "user", "content": f"Question {i}: {text}?"}]}
        out.write(json.dumps(row) + "\n")
