"""No product module over 600 lines: a longer one holds more than one concern, and is split
along its seams (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("agent", "tts", "state_machine", "room_bridge")
MAX_LINES = 600


def test_no_product_module_is_over_600_lines() -> None:
    sizes = {
        str(path.relative_to(REPO)): len(path.read_text(encoding="utf-8").splitlines())
        for package in PRODUCT
        for path in (REPO / package).rglob("*.py")
    }
    assert len(sizes) > 100  # the packages were found
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}
