"""The Python peer of `scripts/bench-dispatch.sh`: a generation script of the SpecForge /
speculators kind. It reads every prompt of a JSONL file ({"id", "messages"}) into memory,
starts one asyncio task per prompt behind a semaphore of CONCURRENCY, streams each chat
completion with `openai.AsyncOpenAI` (`stream_options={"include_usage": True}`), collects
content and reasoning, and appends one JSON line per answer to OUTPUT as answers come in.

Usage: python_peer.py URL MODEL PROMPTS.jsonl OUTPUT.jsonl CONCURRENCY
Prints one JSON line: {"completed", "failed", "seconds"} (seconds: from the first request to
the last answer, reading the prompts excluded).
"""

import asyncio
import json
import sys
import time

try:
    import httpx2 as httpx  # what openai 3.x is built on
except ImportError:
    import httpx
import openai
from openai import AsyncOpenAI, DefaultAsyncHttpxClient


async def generate(client, model, semaphore, prompt, out, counts):
    async with semaphore:
        try:
            stream = await client.chat.completions.create(
                model=model,
                messages=prompt["messages"],
                max_tokens=64,
                temperature=0.6,
                stream=True,
                stream_options={"include_usage": True},
            )
            content, reasoning, finish_reason, usage = [], [], None, None
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage.model_dump()
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                if delta.content:
                    content.append(delta.content)
                extra = delta.model_extra or {}
                thought = extra.get("reasoning_content") or extra.get("reasoning")
                if thought:
                    reasoning.append(thought)
                if choice.finish_reason:
                    finish_reason = choice.finish_reason
        except Exception as error:  # noqa: BLE001 - a generation script logs and moves on
            counts["failed"] += 1
            print(f"failed {prompt['id']}: {error}", file=sys.stderr)
            return
        record = {
            "id": prompt["id"],
            "messages": prompt["messages"],
            "content": "".join(content),
            "reasoning_content": "".join(reasoning),
            "finish_reason": finish_reason,
            "usage": usage,
        }
        out.write(json.dumps(record) + "\n")
        counts["completed"] += 1


async def main():
    url, model, prompts_path, output_path, concurrency = sys.argv[1:6]
    with open(prompts_path) as f:
        prompts = [json.loads(line) for line in f]
    # Keep-alive for every concurrent request (the default keeps 100), so no connection is
    # reopened at higher concurrency.
    limits = httpx.Limits(max_connections=int(concurrency), max_keepalive_connections=int(concurrency))
    client = AsyncOpenAI(
        base_url=f"{url}/v1", api_key="none", http_client=DefaultAsyncHttpxClient(limits=limits)
    )
    semaphore = asyncio.Semaphore(int(concurrency))
    counts = {"completed": 0, "failed": 0}
    with open(output_path, "w") as out:
        started = time.monotonic()
        await asyncio.gather(
            *(generate(client, model, semaphore, p, out, counts) for p in prompts)
        )
        seconds = time.monotonic() - started
    print(json.dumps({**counts, "seconds": round(seconds, 3), "openai": openai.__version__}))


if __name__ == "__main__":
    asyncio.run(main())
