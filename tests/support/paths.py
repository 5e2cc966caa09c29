"""Where the repository and its recorded test data are."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BAG = REPO / "tests/data/aloha_transfer_cube_10hz"  # a recorded ALOHA episode at 10 Hz
