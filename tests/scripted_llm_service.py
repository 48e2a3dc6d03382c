"""The scripted LLM test double as a service of the compose stack (tests/test_image_stack.py):
run from the agent image with tests/ mounted, it serves the workers of the compose network
until it is stopped.

    python -m tests.scripted_llm_service --port 8000 SCRIPT

SCRIPT is JSON: {"replies": [...], "by_text": {question: reply}, "ttft_ms": ...,
"words_per_s": ...}, ScriptedLLM's arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from agent.testing.scripted_llm import ScriptedLLM
from agent.testing.scripted_llm_server import scripted_llm_server


async def serve(port: int, script: dict) -> None:
    llm = ScriptedLLM(
        script["replies"],
        by_text=script.get("by_text"),
        ttft_ms=script.get("ttft_ms", 100.0),
        words_per_s=script.get("words_per_s", 15.0),
    )
    async with scripted_llm_server(llm, host="0.0.0.0", port=port) as url:
        print(f"scripted LLM serving {url}", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.scripted_llm_service")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("script", type=json.loads)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.script))


if __name__ == "__main__":
    main()
