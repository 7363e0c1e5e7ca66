"""The Python and TensorFlow versions the package is tested on, and what to say outside them.

``./scripts/matrix`` tests every pair in these ranges; docs/compatibility.md shows its table.
"""

from __future__ import annotations

import sys

from pytest_eagersession._tf import parse_version

#: Oldest and newest tested Python (minor versions).
PYTHON_RANGE = ((3, 10), (3, 13))
#: Oldest and newest tested TensorFlow (minor releases).
TENSORFLOW_RANGE = ((2, 16), (2, 21))


def _text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def python_warning(version: tuple[int, ...] = tuple(sys.version_info[:2])) -> str | None:
    """What is not known to work on ``version``, or None inside the tested range."""
    oldest, newest = PYTHON_RANGE
    found = (version[0], version[1])
    if oldest <= found <= newest:
        return None
    tested = f"tested on Python {_text(oldest)} to {_text(newest)}"
    if found > newest:
        return (
            f"pytest-eagersession is {tested}, not {_text(found)}. Not known to work there: "
            "the cycle trigger of IN_BACKGROUND and ON_SAFE_POINTS, which hooks the "
            "collector's middle generation (Python 3.14's incremental collector has none, so "
            "cycles holding tensors may be freed late), and the survivor check, which freezes "
            "older objects with gc.freeze()"
        )
    return f"pytest-eagersession is {tested}, not {_text(found)}"


def tensorflow_warning(version_text: str) -> str | None:
    """What is not known to work with TensorFlow ``version_text``, or None when it is tested."""
    found = parse_version(version_text)
    oldest, newest = TENSORFLOW_RANGE
    if found <= newest:
        return None  # older than the oldest is refused outright (see _tf.MINIMUM_VERSION)
    return (
        f"pytest-eagersession is tested on TensorFlow {_text(oldest)} to {_text(newest)}, not "
        f"{version_text}: the private TensorFlow names it uses may have moved"
    )
