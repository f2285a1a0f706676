"""The floor a user could write by hand: litellm.acompletion + asyncio.Semaphore, no plugin, no store.

Usage: python benchmarks/bare_client.py API_BASE CONCURRENCY FILE.csv [FILE.csv ...]
Prints the number of replies and the seconds spent after imports.
"""

from __future__ import annotations

import asyncio
import csv
import os
import sys
import time


async def main(api_base: str, concurrency: int, files: list[str]) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    prompts = []
    for name in files:
        with open(name, encoding="utf-8", newline="") as fh:
            prompts += [row["prompt"] for row in csv.DictReader(fh)]
    semaphore = asyncio.Semaphore(concurrency)

    async def one(prompt: str) -> str:
        async with semaphore:
            response = await litellm.acompletion(
                model="openai/orbench-mock", api_base=api_base, api_key="sk-bench",
                messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=1000, num_retries=3,
            )
            return str(response.choices[0].message.content)

    start = time.perf_counter()
    replies = await asyncio.gather(*(one(p) for p in prompts))
    print(f"{len(replies)} {time.perf_counter() - start:.3f}")
    await litellm.close_litellm_async_clients()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3:]))
