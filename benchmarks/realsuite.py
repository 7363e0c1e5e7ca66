"""The real-suite gate's command line; the gate itself is the ``gate`` package beside this file.

python benchmarks/realsuite.py [--only on|off] [--suite NAME ...] [--json PATH] [-n N]
                               [--rounds N] [--side-by-side]
                               [--eagersession-OPTION=VALUE ...] [-- PYTEST_ARGS ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the gate package, beside this file

from gate.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
