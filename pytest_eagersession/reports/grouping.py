"""Leaks held the same way, told once: a scope's records grouped by holder, a run's by root.

Within one scope, objects whose chains are the same but for the index or key in their last
container (240 tensors appended to one module-level list) are one entry: how many, what they
are, their bytes, and the slots they sit in. Across a run, leaks are counted by the root their
chain starts at (a module's global, a library's cache), so that a holder keeping objects in
many tests is told once. Everything here works on text: records carry no objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_eagersession.base.sizes import format_bytes


class Leak(Protocol):
    """What grouping reads of a leak record (``report.LeakRecord`` has it all)."""

    @property
    def kind(self) -> str: ...
    @property
    def summary(self) -> str: ...
    @property
    def nbytes(self) -> int | None: ...
    @property
    def retained_by(self) -> str | None: ...
    @property
    def slot(self) -> str | None: ...
    @property
    def allowed(self) -> bool: ...
    @property
    def destroyed(self) -> bool: ...
    @property
    def root(self) -> str | None: ...
    @property
    def holder_kind(self) -> str | None: ...


#: How links are joined in a chain's text (``explain.render_chain``).
LINK = " -> "
#: A chain with more links than this is shortened in the terminal (whole under ``-v``).
MOST_LINKS_SHOWN = 8
#: Links kept at the end of a shortened chain (the root is always kept).
LAST_LINKS_SHOWN = 4
#: Objects held alike that read differently (dtype, shape, creation site) are one entry from
#: this many on.
GROUP_MIXED_FROM = 3
#: Index ranges, or keys, named in a group's entry before the rest are only counted.
MOST_SLOTS_NAMED = 4

_SLOT = re.compile(r"\[(?P<key>.*)\]")
_HELD_BY = "held by "


def slot_of(chain: str) -> str | None:
    """The index or key of a chain's last link when its object is an item of a list, tuple or
    dict (``"mod.KEPT (list) -> [14] -> EagerTensor"``: ``"[14]"``); None otherwise."""
    head, separator, _ = chain.rpartition(LINK)
    if not separator:
        return None
    _, separator, slot = head.rpartition(LINK)
    return slot if separator and _SLOT.fullmatch(slot) else None


def root_of(chain: str) -> str:
    """The first link of a chain: what holds everything after it."""
    return chain.split(LINK, 1)[0]


def shorten(text: str, *, most: int = MOST_LINKS_SHOWN, last: int = LAST_LINKS_SHOWN) -> str:
    """A chain's text with its middle links counted, not shown, when it has more than ``most``."""
    links = text.split(LINK)
    if len(links) <= most:
        return text
    hidden = len(links) - 1 - last
    return LINK.join([links[0], f"... {hidden} links ...", *links[-last:]])


def describe_slots(slots: Sequence[str]) -> str:
    """Slots ``[0]``, ``[1]``, ``[2]``, ``[7]`` read ``[0] to [2], [7]``; keys are listed, then
    counted."""
    indices: list[int] = []
    for slot in slots:
        match = _SLOT.fullmatch(slot)
        key = match.group("key") if match else ""
        if not key.isdigit():
            indices = []
            break
        indices.append(int(key))
    if indices:
        parts = [
            f"[{first}]" if first == end else f"[{first}] to [{end}]"
            for first, end in _runs(sorted(set(indices)))
        ]
    else:
        parts = sorted(set(slots))
    if len(parts) <= MOST_SLOTS_NAMED:
        return ", ".join(parts)
    shown = ", ".join(parts[: MOST_SLOTS_NAMED - 1])
    return f"{shown}, ... ({len(set(slots))} in all)"


def _runs(numbers: Sequence[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for number in numbers:
        if runs and runs[-1][1] == number - 1:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    return runs


@dataclass(frozen=True)
class LeakGroup:
    """Leaks of one scope held the same way but for their slot in the last container."""

    members: tuple[Leak, ...]
    """The records, in report order."""

    @property
    def first(self) -> Leak:
        """The first record (all a group of one is)."""
        return self.members[0]

    @property
    def nbytes(self) -> int:
        """The bytes of all of them."""
        return sum(member.nbytes or 0 for member in self.members)

    def headline(self) -> str:
        """What they are: one record's summary, or how many, their bytes and what each is."""
        first = self.first
        if len(self.members) == 1:
            return first.summary
        counts: dict[str, int] = {}
        for member in self.members:
            text = member.summary.removeprefix(f"{first.kind}: ")
            counts[text] = counts.get(text, 0) + 1
        head = f"{len(self.members)} {first.kind}s, {format_bytes(self.nbytes)} in all"
        if len(counts) == 1:
            return f"{head}, each {next(iter(counts))}"
        ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        shown = "; ".join(f"{count} x {text}" for text, count in ordered[:3])
        more = f"; and {len(ordered) - 3} more alike" if len(ordered) > 3 else ""
        return f"{head}: {shown}{more}"

    def held_by(self) -> str | None:
        """The holder's line, naming every slot the group's objects sit in."""
        first = self.first
        parts = _around_slot(first)
        if parts is None or len(self.members) == 1:
            return first.retained_by
        slots = [member.slot for member in self.members if member.slot is not None]
        return f"{parts[0]}{LINK}{describe_slots(slots)}{LINK}{parts[1]}"


def _around_slot(record: Leak) -> tuple[str, str] | None:
    """A traced record's holder line before and after its slot; None without a slot."""
    if record.retained_by is None or record.slot is None:
        return None
    head, separator, tail = record.retained_by.rpartition(f"{LINK}{record.slot}{LINK}")
    return (head, tail) if separator else None


def group_records(records: Sequence[Leak]) -> list[LeakGroup]:
    """The records of one scope, grouped; groups in the order of their first record.

    Records join one group when they are of one kind, allowed and cut off alike, and held by
    the same chain but for the slot their object sits in (traced records), or when neither is
    traced and they read the same. Fewer than ``GROUP_MIXED_FROM`` that read differently stay
    apart.
    """
    groups: dict[tuple[object, ...], list[Leak]] = {}
    for record in records:
        parts = _around_slot(record)
        holder: tuple[str, ...]
        if record.retained_by is None:
            holder = ("untraced", record.summary)
        elif parts is None:
            holder = ("chain", record.retained_by)
        else:
            holder = ("slots", *parts)
        key = (record.kind, record.allowed, record.destroyed, *holder)
        groups.setdefault(key, []).append(record)
    found: list[LeakGroup] = []
    for members in groups.values():
        if len(members) >= GROUP_MIXED_FROM or len({m.summary for m in members}) == 1:
            found.append(LeakGroup(tuple(members)))
        else:  # two objects that differ read better on lines of their own
            found.extend(LeakGroup((member,)) for member in members)
    order = {id(record): index for index, record in enumerate(records)}
    return sorted(found, key=lambda group: order[id(group.first)])


def holders_of_run(tests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The run's leaks counted by the root of their chain, most bytes first.

    ``tests`` are the JSON report's entries; each holder comes once, with how many objects it
    keeps, their bytes and kinds, and the tests that left them (by node id). Allowed leaks are
    left out.
    """
    holders: dict[str, dict[str, Any]] = {}
    for test in tests:
        for leak in test.get("leaks") or ():
            if leak.get("allowed"):
                continue
            root = leak.get("root") or _unrooted(leak.get("retained_by"))
            entry = holders.setdefault(
                root,
                {
                    "root": root,
                    "holder": leak.get("holder_kind"),
                    "objects": 0,
                    "nbytes": 0,
                    "kinds": {},
                    "tests": [],
                },
            )
            entry["objects"] += 1
            entry["nbytes"] += leak.get("nbytes") or 0
            kind = str(leak.get("kind"))
            entry["kinds"][kind] = entry["kinds"].get(kind, 0) + 1
            nodeid = test.get("nodeid")
            if nodeid not in entry["tests"]:
                entry["tests"].append(nodeid)
    for entry in holders.values():
        entry["tests"].sort()  # the same serial and under xdist, where reports come as tests end
    return sorted(holders.values(), key=lambda entry: (-entry["nbytes"], -entry["objects"]))


def _unrooted(retained_by: object) -> str:
    if not isinstance(retained_by, str):
        return "not traced"
    if retained_by.startswith("no Python holder"):
        return "no Python holder"
    if retained_by.startswith("no holder found"):
        return "no holder found in time"
    return root_of(retained_by.removeprefix(_HELD_BY))


def holder_line(holder: Mapping[str, Any], *, most_tests: int = 3) -> str:
    """The lines for one of ``holders_of_run``'s entries: what it keeps, in which tests, and
    what kind of holder it is."""
    kinds = ", ".join(
        f"{count} {kind}{'' if count == 1 else 's'}"
        for kind, count in sorted(holder["kinds"].items(), key=lambda item: -item[1])
    )
    tests = list(holder["tests"])
    named = ", ".join(tests[:most_tests])
    if len(tests) > most_tests:
        named += f" and {len(tests) - most_tests} more"
    noun = "test" if len(tests) == 1 else "tests"
    line = f"{holder['root']}: {kinds} ({format_bytes(holder['nbytes'])}) in {len(tests)} {noun}"
    kind = f"\n    holder: {holder['holder']}" if holder.get("holder") else ""
    return f"{line}: {named}{kind}"
