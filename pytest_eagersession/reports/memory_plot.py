"""The run's memory curve, as a plain SVG picture: no plotting library to install or import.

One point per test, in the order the tests ran: the process's resident memory after the test,
the TensorFlow bytes its reported leaks added up to so far, and each GPU's memory in use. Under
xdist each worker is a process of its own, with a curve of its own. The tests after which the
most memory stayed in use are marked and named: the steps of the staircase that a suite
running out of memory draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pytest_eagersession.reports.retained_memory import MIB, most_retained

WIDTH, HEIGHT = 960, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 50
#: Steps named on the picture: the tests that kept the most memory in use.
STEPS_NAMED = 5
#: One colour a curve, in turn.
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def curves_of(entries: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Each curve's points, ``(run order, MiB)``, by its name, from the tests' entries."""
    curves: dict[str, list[tuple[int, float]]] = {}
    workers = sorted({str(entry.get("worker")) for entry in entries if "retained" in entry})
    for worker in workers:
        mine = [e for e in entries if "retained" in e and str(e.get("worker")) == worker]
        mine.sort(key=lambda entry: int(entry.get("run_order", 0)))
        prefix = f"{worker}: " if len(workers) > 1 else ""
        leaked = 0
        for entry in mine:
            figures, order = entry["retained"], int(entry.get("run_order", 0))
            curves.setdefault(f"{prefix}resident", []).append(
                (order, figures["resident_after_bytes"] / MIB)
            )
            leaked += int(figures.get("leaked_bytes", 0))
            curves.setdefault(f"{prefix}leaked TensorFlow bytes", []).append((order, leaked / MIB))
            for device, in_use in sorted((figures.get("gpu_after_bytes") or {}).items()):
                curves.setdefault(f"{prefix}{device} in use", []).append((order, in_use / MIB))
    return curves


def svg(entries: Sequence[Mapping[str, Any]], title: str = "memory after each test") -> str:
    """The picture of the tests' ``entries`` (JSON report entries with ``retained`` figures)."""
    curves = curves_of(entries)
    points = [point for curve in curves.values() for point in curve]
    last = max((order for order, _ in points), default=0) or 1
    top = max((mib for _, mib in points), default=0.0) or 1.0

    def x(order: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * order / last

    def y(mib: float) -> float:
        return HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * mib / top

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="20" font-size="14">{escape(title)}</text>',
        _axes(x, y, last, top),
    ]
    for index, (name, curve) in enumerate(curves.items()):
        colour = COLOURS[index % len(COLOURS)]
        line = " ".join(f"{x(order):.1f},{y(mib):.1f}" for order, mib in curve)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{line}"/>'
        )
        legend_y = TOP + 14 * index
        parts.append(
            f'<text x="{WIDTH - RIGHT - 4}" y="{legend_y}" text-anchor="end" fill="{colour}">'
            f"{escape(name)}</text>"
        )
    for entry in most_retained(entries, STEPS_NAMED):
        figures = entry["retained"]
        px, py = x(int(entry.get("run_order", 0))), y(figures["resident_after_bytes"] / MIB)
        label = f"{entry['nodeid']} (+{figures['in_use_bytes'] / MIB:.1f} MiB)"
        parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="black"/>')
        parts.append(f'<text x="{px + 6:.1f}" y="{py - 6:.1f}">{escape(label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _axes(x: Any, y: Any, last: int, top: float) -> str:
    """The two axes, five ticks on each, and their names."""
    lines = [
        f'<line x1="{LEFT}" y1="{y(0):.1f}" x2="{x(last):.1f}" y2="{y(0):.1f}" stroke="black"/>',
        f'<line x1="{LEFT}" y1="{y(0):.1f}" x2="{LEFT}" y2="{y(top):.1f}" stroke="black"/>',
    ]
    for tick in range(5):
        order, mib = last * tick / 4, top * tick / 4
        lines.append(
            f'<text x="{x(order):.1f}" y="{y(0) + 16:.1f}" text-anchor="middle">{order:.0f}</text>'
        )
        lines.append(
            f'<text x="{LEFT - 6}" y="{y(mib) + 4:.1f}" text-anchor="end">{mib:.0f}</text>'
        )
    lines.append(
        f'<text x="{(LEFT + x(last)) / 2:.1f}" y="{HEIGHT - 12}" text-anchor="middle">'
        "tests, in the order they ran</text>"
    )
    lines.append(
        f'<text x="16" y="{(TOP + y(0)) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(TOP + y(0)) / 2:.1f})">MiB</text>'
    )
    return "\n".join(lines)
