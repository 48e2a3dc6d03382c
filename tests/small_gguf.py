"""A tiny GGUF for tests of the model preparation: one tensor of each kind the shipped Qwen has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QType
from gguf import GGUFWriter, quants


def write_small_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """A tiny qwen2-shaped GGUF with one tensor of each kind the shipped file has; returns
    each tensor's float weights."""
    rng = np.random.default_rng(seed)
    weights = {
        "token_embd.weight": rng.standard_normal((16, 64)).astype(np.float32),
        "blk.0.ffn_up.weight": rng.standard_normal((8, 64)).astype(np.float32),
        "blk.0.attn_v.weight": rng.standard_normal((8, 64)).astype(np.float32),
        "blk.0.attn_norm.weight": rng.standard_normal(64).astype(np.float32),
        "blk.0.ffn_down.weight": rng.standard_normal((4, 256)).astype(np.float32),
    }
    types = {
        "token_embd.weight": QType.Q5_0,
        "blk.0.ffn_up.weight": QType.Q5_0,
        "blk.0.attn_v.weight": QType.Q8_0,
        "blk.0.attn_norm.weight": QType.F32,
        "blk.0.ffn_down.weight": QType.Q4_1,  # the shipped Q6_K/Q4_K: no quantizer here
    }
    writer = GGUFWriter(path, "qwen2")
    writer.add_context_length(32)
    writer.add_file_type(15)
    writer.add_token_list(["a", "b", "c"])
    for name, w in weights.items():
        if types[name] == QType.F32:
            writer.add_tensor(name, w)
        else:
            data = quants.quantize(w, types[name])
            writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=types[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights
