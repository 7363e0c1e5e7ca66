"""The tests after which memory stayed above its level before them, from the run's entries.

Each test's entry of the JSON report carries its ``retained`` figures (``process_memory``):
how far resident memory stood, after its teardown, above where it stood before its setup, the
part of that the C allocator merely holds free, and the part its reported leaks explain. The
run's table lists the tests that kept the most in use; what is left once the leaks are taken
out is what nothing the plugin sees explains (NumPy arrays, a native cache, an allocator that
grew).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MIB = 1 << 20
#: Memory that stayed after a test and is still not listed: a page of the interpreter's
#: caches here and there moves resident memory by this much after any test.
RETAINED_FLOOR = MIB


def with_leaks(figures: Mapping[str, Any], leaks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``figures`` (``Retained.to_json()``) with the bytes the test's leaks explain, and the
    rest of what stayed in use."""
    leaked = sum(int(leak.get("nbytes") or 0) for leak in leaks)
    in_use = int(figures["in_use_bytes"])
    return {**figures, "leaked_bytes": leaked, "unexplained_bytes": max(0, in_use - leaked)}


def kept_in_use(figures: Mapping[str, Any]) -> int:
    """What a test kept in use after it: in RAM, and on each GPU that grew."""
    gpus = figures.get("gpu_bytes") or {}
    return int(figures["in_use_bytes"]) + sum(max(0, int(grown)) for grown in gpus.values())


def kept_text(figures: Mapping[str, Any]) -> str:
    """What :func:`kept_in_use` counts, in words: ``+2.0 MiB``, and each GPU that grew
    (``+2.0 MiB, GPU:0 +64.0 MiB``)."""
    gpus = figures.get("gpu_bytes") or {}
    grown = [f"{name} +{mib_text(int(nbytes))}" for name, nbytes in gpus.items() if nbytes > 0]
    return ", ".join([f"+{mib_text(int(figures['in_use_bytes']))}", *grown])


def most_retained(entries: Iterable[Mapping[str, Any]], count: int) -> list[Mapping[str, Any]]:
    """The ``count`` entries that kept the most memory in use after them, in RAM and on GPUs
    (none that kept less than ``RETAINED_FLOOR``), the most first."""
    kept = [
        entry
        for entry in entries
        if isinstance(entry.get("retained"), Mapping)
        and kept_in_use(entry["retained"]) >= RETAINED_FLOOR
    ]
    kept.sort(key=lambda entry: (-kept_in_use(entry["retained"]), entry["nodeid"]))
    return kept[:count]


def table_lines(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """The table of ``most_retained``'s entries, in MiB, each with its xdist worker if any."""
    rows = list(entries)
    xdist = any(entry.get("worker", "main") != "main" for entry in rows)
    header = f"{'in use':>10} {'leaks':>10} {'other':>10} {'freed, kept':>11} {'GPU':>10}  test"
    lines = [header]
    for entry in rows:
        figures = entry["retained"]
        gpu = sum((figures.get("gpu_bytes") or {}).values())
        worker = f" [{entry.get('worker')}]" if xdist else ""
        lines.append(
            f"{mib_text(figures['in_use_bytes']):>10} "
            f"{mib_text(figures.get('leaked_bytes', 0)):>10} "
            f"{mib_text(figures.get('unexplained_bytes', 0)):>10} "
            f"{mib_text(max(0, figures['allocator_free_bytes'])):>11} "
            f"{mib_text(gpu) if figures.get('gpu_bytes') else '-':>10}  {entry['nodeid']}{worker}"
        )
    return lines


def mib_text(value: int) -> str:
    """``value`` bytes in MiB, as the table and pytest-html's column show them."""
    return f"{value / MIB:.1f} MiB"
