"""Leaks held the same way are told once: within a test (by slot), across the run (by root)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import tensorflow  # noqa: F401  (imported before the inner runs: they would import it again)
from support import run_inner

from pytest_eagersession.reports.grouping import (
    LINK,
    MOST_LINKS_SHOWN,
    describe_slots,
    group_records,
    holder_line,
    holders_of_run,
    root_of,
    shorten,
    slot_of,
)
from pytest_eagersession.reports.report import LeakRecord, render


def record(
    retained_by: str | None,
    *,
    kind: str = "tensor",
    summary: str = "tensor: EagerTensor float32[512,512] 1.0 MiB on CPU:0",
    nbytes: int = 1 << 20,
    allowed: bool = False,
) -> LeakRecord:
    chain = None if retained_by is None else retained_by.removeprefix("held by ")
    return LeakRecord(
        scope="function",
        type="tensorflow.python.framework.ops.EagerTensor",
        kind=kind,
        dtype="float32",
        shape="[512,512]",
        nbytes=nbytes,
        device="CPU:0",
        op=None,
        created_at=None,
        retained_by=retained_by,
        summary=summary,
        allowed=allowed,
        root=None if chain is None else root_of(chain),
        slot=None if chain is None else slot_of(chain),
    )


def kept(index: object, container: str = "mod.KEPT (list)") -> LeakRecord:
    return record(f"held by {container} -> [{index}] -> EagerTensor")


# ---------------------------------------------------------------- the pieces


@pytest.mark.parametrize(
    ("chain", "slot"),
    [
        ("mod.KEPT (list) -> [14] -> EagerTensor", "[14]"),
        ("mod.CACHE (dict) -> ['a'] -> EagerTensor", "['a']"),
        ("mod.M (Dense)._kernel (Variable)._value -> ResourceVariable", None),
        ("mod.M (list) -> [3] (Dense)._kernel -> ResourceVariable", None),  # not the last link
        ("frame test_x at t.py:3", None),
    ],
)
def test_the_slot_is_the_last_index_or_key(chain: str, slot: str | None) -> None:
    assert slot_of(chain) == slot


@pytest.mark.parametrize(
    ("slots", "text"),
    [
        (["[2]", "[0]", "[1]"], "[0] to [2]"),
        (["[0]", "[1]", "[2]", "[7]", "[9]", "[10]"], "[0] to [2], [7], [9] to [10]"),
        ([f"[{n}]" for n in range(0, 20, 2)], "[0], [2], [4], ... (10 in all)"),
        (["['b']", "['a']"], "['a'], ['b']"),
        ([f"['k{n}']" for n in range(6)], "['k0'], ['k1'], ['k2'], ... (6 in all)"),
        (["[0]", "['a']"], "LIST"),  # a dict keyed by 0 and 'a': listed, not ranged
    ],
)
def test_slots_read_as_ranges_or_keys(slots: list[str], text: str) -> None:
    if text == "LIST":
        assert describe_slots(slots) == "['a'], [0]"
    else:
        assert describe_slots(slots) == text


def test_a_long_chain_keeps_its_root_and_last_links() -> None:
    links = ["mod.NESTED (dict)", *[f"['level{n}'] (list)" for n in range(12)], "EagerTensor"]
    chain = LINK.join(links)
    short = shorten(chain)
    assert short.split(LINK) == [links[0], "... 9 links ...", *links[-4:]]
    assert len(short.split(LINK)) <= MOST_LINKS_SHOWN
    few = LINK.join(links[:MOST_LINKS_SHOWN])
    assert shorten(few) == few


# ---------------------------------------------------------------- within a test


def test_items_of_one_container_are_one_entry() -> None:
    records = [kept(index) for index in (3, 0, 1, 2)]
    [group] = group_records(records)
    assert group.headline() == (
        "4 tensors, 4.0 MiB in all, each EagerTensor float32[512,512] 1.0 MiB on CPU:0"
    )
    assert group.held_by() == "held by mod.KEPT (list) -> [0] to [3] -> EagerTensor"


def test_what_differs_stays_apart() -> None:
    records = [
        kept(0),
        kept(0, container="mod.OTHER (list)"),  # another container
        record("held by mod.KEPT (list) -> [1] -> EagerTensor", allowed=True),  # allowed
        record("held by mod.KEPT (list) -> [2] -> ResourceVariable", kind="variable"),
        record(None),  # not traced
    ]
    groups = group_records(records)
    assert [len(group.members) for group in groups] == [1, 1, 1, 1, 1]
    assert [group.first for group in groups] == records  # in report order


def test_two_that_read_differently_stay_apart_three_are_one_entry() -> None:
    small = "tensor: EagerTensor float32[3] 12 B on CPU:0"
    two = [
        kept(0),
        record("held by mod.KEPT (list) -> [1] -> EagerTensor", summary=small, nbytes=12),
    ]
    assert [len(group.members) for group in group_records(two)] == [1, 1]
    three = [
        *two,
        record("held by mod.KEPT (list) -> [2] -> EagerTensor", summary=small, nbytes=12),
    ]
    [group] = group_records(three)
    assert group.headline() == (
        "3 tensors, 1.0 MiB in all: 2 x EagerTensor float32[3] 12 B on CPU:0; "
        "1 x EagerTensor float32[512,512] 1.0 MiB on CPU:0"
    )


def test_a_report_of_240_kept_tensors_is_one_entry() -> None:
    text = render("t.py::test_x", "function", [kept(n) for n in range(240)], strategy="x")
    lines = text.splitlines()
    assert lines[1:3] == [
        "  1. 240 tensors, 240.0 MiB in all, each EagerTensor float32[512,512] 1.0 MiB on CPU:0",
        "     held by mod.KEPT (list) -> [0] to [239] -> EagerTensor",
    ]
    assert len(lines) == 4  # the headline, the entry's two lines, the advice


def test_a_report_shortens_long_chains_unless_told_not_to() -> None:
    chain = LINK.join(["mod.NESTED (dict)", *[f"['l{n}'] (list)" for n in range(10)], "[0]"])
    leak = record(f"held by {chain} -> EagerTensor")
    short = render("t.py::test_x", "function", [leak], strategy="x")
    full = render("t.py::test_x", "function", [leak], strategy="x", full_chains=True)
    assert "... 8 links ..." in short
    assert f"held by {chain} -> EagerTensor" in full


# ---------------------------------------------------------------- across the run


def test_the_run_tells_each_root_once() -> None:
    tests: list[dict[str, Any]] = [
        {"nodeid": "t.py::a", "leaks": [kept(n).to_json() for n in range(3)]},
        {"nodeid": "t.py::b", "leaks": [kept(3).to_json(), record(None).to_json()]},
        {
            "nodeid": "t.py::c",
            "leaks": [record("held by mod.KEPT (list) -> [4] -> X", allowed=True).to_json()],
        },
        {"nodeid": "t.py::d", "leaks": []},
    ]
    holders = holders_of_run(tests)
    assert holders == [
        {
            "root": "mod.KEPT (list)",
            "holder": None,
            "objects": 4,
            "nbytes": 4 << 20,
            "kinds": {"tensor": 4},
            "tests": ["t.py::a", "t.py::b"],
        },
        {
            "root": "not traced",
            "holder": None,
            "objects": 1,
            "nbytes": 1 << 20,
            "kinds": {"tensor": 1},
            "tests": ["t.py::b"],
        },
    ]
    assert holder_line(holders[0], most_tests=1) == (
        "mod.KEPT (list): 4 tensors (4.0 MiB) in 2 tests: t.py::a and 1 more"
    )


GROUPED_SUITE = """
    import threading
    import tensorflow as tf

    KEPT = []

    def test_threads_fill_a_list():
        def work(n):
            for i in range(10):
                KEPT.append(tf.fill([64, 64], float(n * 10 + i)))
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def test_one_more():
        KEPT.append(tf.zeros([2, 2]))

    def test_clean():
        assert float(tf.reduce_sum(tf.ones([3]))) == 3.0
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_suite_reports_each_holder_once(pytester: pytest.Pytester, workers: list[str]) -> None:
    pytester.makepyfile(test_grouped=GROUPED_SUITE)
    out = pytester.path / "out.json"
    result = run_inner(pytester, f"--eagersession-json={out}", "-p", "no:randomly", *workers)
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_threads_fill_a_list leaked 40 TensorFlow objects (640.0 KiB)*",
            "  1. 40 tensors, 640.0 KiB in all, each EagerTensor float32[[]64,64] 16.0 KiB on*",
            "     held by test_grouped.KEPT (list) -> [[]0] to [[]39] -> EagerTensor",
            "*eagersession: leaked TensorFlow objects*",
            "by holder, most bytes first:",
            "  test_grouped.KEPT (list): 41 tensors (640.0 KiB) in 2 tests: "
            "test_grouped.py::test_one_more, test_grouped.py::test_threads_fill_a_list",
            "by test:",
        ]
    )
    report = json.loads(out.read_text())
    assert [holder["root"] for holder in report["holders"]] == ["test_grouped.KEPT (list)"]
    assert report["holders"][0]["objects"] == 41
    leaks = {t["nodeid"]: t["leaks"] for t in report["tests"]}
    # The JSON report keeps one entry per object, each with its own slot.
    slots = sorted(leak["slot"] for leak in leaks["test_grouped.py::test_threads_fill_a_list"])
    assert slots == sorted(f"[{n}]" for n in range(40))
