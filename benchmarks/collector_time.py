"""How long the interpreter's cyclic garbage collector ran during a pytest run: a plugin.

    PYTHONPATH=benchmarks python -m pytest -p collector_time [-p no:eagersession] ...

Prints, at the end of the run, the seconds spent in collections and how many ran, whoever
started them: the interpreter's own thresholds, a library's ``gc.collect()``, or the
plugin's closes. Run it with the plugin off and on to see whether the plugin's collections
add to the interpreter's work or replace it (``docs/guarantees.md``).
"""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest

_started: list[float] = []
_spent = {"seconds": 0.0, "collections": 0}


def _timed(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started.append(time.perf_counter())
    elif _started:
        _spent["seconds"] += time.perf_counter() - _started.pop()
        _spent["collections"] += 1


def pytest_configure(config: pytest.Config) -> None:
    _started.clear()
    _spent.update(seconds=0.0, collections=0)
    gc.callbacks.append(_timed)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _timed in gc.callbacks:
        gc.callbacks.remove(_timed)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(
        f"collector_time: {_spent['seconds']:.3f} s in {_spent['collections']} collections"
    )
