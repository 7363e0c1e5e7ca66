"""The documentation's examples run as promised, and the reports it shows are today's.

``docs/generate.py`` runs every test under ``docs/examples`` once, under the plugin, in one
pytest subprocess; the texts it produces must equal the committed ``docs/generated/*.txt``. The
site itself is built with ``mkdocs build --strict`` by ``./scripts/test`` (``./scripts/docs``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from support import load_script

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SNIPPET = re.compile(r'--8<-- "(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"')
LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


generate = load_script(DOCS / "generate.py", "docs_generate")


def pages() -> dict[str, str]:
    return {
        str(path.relative_to(DOCS)): path.read_text(encoding="utf-8")
        for path in sorted(DOCS.rglob("*.md"))
    }


@pytest.fixture(scope="module")
def produced() -> Any:
    return generate.produce()


def test_examples_get_the_verdicts_their_names_promise(produced: Any) -> None:
    # produce() raises GenerationError naming any example with another verdict
    outcomes = produced.outcomes
    files = {nodeid.split("::")[0] for nodeid in outcomes}
    assert files == {f"docs/examples/{path.name}" for path in (DOCS / "examples").glob("test_*.py")}
    failing = [nodeid for nodeid, outcome in outcomes.items() if outcome != "passed"]
    fixed = [nodeid for nodeid in outcomes if "::test_fixed_" in nodeid]
    assert len(failing) >= 10
    assert len(fixed) >= 9
    assert all(outcomes[nodeid] == "passed" for nodeid in fixed)


def test_committed_reports_are_what_the_code_prints(produced: Any) -> None:
    problems = generate.stale(produced)
    assert not problems, (
        "the reports under docs/generated/ are not what the examples print today; "
        "run: python docs/generate.py\n" + "\n".join(problems)
    )


def test_every_example_and_report_is_shown_on_a_page() -> None:
    included = {
        match.group("path") for text in pages().values() for match in SNIPPET.finditer(text)
    }
    mentioned = "\n".join(pages().values())
    for path in sorted((DOCS / "generated").glob("*.txt")):
        assert f"docs/generated/{path.name}" in included, f"{path.name} is on no page"
    for path in sorted((DOCS / "examples").glob("*.py")):
        assert f"docs/examples/{path.name}" in mentioned, f"{path.name} is on no page"


def test_every_snippet_section_exists() -> None:
    for page, text in pages().items():
        # a formatter that takes the directive for Python turns it into "--8 < --": plain text
        assert "--8 <" not in text, f"{page}: a mangled snippet directive"
        for match in SNIPPET.finditer(text):
            source = ROOT / match.group("path")
            assert source.exists(), f"{page}: {match.group('path')} does not exist"
            section = match.group("section")
            if section:
                content = source.read_text(encoding="utf-8")
                for mark in (f"# --8<-- [start:{section}]", f"# --8<-- [end:{section}]"):
                    assert mark in content, f"{page}: {source.name} lacks {mark}"


def test_readme_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [m.group("target") for m in LINK.finditer(readme)]
    local = [t for t in targets if "://" not in t and not t.startswith("mailto:")]
    assert any(t.startswith("docs/") for t in local), "the README links into the docs"
    for target in local:
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            f"frame of f ({generate.ROOT}/docs/examples/test_x.py:3)",
            "frame of f (docs/examples/test_x.py:3)",
        ),
        ("<CallbackReference at 0x7f0ab9c56790>", "<CallbackReference at 0x...>"),
        (
            "._by_val_external (MutationAwareDict) -> [140024244845072] -> EagerTensor",
            "._by_val_external (MutationAwareDict) -> [<id>] -> EagerTensor",
        ),
        ("['CustomGradient-204'] (dict)", "['CustomGradient-<n>'] (dict)"),
        (
            "  1. tensor: EagerTensor float32[1000,64] 250.0 KiB  \n\n",
            "  1. tensor: EagerTensor float32[1000,64] 250.0 KiB\n",
        ),
    ],
)
def test_normalize_removes_what_depends_on_the_machine(raw: str, expected: str) -> None:
    assert generate.normalize(raw) == expected.rstrip("\n") + "\n"


def test_normalize_refuses_a_timed_out_holder_search() -> None:
    with pytest.raises(generate.GenerationError, match="ran out of time"):
        generate.normalize("no holder found within 2.0 s (the search stopped there)")


def test_failure_text_takes_a_teardown_report_whole_and_a_failure_s_e_lines() -> None:
    teardown = ["____ ERROR at teardown of test_x ____", "report line 1", "  report line 2"]
    assert generate.failure_text(teardown) == "report line 1\n  report line 2"
    failure = [
        "____ test_y ____",
        "docs/examples/test_y.py:3: in test_y",
        "    assert_no_growth(step)",
        "E   pkg.GrowthError: step grows:",
        "E     run 1: +1 object (4 B)",
    ]
    assert (
        generate.failure_text(failure) == "pkg.GrowthError: step grows:\n  run 1: +1 object (4 B)"
    )


def test_the_readme_shows_the_committed_version_matrix() -> None:
    table = (DOCS / "generated" / "matrix.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- matrix table: docs/generated/matrix.md")
    start = readme.index("\n", start) + 1
    end = readme.index("<!-- end of matrix table -->")
    assert readme[start:end] == table
    assert '--8<-- "docs/generated/matrix.md"' in pages()["compatibility.md"]
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")]
    stable = [row for row in rows if "pre-release" not in row]
    assert len(stable) == 5
    assert len(rows) == 6  # and the next TensorFlow's release candidate, allowed to fail
    assert all("failed" not in row and "error" not in row for row in stable), table
    assert sum("(the floors)" in row for row in stable) == 1
