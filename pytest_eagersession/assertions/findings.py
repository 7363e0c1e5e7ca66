"""What the checks found, as plain records of text and numbers that hold no checked object."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pytest_eagersession.reports.report import LeakRecord


@dataclass(frozen=True)
class RunGrowth:
    """What one measured run of ``assert_no_growth`` left alive at the end of the check."""

    run: int
    """1 for the first run after the warm-up."""
    records: tuple[LeakRecord, ...]
    """TensorFlow objects the run made that were still alive after the last run."""
    functions: tuple[str, ...]
    """Functions the run registered with TensorFlow's eager context, still registered."""
    traces: tuple[str, ...]
    """tf.function traces made during the run: ``name (location) (signature)``."""

    @property
    def grew(self) -> bool:
        """Whether the run left something alive."""
        return bool(self.records or self.functions)

    @property
    def nbytes(self) -> int:
        """Bytes of the objects it left alive (those of known size)."""
        return sum(record.nbytes or 0 for record in self.records)


@dataclass(frozen=True)
class Trace:
    """One trace of a tf.function: which function, for which input signature."""

    function: str
    """The Python function's qualified name."""
    location: str | None
    """``path:line`` where the Python function is defined."""
    signature: str
    """The input signature that caused the trace, as TensorFlow prints it."""
    concrete: str
    """The name of the traced function in TensorFlow's eager context."""
    instance: int
    """Which tf.function object traced it, numbered by first trace (1, 2, ...)."""
    creates_variables: bool = False
    """The first call's trace of a function that created variables (it then traced again)."""

    def text(self) -> str:
        """``name (path:line) (signature)``."""
        where = f" ({self.location})" if self.location else ""
        return f"{self.function}{where} {self.signature_text()}"

    def signature_text(self) -> str:
        """The signature, marked when it is the variable-creating first trace."""
        if self.creates_variables:
            return f"{self.signature} (first call, created variables: traced again)"
        return self.signature


@dataclass(frozen=True)
class TracedFunction:
    """The traces of one Python function, over every tf.function object that wraps it."""

    function: str
    location: str | None
    traces: int
    instances: int
    """How many tf.function objects traced it (more than one: a tf.function made per call)."""
    signatures: tuple[str, ...]
    """The input signature of each trace, in order."""

    def to_json(self) -> dict[str, Any]:
        """The JSON report's fields for this function."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class LargeObject:
    """One of the largest tracked objects alive at a peak."""

    nbytes: int
    summary: str
    alive: bool = False
    """Still alive when the meter stopped."""
