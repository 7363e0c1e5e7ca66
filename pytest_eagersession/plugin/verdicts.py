"""What a closed scope's leaks do to the test that ends it, and the per-test state they go to.

A scope's survivors that no wider scope takes over and none allows are leaks. TensorFlow's own
known leaks are set apart (``retention``), the rest become text records on the test, and the
test fails, warns or passes as its policy says. Nothing here keeps a leaked object.
"""

from __future__ import annotations

import functools
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_eagersession.core.session import EagerSession
from pytest_eagersession.core.survivors import Survivor
from pytest_eagersession.heap.holders import Root
from pytest_eagersession.plugin.settings import LeakMode, Settings, TestPolicy
from pytest_eagersession.reports.explain import Explanation, explain_all
from pytest_eagersession.reports.report import Advice, LeakRecord, build_records, render
from pytest_eagersession.reports.routes import KnownRoutes

#: The report's advice in the words of a pytest user.
PYTEST_ADVICE = Advice(
    allow="@pytest.mark.cleanup(allow=...) or eager_session.detach(obj)",
    creation="--eagersession-track-creation",
    untraced="--eagersession-max-leaks",
    more_time="-v searches longer",
)


class EagerSessionLeakWarning(UserWarning):
    """A test leaked TensorFlow objects under ``leaks="warn"``."""


@dataclass
class ItemState:
    """What the plugin keeps on one test item, from its setup to its teardown's report."""

    policy: TestPolicy | None = None
    session: EagerSession | None = None
    """The test's own session; None when its marker was bad."""
    records: list[LeakRecord] = field(default_factory=list)
    """The leaks of the test and of the scopes that ended with it."""
    call_failed: bool = False
    measured: dict[str, Any] = field(default_factory=dict)
    """The body's traces and peak bytes, for the JSON report."""
    released: list[str] = field(default_factory=list)
    """What TensorFlow's own known leaks kept until the end of a scope."""
    kept: list[str] = field(default_factory=list)
    """Leaks that TensorFlow's own known leaks still keep."""
    leaked: bool = False
    """The teardown fails because of leaks (and for no other reason)."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds the plugin spent on the test, by phase (``PHASES``)."""

    def timed(self, phase: str, started: float) -> None:
        """Add the time since ``started`` (``time.perf_counter()``) to ``phase``."""
        self.timings[phase] = self.timings.get(phase, 0.0) + time.perf_counter() - started

    def judging_seconds(self) -> float:
        """The time spent on explaining and reporting leaks so far."""
        return self.timings.get("explain", 0.0) + self.timings.get("report", 0.0)

    def to_json(self) -> dict[str, Any]:
        """The test's entry of the JSON report, less its outcome."""
        return {
            "strategy": self.policy.strategy.value if self.policy else None,
            "stats": _stats_json(self.session),
            "leaks": [record.to_json() for record in self.records],
            "retention": {"released": self.released, "kept": self.kept},
            "timings": {phase: round(self.timings.get(phase, 0.0), 6) for phase in PHASES},
            **self.measured,
        }


#: Where the plugin's time on a test goes: opening and activating its session; closing it,
#: with the survivor check (and the search for its leaks' holders, which proves them alive);
#: collecting, during the close, the garbage the test left in cycles (the interpreter's work,
#: which it would do later without the plugin); what is left of finding who holds its leaks
#: (and cutting them off); writing the report; closing the wider scopes that end with it.
PHASES = ("open", "close", "collect", "explain", "report", "scopes")


#: The run's ``KnownRoutes``: the holders its reports explained, looked in first by the next.
ROUTES_KEY = pytest.StashKey[KnownRoutes]()

#: Each item's ``ItemState``; pytest keeps every item to the end of the run, so the plugin
#: removes it when the item's teardown is reported.
STATE_KEY = pytest.StashKey[ItemState]()


class TestCloseHints:
    """What the plugin knows of a test's survivors as its session closes
    (``survivors.CloseHints``): what the wider scopes take over, and who holds them.

    A leak held the way an earlier one was is found along the run's routes; one held
    elsewhere is looked for by the walk from the roots that its report needs anyway. Either
    chain proves the object alive, so the close needs no whole collection of the heap to tell
    it from garbage (hundreds of milliseconds with TensorFlow loaded): what the walk found is
    kept, as text, for the report (``explainer``).
    """

    def __init__(
        self,
        kept_elsewhere: Callable[[Survivor], bool] | None,
        routes: KnownRoutes | None,
        explain: Callable[[Sequence[object]], Sequence[Explanation]] | None = None,
    ) -> None:
        self._kept_elsewhere = kept_elsewhere
        self._routes = routes
        self._explain = explain
        self._explained: dict[int, tuple[weakref.ref[Any], Explanation]] = {}

    def kept_elsewhere(self, survivor: Survivor) -> bool:
        """Whether a wider scope takes ``survivor`` over."""
        return self._kept_elsewhere is not None and self._kept_elsewhere(survivor)

    def known_holders(self, objects: Sequence[object]) -> set[int]:
        """The ids of ``objects`` that a known route, or else the walk, finds a holder of.

        The search is the report's own, run once: its chains are kept for the report, which
        then neither follows the routes again (that would reorder them, most recently useful
        first, behind the route the walk just learned) nor walks.
        """
        if self._explain is None:
            return self._routes.held(objects) if self._routes is not None else set()
        held: set[int] = set()
        for obj, explanation in zip(objects, self._explain(objects), strict=True):
            if explanation.chain is not None:
                held.add(id(obj))
                self._explained[id(obj)] = (weakref.ref(obj), explanation)
        return held

    def explainer(
        self, explain: Callable[[Sequence[object]], Sequence[Explanation]]
    ) -> Callable[[Sequence[object]], list[Explanation]]:
        """``explain`` less the objects whose holders the close found already."""

        def explain_rest(objects: Sequence[object]) -> list[Explanation]:
            known: dict[int, Explanation] = {}
            for obj in objects:
                ref, explanation = self._explained.get(id(obj), (None, None))
                if ref is not None and explanation is not None and ref() is obj:
                    known[id(obj)] = explanation
            rest = [obj for obj in objects if id(obj) not in known]
            try:
                found = iter(explain(rest) if rest else ())
                return [known.get(id(obj)) or next(found) for obj in objects]
            finally:
                rest.clear()

        return explain_rest


def holder_search(
    item: pytest.Item, settings: Settings
) -> Callable[[Sequence[object]], list[Explanation]]:
    """One walk for the holders of a test's leaks, as its report makes it."""
    return functools.partial(
        explain_all,
        budget_s=settings.chain_budget_s,
        framework=_framework_roots(item.config),
        more_time=PYTEST_ADVICE.more_time,
        routes=item.config.stash.get(ROUTES_KEY, None),
    )


def state_of(item: pytest.Item) -> ItemState:
    """The item's state, made empty if it has none."""
    return item.stash.setdefault(STATE_KEY, ItemState())


def judge(
    item: pytest.Item,
    scope: str,
    session: EagerSession,
    leaks: list[Any],
    policy: TestPolicy,
    settings: Settings,
    *,
    test_failed: bool = False,
    hints: TestCloseHints | None = None,
) -> None:
    """Fail (or warn) ``item`` for ``leaks``, the survivors of ``session``, closed at its end.

    TensorFlow's own known leaks are set apart first. A test that failed for its own reason
    shows only that: its failure's frames hold its objects.
    """
    leaks, retention = _set_apart(item, session, leaks, settings)
    if test_failed or not (leaks or retention):
        return
    graph_errors: list[str] = []
    state = state_of(item)
    started = time.perf_counter()
    search = holder_search(item, settings)
    records = build_records(
        leaks,
        scope,
        explain_limit=settings.max_leaks,
        chain_depth=settings.chain_depth,
        graphs_dir=settings.graphs_dir,
        graph_prefix=_safe_name(item.nodeid) + f"-{scope}",
        graph_errors=graph_errors,
        explainer=search if hints is None else hints.explainer(search),
        destroy=policy.leaks is LeakMode.FAIL,
        advice=PYTEST_ADVICE,
    )
    del leaks
    state.timed("explain", started)
    started = time.perf_counter()
    state.records.extend(records)
    where = item.nodeid if scope == "function" else f"The {scope} of {item.nodeid}"
    texts = []
    if records:
        texts.append(
            render(
                where,
                scope,
                records,
                strategy=policy.strategy.value,
                advice=PYTEST_ADVICE,
                full_chains=settings.full_chains,
            )
        )
    if retention is not None:
        texts.append(f"{where}: {retention}")
    text = "\n".join(texts)
    for error in graph_errors:
        text += f"\nReference graphs not written to {settings.graphs_dir}: {error}"
    state.timed("report", started)
    if policy.leaks is LeakMode.WARN:
        warnings.warn(EagerSessionLeakWarning(text), stacklevel=1)
    else:
        state.leaked = state.leaked or bool(records)
        pytest.fail(text, pytrace=False)


def _set_apart(
    item: pytest.Item, session: EagerSession, leaks: list[Any], settings: Settings
) -> tuple[list[Any], str | None]:
    """Set apart what TensorFlow's own known leaks kept; ``(leaks, failure text)``.

    Under ``retention="report"`` it is listed in the run's summary and the JSON report and
    the test passes; under ``"fail"`` the kept objects stay among the leaks, and what was
    released is said in the failure (the second value).
    """
    released = list(session.known_retention())
    kept = [leak for leak in leaks if leak.retention]
    if settings.retention == "fail":
        if not released:
            return leaks, None
        return leaks, _retention_text(released)
    if released or kept:
        state = state_of(item)
        state.released.extend(released)
        state.kept.extend(f"{leak.summary()}: kept by {leak.retention}" for leak in kept)
    return [leak for leak in leaks if not leak.retention], None


def _retention_text(released: list[str]) -> str:
    lines = "\n".join(f"  - {line}" for line in released)
    return (
        "TensorFlow's own known leaks kept objects of this scope (released at its end; "
        f"--eagersession-retention=fail fails on this):\n{lines}"
    )


def _stats_json(session: EagerSession | None) -> dict[str, float] | None:
    if session is None:
        return None
    stats = session.stats()
    figures = {name: getattr(stats, name) for name in stats.__dataclass_fields__}
    return {
        name: round(value, 6) if isinstance(value, float) else value
        for name, value in figures.items()
    }


def _safe_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:120]


def _framework_roots(config: pytest.Config) -> list[Root]:
    """pytest's state that keeps user objects past a test: callbacks of ``config.add_cleanup``."""
    cleanups = getattr(config, "_cleanup_stack", None)  # pytest 8.1 and later
    if cleanups is None:
        cleanups = getattr(config, "_cleanup", None)
    return [] if cleanups is None else [Root("pytest config.add_cleanup", cleanups, "framework")]
