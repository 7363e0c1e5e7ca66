"""TensorFlow's private names: each one in the table resolves, and only ``_tf`` uses them."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_eagersession._tf import names
from pytest_eagersession._tf.names import NAMES, PRIVATE_PACKAGES, PrivateName

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_eagersession"

_PRIVATE_PATH = re.compile(
    r"\b(?:" + "|".join(re.escape(package) for package in PRIVATE_PACKAGES) + r")\b"
)


def _keras() -> Any:
    return pytest.importorskip("keras")


def _samples(tf: Any) -> dict[str, Callable[[], object]]:
    """A maker of one object of each kind the table names attributes of."""
    from tensorflow.python.eager import context

    return {
        "tensor": lambda: tf.constant([1.0]),
        "variable": lambda: tf.Variable(1.0),
        "iterator": lambda: iter(tf.data.Dataset.range(2)),
        "table": lambda: tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer([1], [2]), -1
        ),
        "context": context.context,
        "generator": lambda: tf.random.Generator.from_seed(1),
        "keras variable": lambda: _keras().Variable(1.0),
        "tape": lambda: tf.GradientTape(persistent=True),
        "function": lambda: tf.function(lambda: 1),
    }


def _resolve(start: object, chain: str) -> bool:
    obj = start
    for part in chain.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


@pytest.mark.parametrize("name", NAMES, ids=lambda name: name.path)
def test_each_private_name_resolves_on_the_installed_tensorflow(name: PrivateName) -> None:
    tf = pytest.importorskip("tensorflow")
    if name.module.startswith("keras"):
        _keras()
    module = importlib.import_module(name.module)
    start = _samples(tf)[name.of]() if name.of else module
    found = _resolve(start, name.attribute)
    if not found and not name.required:
        pytest.skip(f"{name.path} is optional and absent from TensorFlow {tf.__version__}")
    assert found, f"{name.path} is gone in TensorFlow {tf.__version__}: see {name.used_by}"


def test_the_table_names_each_kind_of_object_it_makes_a_sample_of() -> None:
    tf = pytest.importorskip("tensorflow")
    assert {name.of for name in NAMES if name.of} <= set(_samples(tf))


def test_the_tested_versions_are_the_support_range() -> None:
    from pytest_eagersession.base.support_range import TENSORFLOW_RANGE

    assert names.TESTED_VERSIONS == TENSORFLOW_RANGE == ((2, 16), (2, 21))


def _modules_outside_tf() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_tf" not in path.relative_to(PACKAGE).parts:
            yield path


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def private_uses(source: str) -> list[str]:
    """The private TensorFlow and Keras names ``source`` mentions, outside docstrings.

    Imports of, and strings naming, their private modules (``tensorflow.python``, ``keras.src``,
    ...); and the table's ``_private`` attributes, read on anything but ``self`` and ``cls`` or
    passed as a string to ``getattr``, ``hasattr`` or ``setattr``.
    """
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    private = names.private_attributes()
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [f"{line}: import {a.name}" for a in node.names if _PRIVATE_PATH.match(a.name)]
        elif isinstance(node, ast.ImportFrom) and _PRIVATE_PATH.match(node.module or ""):
            found.append(f"{line}: from {node.module} import ...")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and _PRIVATE_PATH.search(node.value)
        ):
            found.append(f"{line}: {node.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr in private:
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append(f"{line}: .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in private
        ):
            found.append(f"{line}: {node.func.id}(..., {node.args[1].value!r})")
    return found


@pytest.mark.parametrize("path", list(_modules_outside_tf()), ids=lambda path: path.stem)
def test_no_module_outside_tf_names_a_private_tensorflow_name(path: Path) -> None:
    assert private_uses(path.read_text()) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from tensorflow.python.eager import x\n", ["1: from tensorflow.python.eager import ..."]),
        ("import keras.src.saving\n", ["1: import keras.src.saving"]),
        ("x = 'tensorflow.python.ops.x'\n", ["1: 'tensorflow.python.ops.x'"]),
        ("ctx._clear_caches()\n", ["1: ._clear_caches"]),
        ("getattr(tape, '_persistent', False)\n", ["1: getattr(..., '_persistent')"]),
        ('"""See tensorflow.python.eager."""\n', []),
        ("self._handle = None\n", []),
        ("import tensorflow as tf\nkeras_path = '/keras/'\n", []),
    ],
)
def test_the_scan_finds_private_names_and_nothing_else(source: str, expected: list[str]) -> None:
    assert private_uses(source) == expected
