"""The run's memory curve, as a plain SVG picture (no plotting library to install or import),
or as PNG, drawn with matplotlib where the user installed it.

One point per test, in the order the tests ran: how far the process's resident memory stood
after the test above where it stood before the first (the process's own start, TensorFlow's
import among it, would flatten every step), the TensorFlow bytes its reported leaks added up
to so far, and each GPU's memory in use. Under
xdist each worker is a process of its own, with a curve of its own. The tests after which the
most memory stayed in use are marked and named: the steps of the staircase that a suite
running out of memory draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pytest_eagersession.reports.retained_memory import MIB, kept_text, most_retained

WIDTH, HEIGHT = 960, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 50
#: Steps named on the picture: the tests that kept the most memory in use.
STEPS_NAMED = 5
#: The name of the resident memory's curve (after a worker's name, under xdist).
RESIDENT_CURVE = "resident, above the first test's start"
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
        first = mine[0]["retained"]
        start = first["resident_after_bytes"] - first["resident_bytes"]
        leaked = 0
        for entry in mine:
            figures, order = entry["retained"], int(entry.get("run_order", 0))
            curves.setdefault(f"{prefix}{RESIDENT_CURVE}", []).append(
                (order, (figures["resident_after_bytes"] - start) / MIB)
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
    bottom = min(0.0, *(mib for _, mib in points))  # a run may end below its start

    def x(order: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * order / last

    def y(mib: float) -> float:
        return HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * (mib - bottom) / (top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="20" font-size="14">{escape(title)}</text>',
        _axes(x, y, last, bottom, top),
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
    for rank, order, height, label in _named_steps(entries, curves):
        px, py = x(order), y(height)
        anchor, dx = ("end", -6) if px > WIDTH / 2 else ("start", 6)
        ly = py + 14 * (rank + 1)  # below the curve, one line a step: labels do not overlap
        parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="black"/>')
        parts.append(
            f'<text x="{px + dx:.1f}" y="{ly:.1f}" text-anchor="{anchor}">{escape(label)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def draw_png(entries: Sequence[Mapping[str, Any]], path: str) -> None:
    """The picture of ``svg``, drawn with matplotlib (imported here, and only here) to ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=False)  # no window, whatever backend the suite configured
    from matplotlib.figure import Figure  # a figure of its own: pyplot's state is the user's

    figure = Figure(figsize=(WIDTH / 100, HEIGHT / 100), dpi=100)
    axes = figure.add_subplot()
    curves = curves_of(entries)
    for index, (name, curve) in enumerate(curves.items()):
        orders, mib = zip(*curve, strict=True) if curve else ((), ())
        axes.plot(orders, mib, label=name, color=COLOURS[index % len(COLOURS)], linewidth=1.5)
    last = max((order for curve in curves.values() for order, _ in curve), default=0)
    for rank, order, height, label in _named_steps(entries, curves):
        axes.plot([order], [height], "o", color="black", markersize=4)
        axes.annotate(
            label,
            (order, height),
            xytext=(6 if order <= last / 2 else -6, -14 * (rank + 1)),
            textcoords="offset points",
            fontsize=7,
            ha="left" if order <= last / 2 else "right",
        )
    axes.set_xlabel("tests, in the order they ran")
    axes.set_ylabel("MiB")
    axes.set_title("memory after each test", loc="left", fontsize=11)
    axes.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path)


def _named_steps(
    entries: Sequence[Mapping[str, Any]], curves: Mapping[str, Sequence[tuple[int, float]]]
) -> list[tuple[int, int, float, str]]:
    """``(rank, run order, height, label)`` of each step a picture names: the tests that kept
    the most, on their resident curve (their worker's, under xdist)."""
    resident = {name: dict(curve) for name, curve in curves.items() if RESIDENT_CURVE in name}
    steps = []
    for rank, entry in enumerate(most_retained(entries, STEPS_NAMED)):
        order = int(entry.get("run_order", 0))
        prefix = f"{entry.get('worker')}: " if len(resident) > 1 else ""
        height = resident.get(f"{prefix}{RESIDENT_CURVE}", {}).get(order)
        if height is not None:
            label = f"{entry['nodeid']} ({kept_text(entry['retained'])})"
            steps.append((rank, order, height, label))
    return steps


def _axes(x: Any, y: Any, last: int, bottom: float, top: float) -> str:
    """The two axes, five ticks on each, and their names."""
    base = y(bottom)
    lines = [
        f'<line x1="{LEFT}" y1="{base:.1f}" x2="{x(last):.1f}" y2="{base:.1f}" stroke="black"/>',
        f'<line x1="{LEFT}" y1="{base:.1f}" x2="{LEFT}" y2="{y(top):.1f}" stroke="black"/>',
    ]
    for tick in range(5):
        order, mib = last * tick / 4, bottom + (top - bottom) * tick / 4
        lines.append(
            f'<text x="{x(order):.1f}" y="{base + 16:.1f}" text-anchor="middle">{order:.0f}</text>'
        )
        lines.append(
            f'<text x="{LEFT - 6}" y="{y(mib) + 4:.1f}" text-anchor="end">{mib:.0f}</text>'
        )
    lines.append(
        f'<text x="{(LEFT + x(last)) / 2:.1f}" y="{HEIGHT - 12}" text-anchor="middle">'
        "tests, in the order they ran</text>"
    )
    lines.append(
        f'<text x="16" y="{(TOP + base) / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(TOP + base) / 2:.1f})">MiB</text>'
    )
    return "\n".join(lines)
