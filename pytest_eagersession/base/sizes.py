"""Sizes in bytes, read from text (``64 MiB``) and written as text (``4.0 MiB``)."""

from __future__ import annotations

import math
import re

_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*")
_UNITS = {
    "b": 1,
    "kb": 1000,
    "kib": 1024,
    "mb": 1000**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "gib": 1024**3,
}
UNITS_TEXT = "B, KB, KiB, MB, MiB, GB, GiB"


def parse_size(value: object) -> int:
    """Bytes from ``64 MiB``, ``1.5GB``, ``512 KiB``, ``100`` or an int (units any case).

    KB, MB, GB are powers of 1000, KiB, MiB, GiB of 1024. Raises ``ValueError`` naming the
    accepted units for anything else.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"a size cannot be negative, got {value!r}")
        return value
    if isinstance(value, str):
        match = _SIZE.fullmatch(value)
        if match is not None:
            number, unit = match.groups()
            factor = _UNITS.get(unit.lower() if unit else "b")
            size = float(number) * factor if factor is not None else math.inf
            if math.isfinite(size):
                return round(size)
    raise ValueError(
        f"{value!r} is not a size: write a number of bytes or a number and a unit "
        f"({UNITS_TEXT}), like '64 MiB'"
    )


def format_bytes(count: int) -> str:
    """``4194304`` becomes ``4.0 MiB``."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
