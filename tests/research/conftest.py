"""Tests of research/ (the studies and their library, study.py). research/ is not installed with the package: like
its scripts, these tests import it from the checkout."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
