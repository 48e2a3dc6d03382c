"""The one-time requantization of the bundled GGUF to Q4_0 blocks (agent.models.gguf_requant)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QType
from gguf import GGUFReader, quants

from agent.models.gguf_requant import requantize_q4_0
from tests.small_gguf import write_small_gguf


def test_block_weights_become_q4_0_and_the_rest_is_copied(tmp_path: Path) -> None:
    src, dest = tmp_path / "src.gguf", tmp_path / "dest.gguf"
    weights = write_small_gguf(src)
    counts = requantize_q4_0(src, dest)
    assert counts == {"Q5_0": 1, "Q4_0": 2, "Q8_0": 1, "F32": 1}

    before, after = GGUFReader(src), GGUFReader(dest)
    kinds = {t.name: t.tensor_type for t in after.tensors}
    assert kinds["blk.0.ffn_up.weight"] == kinds["blk.0.ffn_down.weight"] == QType.Q4_0
    assert kinds["token_embd.weight"] == QType.Q5_0  # only looked up, never multiplied
    assert kinds["blk.0.attn_v.weight"] == QType.Q8_0
    for old, new in zip(before.tensors, after.tensors, strict=True):
        assert (old.name, old.shape.tolist()) == (new.name, new.shape.tolist())
        if new.tensor_type == old.tensor_type:
            assert np.array_equal(np.asarray(old.data), np.asarray(new.data))

    up = next(t for t in after.tensors if t.name == "blk.0.ffn_up.weight")
    restored = quants.dequantize(up.data, up.tensor_type).reshape(8, 64)
    # Q4_0 keeps 16 levels per 32 values: the error stays within a step of each block's scale
    assert np.abs(restored - weights["blk.0.ffn_up.weight"]).max() < 0.5
    assert np.corrcoef(restored.ravel(), weights["blk.0.ffn_up.weight"].ravel())[0, 1] > 0.98

    assert after.fields["general.file_type"].contents() == 2
    assert after.fields["tokenizer.ggml.tokens"].contents() == ["a", "b", "c"]
    assert after.fields["qwen2.context_length"].contents() == 32


def test_the_result_is_the_same_bytes_every_time(tmp_path: Path) -> None:
    src = tmp_path / "src.gguf"
    write_small_gguf(src)
    requantize_q4_0(src, tmp_path / "a.gguf")
    requantize_q4_0(src, tmp_path / "b.gguf")
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src.gguf"
    src.write_bytes(b"not a model at all" * 100)
    with pytest.raises(ValueError):
        requantize_q4_0(src, tmp_path / "dest.gguf")
