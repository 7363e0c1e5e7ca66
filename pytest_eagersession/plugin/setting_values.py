"""How a setting's value is read, from the command line, an ini file or a marker: one parser
a kind of value, each raising ``SettingsError`` with a message that names what it expected.

No pytest here; ``settings`` puts each parser in the table of options.
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Any

from pytest_eagersession.base.sizes import parse_size
from pytest_eagersession.base.strategies import ResourceCleanupStrategy
from pytest_eagersession.reports.peaks import parse_percent


class SettingsError(ValueError):
    """A setting with a bad value; the message names the valid choices."""


def parse_strategy(value: Any, where: str) -> ResourceCleanupStrategy:
    """A strategy from its name (any case, ``-`` or ``_``) or the enum member."""
    try:
        return ResourceCleanupStrategy.parse(value)
    except ValueError:
        raise SettingsError(
            f"{where}: unknown strategy {value!r}; choose one of "
            f"{ResourceCleanupStrategy.choices()}"
        ) from None


def parse_bool(value: Any, where: str) -> bool:
    """A boolean from an ini-style word."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{where}: expected true or false, got {value!r}")


def parse_count(value: Any, where: str) -> int:
    """A non-negative integer."""
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError):
        count = -1
    if count < 0 or isinstance(value, bool):
        raise SettingsError(f"{where}: expected a whole number of 0 or more, got {value!r}")
    return count


def parse_runs(value: Any, where: str) -> int:
    """A whole number of runs, 1 or more."""
    count = parse_count(value, where)
    if count < 1:
        raise SettingsError(f"{where}: expected a whole number of 1 or more, got {value!r}")
    return count


def parse_seconds(value: Any, where: str) -> float:
    """A positive, finite number of seconds."""
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        seconds = math.nan
    if isinstance(value, bool) or not (0 < seconds < math.inf):
        raise SettingsError(f"{where}: expected a number of seconds above 0, got {value!r}")
    return seconds


def parse_bytes(value: Any, where: str) -> int:
    """A size in bytes: an int, or a number and a unit such as ``"64 MiB"``."""
    try:
        return parse_size(value)
    except ValueError as error:
        raise SettingsError(f"{where}: {error}") from None


def parse_increase(value: Any, where: str) -> float:
    """A percentage of 0 or more (``10``, ``12.5``, ``10%``)."""
    try:
        return parse_percent(value)
    except ValueError as error:
        hint = ""
        if isinstance(value, str) and os.path.exists(value.split("::")[0]):
            hint = (
                "; a path right after the flag is read as its percentage: write "
                "--eagersession-fail-on-increase=10, or put the flag after the paths"
            )
        raise SettingsError(f"{where}: {error}{hint}") from None


def parse_file_path(value: Any, where: str) -> str:
    """A path where a file can be written: its folder exists or can be made there."""
    path = _path(value, where, "a file path")
    if os.path.isdir(path):
        raise SettingsError(f"{where}: expected a file path, got {path!r}, which is a folder")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise SettingsError(f"{where}: expected a file path that can be written, got {path!r}")
    _check_folder(os.path.dirname(os.path.abspath(path)), path, where, "a file path")
    return path


def parse_picture_path(value: Any, where: str) -> str:
    """A file path ending in ``.svg`` (plain SVG) or ``.png`` (drawn with matplotlib, which must
    be installed) where a file can be written."""
    path = parse_file_path(value, where)
    extension = os.path.splitext(path)[1].lower()
    if extension not in (".svg", ".png"):
        raise SettingsError(
            f"{where}: expected a path ending in .svg or .png (the picture's format), got {path!r}"
        )
    if extension == ".png" and importlib.util.find_spec("matplotlib") is None:
        raise SettingsError(
            f"{where}: a .png picture is drawn with matplotlib, which is not installed here "
            "(pip install 'pytest-eagersession[plot]'); a .svg one needs nothing"
        )
    return path


def parse_folder_path(value: Any, where: str) -> str:
    """A path where files can be written: a folder that exists or can be made there."""
    path = _path(value, where, "a folder path")
    _check_folder(os.path.abspath(path), path, where, "a folder path")
    return path


def _path(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{where}: expected {what}, got {value!r}")
    return value


def _check_folder(folder: str, path: str, where: str, what: str) -> None:
    """Raise unless ``folder`` is a writable folder, or the nearest existing one above it is."""
    try:
        existing = folder
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        problem = None
        if not os.path.isdir(existing):
            problem = f"{existing} is not a folder"
        elif not os.access(existing, os.W_OK | os.X_OK):
            problem = f"the folder {existing} is not writable"
    except (OSError, ValueError) as error:  # a NUL in the path, a name too long
        problem = str(error)
    if problem is not None:
        raise SettingsError(
            f"{where}: expected {what} that can be written, got {path!r}: {problem}"
        )
