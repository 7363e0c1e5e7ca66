"""The Python and TensorFlow versions the package is tested on, and what to say outside them.

``./scripts/matrix`` tests every pair in these ranges; docs/compatibility.md shows its table.
"""

from __future__ import annotations

import sys

#: Oldest and newest tested Python (minor versions).
PYTHON_RANGE = ((3, 10), (3, 13))
#: Oldest and newest tested TensorFlow (minor releases).
TENSORFLOW_RANGE = ((2, 16), (2, 21))


def version_text(version: tuple[int, int]) -> str:
    """``(2, 21)`` becomes ``"2.21"``."""
    return f"{version[0]}.{version[1]}"


def parse_version(text: str) -> tuple[int, int]:
    """``"2.21.0rc1"`` becomes ``(2, 21)``."""
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    while len(parts) < 2:
        parts.append(0)
    return parts[0], parts[1]


def python_warning(version: tuple[int, ...] = tuple(sys.version_info[:2])) -> str | None:
    """What is not known to work on ``version``, or None inside the tested range."""
    oldest, newest = PYTHON_RANGE
    found = (version[0], version[1])
    if oldest <= found <= newest:
        return None
    tested = f"tested on Python {version_text(oldest)} to {version_text(newest)}"
    if found > newest:
        return (
            f"pytest-eagersession is {tested}, not {version_text(found)}. Not known to work there: "
            "the line each session draws with gc.freeze() between its objects and older ones, "
            "which relies on the collector keeping frozen objects out of every generation it "
            "lists and collects (Python 3.14.0 to 3.14.4 collect incrementally, with two "
            "generations; see the compatibility page)"
        )
    return f"pytest-eagersession is {tested}, not {version_text(found)}"


def tensorflow_warning(version: str) -> str | None:
    """What is not known to work with TensorFlow ``version``, or None when it is tested."""
    found = parse_version(version)
    oldest, newest = TENSORFLOW_RANGE
    if found <= newest:
        return None  # older than the oldest is refused outright (see _tf.MINIMUM_VERSION)
    return (
        f"pytest-eagersession is tested on TensorFlow {version_text(oldest)} to "
        f"{version_text(newest)}, not {version}: the private TensorFlow names it uses may "
        "have moved"
    )
