"""The base of the tests' STT stream doubles (agent.engines.STTStream)."""

from __future__ import annotations


class STTStreamDouble:
    """`finalize` is a `flush` then a `discard`, as the real streams behave: the utterance's
    transcript, and the stream reset for the next one."""

    async def flush(self) -> str:
        raise NotImplementedError

    def discard(self) -> None:
        raise NotImplementedError

    async def finalize(self) -> str:
        text = await self.flush()
        self.discard()
        return text
