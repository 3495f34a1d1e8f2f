"""Make `tests.fakes` importable when pytest runs as `.venv/bin/pytest` (no cwd on sys.path)."""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
