"""Where the repository is, for tests that run its commands, scripts and examples."""

from __future__ import annotations

from pathlib import Path

#: The repository root (the directory holding taskqueues/, matcher/, pilot/, scripts/, examples/).
ROOT = Path(__file__).resolve().parents[2]
