"""Make the helper modules beside these tests (trainhelp_*) importable in any pytest import
mode; subprocesses get the same directory through PYTHONPATH."""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
