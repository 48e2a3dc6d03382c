"""Requantize the shipped Qwen GGUF's block weights to Q4_0, once, for llama.cpp's fast kernels.

The shipped file is Q4_K_M, but Qwen2.5-0.5B's rows (896 wide) do not fit K-quant super-blocks
of 256, so most of its matrices fell back to Q5_0. llama.cpp has no AVX2 repacked kernel for
Q5_0; for Q4_0 it repacks rows into 8x8 interleaved blocks at load, and both generating and
reading a prompt get faster (docs/benchmarks.md, "The bundled LLM's weights: Q4_0 blocks").

What changes: every block-quantized matrix that llama.cpp multiplies becomes Q4_0. What stays:
F32/F16 (norms, biases), Q8_0 (the output head and a few attention values: already fast, and
the output head is where 4 bits would cost the most quality), and the token embedding, which is
only looked up by row, so its type costs no time.

`RECIPE` names this recipe; a change to what this module writes must change it, so that caches
holding the old result are rebuilt.
"""

from __future__ import annotations

import sys
from pathlib import Path

RECIPE = "q4_0-blocks-v1"
KEEP_TENSORS = ("token_embd.weight",)


def requantize_q4_0(src: Path, dest: Path, *, progress: bool = False) -> dict[str, int]:
    """Write `src` to `dest` with its block weights as Q4_0; returns tensors written per type."""
    from gguf import GGMLQuantizationType as QType
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, quants
    from tqdm import tqdm

    keep_types = {QType.F32, QType.F16, QType.BF16, QType.Q8_0, QType.Q4_0}
    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(dest, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the header's own fields; the writer writes them
        value = field.contents()
        if name == "general.file_type":
            value = 2  # LLAMA_FTYPE_MOSTLY_Q4_0
        kind = field.types[0]
        sub_type = field.types[-1] if kind == GGUFValueType.ARRAY and len(field.types) > 1 else None
        writer.add_key_value(name, value, kind, sub_type=sub_type)

    counts: dict[str, int] = {}
    bar = tqdm(
        reader.tensors,
        desc=f"requantizing {src.name}",
        unit="tensor",
        disable=not progress,
        file=sys.stderr,
        leave=False,
    )
    for tensor in bar:
        # Every block type's rows are whole blocks of 32 or 256 values, so Q4_0's 32 fit them.
        if tensor.tensor_type in keep_types or tensor.name in KEEP_TENSORS:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
            kind_name = tensor.tensor_type.name
        else:
            shape = [int(d) for d in reversed(tensor.shape.tolist())]
            weights = quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)
            data = quants.quantize(weights, QType.Q4_0)
            writer.add_tensor(tensor.name, data, raw_shape=data.shape, raw_dtype=QType.Q4_0)
            kind_name = QType.Q4_0.name
        counts[kind_name] = counts.get(kind_name, 0) + 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return counts
