"""The pages a user reads first: what they show, and that their figures have one source.

Figures come from ``docs/benchmarks.json`` (written by ``./scripts/bench``): the committed
``docs/benchmarks.md`` must be its rendering, and every figure of the README's prose must be
one that page prints. No page a user reads names a commit or an issue.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import CHAIN_BUDGET, INNER_RUN, load_script

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The pages users read: the README, CONTRIBUTING and the documentation site.
USER_PAGES = [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]

#: A measured figure: a decimal number with its unit (versions, such as 2.16.1, have none).
FIGURE = re.compile(r"[+-]?\d+\.\d+ ?(?:ms|s|x|%|MiB|KiB|GiB)(?![\w.])")
#: What a development diary names: an issue by number, or a commit by its hash.
ISSUE = re.compile(r"(?<![\w&/])#\d+\b|\bissues? \d+\b", re.IGNORECASE)
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")

run_all = load_script(ROOT / "benchmarks" / "run_all.py", "run_all")


def prose(text: str) -> str:
    """The text without its code blocks and HTML comments."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)


def test_the_first_screen_shows_how_to_install_and_use_it() -> None:
    first = "\n".join(README.read_text(encoding="utf-8").splitlines()[:40])
    assert 'pip install "pytest-eagersession[cpu]"' in first
    assert "@pytest.mark.cleanup(" in first
    assert "eager_session" in first


def test_the_benchmarks_page_is_the_rendering_of_its_json() -> None:
    results = json.loads((DOCS / "benchmarks.json").read_text(encoding="utf-8"))
    assert (DOCS / "benchmarks.md").read_text(encoding="utf-8") == run_all.render(results), (
        "docs/benchmarks.md is not what docs/benchmarks.json renders to: "
        "python benchmarks/run_all.py --render"
    )


def test_every_figure_of_the_readme_is_one_the_benchmarks_page_prints() -> None:
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    figures = FIGURE.findall(prose(README.read_text(encoding="utf-8")))
    assert len(figures) >= 5  # the README quotes the headline figures
    assert [figure for figure in figures if figure not in page] == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("+0.60 ms of wall time and 1.04x", ["+0.60 ms", "1.04x"]),
        ("TensorFlow 2.16.1, pytest 8.3 and Python 3.10", []),
        ("0.26 s; +28.8%", ["0.26 s", "+28.8%"]),
    ],
)
def test_figures_are_told_from_versions(text: str, found: list[str]) -> None:
    assert FIGURE.findall(text) == found


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_user_page_names_a_commit_or_an_issue(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert ISSUE.findall(text) == []
    assert COMMIT.findall(text) == []


@pytest.mark.parametrize(
    ("text", "issues", "commits"),
    [
        ("fixed in 85ea58f (issue #24)", 1, 1),
        ("see issue 23, and the peak of 20b67dd", 1, 1),
        ("a colour #fff, [link](page.md#reading-the-report), 1,024 B, deadbeef", 0, 0),
    ],
)
def test_the_diary_patterns(text: str, issues: int, commits: int) -> None:
    assert len(ISSUE.findall(text)) == issues
    assert len(COMMIT.findall(text)) == commits


def test_the_release_notes_are_release_notes() -> None:
    notes = (DOCS / "changelog.md").read_text(encoding="utf-8")
    assert len(notes.split()) <= 800
    assert "## 0.1.0" in notes
    assert "### Requirements" in notes


def test_the_readme_usage_example_does_what_it_says(pytester: pytest.Pytester) -> None:
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- usage:start -->", 1)[1].split("<!-- usage:end -->", 1)[0]
    code = block.split("```python\n", 1)[1].split("```", 1)[0]
    pytester.makepyfile(test_usage=code)
    result = pytester.runpytest_subprocess(*INNER_RUN, CHAIN_BUDGET, "-rA")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_usage.py::test_loss_is_recorded leaked 1 TensorFlow object*",
            "*held by test_usage.HISTORY (list) -> [[]0[]] -> EagerTensor*",
            "LEAKED test_usage.py::test_loss_is_recorded*",
        ]
    )
