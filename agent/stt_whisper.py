"""Whisper tiny.en (interim version, to be replaced by the streaming adapter)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

whisper_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="whisper")


class WhisperSTT:
    def __init__(self, model_dir: Path | None = None, *, cpu_threads: int = 2) -> None:
        self._dir = model_dir
        self._threads = cpu_threads
        self._model = None

    def load(self) -> None:
        from faster_whisper import WhisperModel

        from agent.models import whisper_model_dir

        self._model = WhisperModel(str(self._dir or whisper_model_dir()), device="cpu",
                                   compute_type="int8", cpu_threads=self._threads)

    def warmup(self) -> None:
        whisper_executor.submit(self._decode, np.zeros(16000, np.int16)).result()

    async def transcribe(self, pcm: np.ndarray) -> str:
        return await asyncio.get_running_loop().run_in_executor(whisper_executor, self._decode, pcm)

    def _decode(self, pcm: np.ndarray) -> str:
        import ctranslate2

        audio = pcm.astype(np.float32) / 32768
        m = self._model
        f = m.feature_extractor(np.concatenate([audio, np.zeros(16000, np.float32)]))
        enc = m.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(f[None])))
        secs = len(audio) / 16000
        res = m.model.generate(enc, [[50257, 50362]], beam_size=1, max_length=int(10 + secs * 6),
                               repetition_penalty=1.1, no_repeat_ngram_size=4)
        return m.hf_tokenizer.decode(res[0].sequences_ids[0]).strip()
