"""The plugin's figures in pytest-html's report, where pytest-html is installed: three columns
(the body's peak of tracked bytes, the memory that stayed after the test, its leaks) and the
leaks in each row's details, as pytest-html's own extras are.

Plain strings and dictionaries: nothing of pytest-html is imported, and without it the hooks
that call these are never called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pytest_eagersession.base.sizes import format_bytes
from pytest_eagersession.reports.retained_memory import mib_text

#: The columns, put after pytest-html's Duration.
HEADERS = ("Peak", "Stayed in use", "Leaks")
_AT = 3  # Result, Test, Duration, then ours, then Links


def requested(config: Any) -> bool:
    """Whether pytest-html writes a report in this run (``--html``): the figures are measured
    for it."""
    return bool(getattr(config.option, "htmlpath", None))


def header_cells(cells: list[str]) -> None:
    """Add the plugin's column headers to pytest-html's."""
    for offset, name in enumerate(HEADERS):
        cells.insert(_AT + offset, f'<th class="col-eagersession">{name}</th>')


def row_cells(entry: Mapping[str, Any] | None, cells: list[str]) -> None:
    """Add a test's figures (its entry of the JSON report; None: not known) to its row."""
    entry = entry or {}
    peak = entry.get("peak_bytes")
    retained = entry.get("retained") or {}
    leaks = entry.get("leaks") or []
    values = (
        format_bytes(peak) if isinstance(peak, int) else "-",
        mib_text(retained["in_use_bytes"]) if "in_use_bytes" in retained else "-",
        _leaks_cell(leaks),
    )
    for offset, value in enumerate(values):
        cells.insert(_AT + offset, f'<td class="col-eagersession">{escape(value)}</td>')


def leak_extra(lines: Sequence[str]) -> dict[str, str | None]:
    """A pytest-html extra that shows the test's leaks in its row's details."""
    text = "\n".join(f"  {number}. {line}" for number, line in enumerate(lines, start=1))
    content = f"<pre>eagersession: {len(lines)} leaked\n{escape(text)}</pre>"
    return {
        "name": "eagersession leaks",
        "format_type": "html",
        "content": content,
        "mime_type": None,
        "extension": None,
    }


def _leaks_cell(leaks: Sequence[Mapping[str, Any]]) -> str:
    if not leaks:
        return "0"
    total = sum(int(leak.get("nbytes") or 0) for leak in leaks)
    return f"{len(leaks)} ({format_bytes(total)})"
