"""Each leak's holder is said in words: whose state its chain's root is, and how to clear it."""

from __future__ import annotations

import contextvars
import functools
import sys
import threading
import types

import pytest
import tensorflow  # noqa: F401  (imported before the inner runs: they would import it again)
from support import run_inner

from pytest_eagersession.heap.holders import Root
from pytest_eagersession.reports import root_kinds
from pytest_eagersession.reports.root_kinds import describe_root


def module(name: str, path: str) -> types.ModuleType:
    made = types.ModuleType(name)
    made.__file__ = path
    return made


def module_root(name: str, path: str, held: object) -> tuple[Root, list[object], str]:
    mod = module(name, path)
    return Root(name, mod, "module"), [mod, held], f"{name}.CACHE ({type(held).__name__})"


@pytest.fixture
def fake_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fakelib`` is installed by the distribution ``fake-lib``."""
    monkeypatch.setattr(root_kinds, "_packages", lambda: {"fakelib": ["fake-lib"]})
    root_kinds._distribution.cache_clear()
    yield
    root_kinds._distribution.cache_clear()


@pytest.mark.parametrize(
    ("name", "path", "held", "said"),
    [
        (
            "test_x",
            "/repo/tests/test_x.py",
            [],
            "the test module's own state; clear it in a fixture, or monkeypatch a fresh one "
            "for each test",
        ),
        ("x_test", "/repo/x_test.py", object(), "the test module's own state"),
        ("conftest", "/repo/tests/conftest.py", object(), "a conftest.py's module state"),
        ("app.models", "/repo/app/models.py", object(), "module state of the code under test"),
        ("keras.src.saving.x", "/v/lib/site-packages/keras/src/x.py", {}, "Keras's state"),
        ("tensorflow.python.x", "/v/lib/site-packages/tensorflow/x.py", {}, "TensorFlow's state"),
        (
            "fakelib.cache",
            "/v/lib/python3.11/site-packages/fakelib/cache.py",
            object(),
            "a module-level cache or registry of the library fake-lib",
        ),
        (
            "unknownlib",  # installed, but no distribution says it provides it
            "/v/lib/python3.11/dist-packages/unknownlib.py",
            object(),
            "module state of the code under test",
        ),
    ],
)
def test_a_modules_state_is_named_by_whose_it_is(
    fake_library: None, name: str, path: str, held: object, said: str
) -> None:
    assert describe_root(*module_root(name, path, held)) == said


def test_an_lru_cache_says_how_to_empty_it(fake_library: None) -> None:
    @functools.lru_cache
    def encoding(n: int) -> list[int]:
        return [n]

    root, chain, _ = module_root("fakelib", "/v/site-packages/fakelib/__init__.py", encoding)
    said = describe_root(root, chain, "fakelib.encoding (_lru_cache_wrapper)")
    assert said == (
        "a module-level cache or registry of the library fake-lib; "
        "fakelib.encoding.cache_clear() empties it"
    )


def test_a_library_class_imported_by_user_code_is_the_librarys_state(
    fake_library: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = module("fakelib.bijector", "/v/lib/python3.11/site-packages/fakelib/bijector.py")
    monkeypatch.setitem(sys.modules, "fakelib.bijector", library)
    bijector = type("Bijector", (), {"__module__": "fakelib.bijector", "_cache": {}})
    user = module("gp.base", "/repo/gp/base.py")
    user.Transform = bijector  # type: ignore[attr-defined]  # what "from fakelib import" does
    root = Root("gp.base", user, "module")
    chain = [user, bijector, bijector._cache]
    assert root_kinds.owning_module(root, chain) is library
    assert root_kinds.library_state(root, chain)
    said = describe_root(root, chain, "gp.base.Transform._cache (dict)")
    assert said == "a module-level cache or registry of the library fake-lib"
    own = type("Cache", (), {"__module__": "gp.base"})
    assert not root_kinds.library_state(root, [user, own])  # the user's own class
    assert not root_kinds.library_state(root, [user, {}])  # the user's own dict


def test_frames_and_pytest_are_named() -> None:
    frame = sys._getframe()
    thread = Root("thread prefetcher: frame of run (t.py:3)", frame, "frame")
    assert describe_root(thread, [frame], "x") == (
        "a local variable of the running thread 'prefetcher'; stop it and join it before the "
        "test ends, or in its fixture's teardown"
    )
    running = Root("frame of test_x (t.py:3)", frame, "frame")
    assert describe_root(running, [frame], "x") == "a local variable of a function still running"
    cleanup = Root("pytest's config.add_cleanup callbacks", [], "framework")
    assert describe_root(cleanup, [[]], "x") == "pytest's state: kept until the end of the run"


def test_a_chain_through_a_running_threads_object_names_the_thread() -> None:
    stop = threading.Event()
    loader = threading.Thread(target=stop.wait, name="loader", daemon=True)
    loader.start()
    try:
        root = Root("threading", threading, "module")
        chain = [threading, threading._active, loader, stop.wait]
        said = describe_root(root, chain, "threading._active (dict)")
    finally:
        stop.set()
        loader.join()
    assert said == (
        "the thread 'loader', still running: its Thread object keeps its target and arguments "
        "until it ends; stop it and join it before the test ends, or in its fixture's teardown"
    )
    other = describe_root(root, [threading, {}], "threading.REGISTRY (dict)")
    assert "thread" not in other  # another of the module's globals is module state


LEFT_RUNNING_SUITE = """
    import threading
    import tensorflow as tf

    STOP = threading.Event()

    class Loader:
        def __init__(self):
            self.batch = tf.constant([1.0, 2.0])

        def run(self):
            STOP.wait(60)

    def test_starts_a_loader_and_leaves_it_running():
        threading.Thread(target=Loader().run, name="loader", daemon=True).start()

    def test_stops_it():
        STOP.set()
"""


def test_a_thread_left_running_is_named_in_the_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_left=LEFT_RUNNING_SUITE)
    result = run_inner(pytester)  # in file order: the second test stops the thread
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*held by threading._active (dict) -> [[]*[]] (Thread)._target (method) -> "
            "__self__ (Loader).batch -> EagerTensor",
            "*holder: the thread 'loader', still running: *; stop it and join it before the "
            "test ends*",
        ]
    )


LIBRARY_SUITE = """
    import tensorflow as tf
    import fakelib

    def test_cached_by_a_library():
        fakelib.REGISTRY["weights"] = tf.ones([4])
"""


def install_library(pytester: pytest.Pytester, package: str, distribution: str, code: str) -> None:
    """``package`` (its ``__init__`` is ``code``) installed in a site-packages folder on the path,
    by the distribution ``distribution``."""
    site = pytester.path / "lib" / "site-packages"
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(code)
    info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    (info / "top_level.txt").write_text(f"{package}\n")
    pytester.syspathinsert(site)
    root_kinds._packages.cache_clear()  # the distributions are listed again, with this one
    root_kinds._distribution.cache_clear()


def test_a_library_cache_is_named_in_the_report(pytester: pytest.Pytester) -> None:
    install_library(pytester, "fakelib", "fake-lib", "REGISTRY = {}\n")
    pytester.makepyfile(test_lib=LIBRARY_SUITE)
    try:
        result = run_inner(pytester)
    finally:
        sys.modules.pop("fakelib", None)
        root_kinds._packages.cache_clear()
        root_kinds._distribution.cache_clear()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*held by fakelib.REGISTRY (dict) -> [[]'weights'] -> EagerTensor",
            "     holder: a module-level cache or registry of the library fake-lib",
        ]
    )


CONTEXT_SUITE = """
    import contextvars
    import tensorflow as tf

    CURRENT_BATCH = contextvars.ContextVar("current_batch")

    def test_kept_in_a_context_variable():
        CURRENT_BATCH.set(tf.ones([8]))

    def test_reset_in_time():
        token = CURRENT_BATCH.set(tf.ones([8]))
        CURRENT_BATCH.reset(token)
"""


def test_a_context_variables_value_has_a_python_holder(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_context=CONTEXT_SUITE)
    # In a context of its own: what the inner run sets stays out of this test's.
    result = contextvars.copy_context().run(run_inner, pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_kept_in_a_context_variable leaked 1 TensorFlow object*",
            "     held by the thread's context variables -> [[]'current_batch'] -> EagerTensor",
            "     holder: a context variable of this thread (contextvars): reset it with the "
            "token its set() returned",
        ]
    )
    result.stdout.no_fnmatch_line("*no Python holder*")


REEXPORTED_SUITE = """
    import tensorflow as tf
    from app_helpers import Registry  # the user's module, which imported the library's class

    def test_keeps_a_variable_in_a_librarys_class():
        Registry.items.append(tf.Variable([1.0, 2.0]))

    def test_a_later_test_still_uses_it():
        assert Registry.items[0].numpy().tolist() == [1.0, 2.0]
"""


def test_a_variable_a_librarys_class_keeps_is_reported_and_left_usable(
    pytester: pytest.Pytester,
) -> None:
    """Later code may use what a library keeps: the report names it, nothing is cut off."""
    install_library(pytester, "fakereg", "fake-reg", "class Registry:\n    items = []\n")
    pytester.makepyfile(app_helpers="from fakereg import Registry\n", test_reg=REEXPORTED_SUITE)
    try:
        result = run_inner(pytester)
    finally:
        for name in ("fakereg", "app_helpers"):
            sys.modules.pop(name, None)
        root_kinds._packages.cache_clear()
        root_kinds._distribution.cache_clear()
    result.assert_outcomes(passed=2, errors=1)  # cut off, the later test failed
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_keeps_a_variable_in_a_librarys_class*",
            "*held by app_helpers.Registry.items (list) -> [[]0] -> ResourceVariable",
            "     holder: a module-level cache or registry of the library fake-reg",
        ]
    )
    result.stdout.no_fnmatch_line("*cut off their TensorFlow resources*")
