"""The bundled Qwen2.5-Coder-0.5B GGUF served by llama.cpp's OpenAI-compatible HTTP server
(xllamacpp embeds it), on 127.0.0.1.

Either way one model in memory serves every session of a worker over HTTP (its slots run
concurrent requests):
- `LocalLLMServer` in the calling process. llama.cpp serves from its own native threads and
  never takes the GIL, so it does not slow the event loop.
- `LocalLLMProcess`, a child `python -m agent.adapters.llm.llama_server`: a llama.cpp crash
  or abort takes down the child, not the worker and its calls, and its memory is returned on stop.

Prompt caching: requests that share a prefix with a slot's cache skip its prefill (llama.cpp
picks the idle slot whose cache shares the longest prefix); `warm()` fills every slot with the
system prompt before the first question, and the copilot warms its own prefix (system prompt
and documents, agent.copilot.engine). The model is the shipped GGUF requantized to Q4_0 blocks
(agent.models.gguf_requant).

Threads: one to generate, two to read prompts. This llama.cpp build runs its threads with
OpenMP, which meet after every graph node. Generating a token is a small step per node, so
two threads spend it waiting on each other, and while another engine (Piper, Whisper) holds
a core they fall far behind speech; one thread still outpaces it there. Reading a prompt is a
batch of tokens per node, and it comes right after the end of speech, when the STT has
finished its decode and the TTS has nothing yet: two threads read it nearly twice as fast.
(The figures: docs/benchmarks.md, "Why the engines' defaults are what they are".)
OMP_WAIT_POLICY=PASSIVE (set below unless already set) makes a waiting thread sleep, not spin,
so a busy core slows a read back to about one thread's speed instead of stalling it.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from agent.engines import ToolSpec
from agent.ops.processes import stop_process

DEFAULT_MODEL_NAME = "qwen2.5-coder-0.5b-instruct"
# Under the stall timeout of agent.adapters.llm.openai_chat.OpenAIChatLLM (10 s).
SSE_PING_INTERVAL_S = 2


# The serving defaults, measured on 2 cores (see the module docstring): one server per worker,
# two slots, one thread to generate and two to read prompts.
DEFAULT_PARALLEL = 2
DEFAULT_CTX = 4096
DEFAULT_THREADS = 1
DEFAULT_BATCH_THREADS = 2


class _Serving:
    """How the server serves, in this process or a child: `n_parallel` slots (concurrent
    requests) with a context of `n_ctx` tokens each (the server gets `n_ctx * n_parallel`);
    `threads` generate tokens, `batch_threads` read prompts (see the module docstring)."""

    def __init__(
        self,
        *,
        n_parallel: int = DEFAULT_PARALLEL,
        n_ctx: int = DEFAULT_CTX,
        threads: int = DEFAULT_THREADS,
        batch_threads: int = DEFAULT_BATCH_THREADS,
    ) -> None:
        self.n_parallel = n_parallel
        self.n_ctx = n_ctx
        self.threads = threads
        self.batch_threads = batch_threads
        self.base_url = ""  # once it listens

    def warm(self, system_prompt: str, tools: Sequence[ToolSpec] = ()) -> None:
        warm_prompt_cache(self.base_url, system_prompt, self.n_parallel, tools)


class LocalLLMServer(_Serving):
    """llama.cpp serving the bundled GGUF (or `model_path`) in this process, on `port` (0: a
    free one); `serving` as `_Serving` takes it."""

    def __init__(self, model_path: Path | None = None, *, port: int = 0, **serving: int) -> None:
        super().__init__(**serving)
        self.model_path = model_path
        self.port = port
        self._server: Any = None

    def start(self) -> str:
        """Load the model and listen; returns the OpenAI base URL (http://127.0.0.1:PORT/v1)."""
        from agent.models import passive_openmp, qwen_gguf_path

        passive_openmp()  # before xllamacpp loads the OpenMP runtime (see the module docstring)
        import xllamacpp

        params = xllamacpp.CommonParams()
        params.model.path = str(self.model_path or qwen_gguf_path())
        params.hostnames = ["127.0.0.1"]
        params.port = self.port  # 0: any free port; listening_address tells which
        params.n_parallel = self.n_parallel
        params.n_ctx = self.n_ctx * self.n_parallel
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.batch_threads
        params.cache_prompt = True
        # The GGUF's own chat template (Jinja) renders `tools` and the tool calls and results
        # in the history; without it the server refuses a request that offers tools.
        params.use_jinja = True
        # While a long prompt is read (a copilot's documents: tens of seconds here) the
        # streaming client hears nothing but these pings, which keep its stall timeout away.
        params.sse_ping_interval = SSE_PING_INTERVAL_S
        params.endpoint_slots = True
        params.verbosity = 1  # errors only; llama.cpp logs every request at info level
        self._server = xllamacpp.Server(params)
        self.base_url = self._server.listening_address.rstrip("/") + "/v1"
        return self.base_url

    def stop(self) -> None:
        """Stop serving; the server's destructor joins its threads and frees the model."""
        self._server = None


class LocalLLMProcess(_Serving):
    """The same server in a child process (`python -m agent.adapters.llm.llama_server`)."""

    def __init__(self, **serving: int) -> None:
        super().__init__(**serving)
        self._proc: subprocess.Popen[str] | None = None

    def start(self, timeout_s: float = 120.0) -> str:
        """Spawn the child and wait until it listens; returns its OpenAI base URL."""
        from agent.models import qwen_gguf_path

        qwen_gguf_path()  # join the GGUF here, with its progress bar, before the child loads it
        command = [
            sys.executable,
            "-m",
            "agent.adapters.llm.llama_server",
            "--port",
            "0",
            "--parallel",
            str(self.n_parallel),
            "--ctx",
            str(self.n_ctx),
            "--threads",
            str(self.threads),
            "--batch-threads",
            str(self.batch_threads),
        ]
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        stdout = self._proc.stdout
        assert stdout is not None
        with ThreadPoolExecutor(max_workers=1) as reader:
            try:
                line = reader.submit(stdout.readline).result(timeout=timeout_s)
            except FutureTimeout:
                self.stop()  # closes the pipe, which ends the pending readline
                raise RuntimeError(f"local LLM did not start within {timeout_s:.0f} s") from None
        if not line:
            code = self._proc.wait()
            raise RuntimeError(f"local LLM process exited with code {code} before listening")
        self.base_url = json.loads(line)["base_url"]
        return self.base_url

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout_s`; returns the child's exit code."""
        proc, self._proc = self._proc, None
        return None if proc is None else stop_process(proc, timeout_s)


def warm_prompt_cache(
    base_url: str, system_prompt: str, n_slots: int, tools: Sequence[ToolSpec] = ()
) -> None:
    """Prefill every slot with the system prompt and the tools offered with it (the chat
    template writes them after the system prompt), one-token replies, so the first question
    of each session only pays for its own tokens."""
    for slot in range(n_slots):
        body: dict[str, Any] = {
            "model": DEFAULT_MODEL_NAME,
            "messages": [
                {"role": "system", "content": system_prompt},
                {"role": "user", "content": "Hello."},
            ],
            "max_tokens": 1,
            "id_slot": slot,  # llama.cpp: run on this slot
            "cache_prompt": True,
        }
        if tools:
            body["tools"] = [t.openai() for t in tools]
        request = urllib.request.Request(
            base_url + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agent.adapters.llm.llama_server",
        description="Serve the bundled LLM on 127.0.0.1 until SIGTERM; prints "
        '{"base_url": ...} on stdout once listening.',
    )
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--parallel", type=int, default=DEFAULT_PARALLEL, help="concurrent requests (slots)"
    )
    parser.add_argument("--ctx", type=int, default=DEFAULT_CTX, help="context per slot, tokens")
    parser.add_argument(
        "--threads", type=int, default=DEFAULT_THREADS, help="threads that generate"
    )
    parser.add_argument(
        "--batch-threads", type=int, default=DEFAULT_BATCH_THREADS, help="threads that read prompts"
    )
    args = parser.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = LocalLLMServer(
        port=args.port,
        n_parallel=args.parallel,
        n_ctx=args.ctx,
        threads=args.threads,
        batch_threads=args.batch_threads,
    )
    print(json.dumps({"base_url": server.start()}), flush=True)
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
