"""A limit on a block, usable both as a ``with`` block (yielding its probe) and as a decorator."""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import Generic, ParamSpec, TypeVar

from pytest_eagersession.assertions.scope import callable_name

P = ParamSpec("P")
R = TypeVar("R")
ProbeT = TypeVar("ProbeT")
LimitT = TypeVar("LimitT")


class LimitBlock(Generic[ProbeT, LimitT]):
    """Starts a probe (a counter, a meter) as the block begins and checks it as it ends.

    A subclass says how to start the probe and how to stop and check it; the check runs only
    when the block ends without an exception. Each decorated call gets a block of its own.
    """

    def __init__(self, limit: LimitT, where: str | None) -> None:
        self._limit = limit
        self._where = where
        self._probe: ProbeT | None = None

    def _begin(self) -> ProbeT:
        raise NotImplementedError

    def _end(self, probe: ProbeT, *, check: bool) -> None:
        raise NotImplementedError

    def __enter__(self) -> ProbeT:
        self._probe = self._begin()
        return self._probe

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._probe is not None:
            self._end(self._probe, check=exc_type is None)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        limit, where = self._limit, self._where or callable_name(func)
        block_type = type(self)

        @functools.wraps(func)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            with block_type(limit, where):
                return func(*args, **kwargs)

        return checked

    def _started(self) -> ProbeT:
        if self._probe is None:
            raise RuntimeError("the block has not started yet")
        return self._probe
