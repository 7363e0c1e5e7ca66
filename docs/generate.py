"""Write the report texts the documentation shows, by running the examples under docs/examples.

    python docs/generate.py          # (re)write docs/generated/*.txt
    python docs/generate.py --check  # fail, naming the files, if a committed text is stale

Every test under ``docs/examples`` runs once, under the plugin, in one pytest subprocess (with
``-v``: every leak is traced, and each holder search may take 2 s). Tests named ``test_leaks_*``
or ``test_fails_*`` must fail or error, the others must pass; the text of each failing one is
written to ``docs/generated/<test name without test_>.txt``. The JSON and JUnit XML reports of
the same run, its most-memory table, a CI summary of the JSON, ``registry_chain.py`` (run
alone, without the plugin) and ``growing_suite.py`` (run twice, the second time failing on an
increase of its peak) give the other snippets. The texts are normalized so that they do not
depend on the machine: paths are made relative to the repository, memory addresses and object
ids replaced.
``tests/test_docs.py`` checks that the committed texts are what the code prints today.
"""

from __future__ import annotations

import argparse
import difflib
import html
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
GENERATED = ROOT / "docs" / "generated"
#: Tests whose name starts so must fail or error; every other test must pass.
FAILING_PREFIXES = ("test_leaks_", "test_fails_")
#: The test whose report the getting-started page walks through.
FIRST_REPORT = "docs/examples/test_first_report.py::test_leaks_debugging_leftover"
#: The test whose JSON and JUnit XML entries the plugin page shows.
CI_EXAMPLE = "docs/examples/test_module_cache.py::test_leaks_normalizer_cache"
#: The tests the end-of-run table of the highest peaks lists.
MOST_MEMORY = 5

_HEADER = re.compile(r"^_{3,} (?P<title>.+?) _{3,}$")
_BANNER = re.compile(r"^={3,}( .* ={3,})?$")


class GenerationError(RuntimeError):
    """The examples did not behave as their names promise, or gave unstable text."""


@dataclass(frozen=True)
class Produced:
    """What one run of the examples gives: each snippet's text, and each test's outcome."""

    snippets: dict[str, str]
    outcomes: dict[str, str]


#: ``python -m pytest`` without the current folder first on sys.path: the examples run from the
#: root, and the package they import must be the installed one when the tests run against the
#: installed wheel, never the tree's.
PYTEST_OUTSIDE_THE_TREE = (
    sys.executable,
    "-c",
    "import sys, pytest; del sys.path[0]; sys.exit(pytest.main())",
)


def environment() -> dict[str, str]:
    """The subprocesses' environment: CPU only, quiet TensorFlow, a fixed terminal width."""
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    for name in ("CI", "BUILD_NUMBER"):  # pytest would not shorten its summary lines
        env.pop(name, None)
    env.update(
        CUDA_VISIBLE_DEVICES="",  # "on CPU:0" everywhere, GPU or not
        TF_CPP_MIN_LOG_LEVEL="3",
        COLUMNS="100",
        PYTHONHASHSEED="0",
    )
    return env


def normalize(text: str) -> str:
    """Text that does not depend on the machine or the process."""
    text = text.replace(str(ROOT) + os.sep, "")
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", text)
    text = re.sub(r"\[\d{9,}\]", "[<id>]", text)  # a dict keyed by id()
    text = re.sub(r"CustomGradient-\d+", "CustomGradient-<n>", text)
    text = "\n".join(line.rstrip() for line in text.splitlines()).strip("\n") + "\n"
    if "no holder found within" in text:
        raise GenerationError(
            "a holder search ran out of time: the machine is too busy for stable text; "
            "run the generator again when it is quieter\n" + text
        )
    return text


def expected_outcome(nodeid: str) -> str:
    """``failed or error`` for a test whose name promises it, ``passed`` for the others."""
    name = nodeid.rsplit("::", 1)[-1]
    return "failed or error" if name.startswith(FAILING_PREFIXES) else "passed"


def sections(output: str) -> dict[str, list[str]]:
    """The lines of each ``____ title ____`` section of pytest's output, by title."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        header = _HEADER.match(line)
        if header:
            current = found.setdefault(header.group("title"), [])
            current.append(line)
            continue
        if _BANNER.match(line):
            current = None
            continue
        if current is not None:
            current.append(line)
    return found


def banner_section(output: str, title: str) -> list[str]:
    """The ``==== title ====`` banner and the lines under it, up to the next banner."""
    lines: list[str] = []
    for line in output.splitlines():
        if _BANNER.match(line):
            if lines:
                break
            if f" {title} " in line:
                lines.append(line)
            continue
        if lines:
            lines.append(line)
    return lines


def failure_text(lines: list[str]) -> str:
    """A section's report: a teardown error's text as is, a failure's ``E`` lines dedented."""
    body = lines[1:]
    if "ERROR at " in lines[0]:
        return "\n".join(body)
    errors = [line[1:] for line in body if line.startswith("E ") or line == "E"]
    indent = min((len(line) - len(line.lstrip()) for line in errors if line.strip()), default=0)
    return "\n".join(line[indent:] for line in errors)


def run_examples(folder: Path) -> tuple[str, Path, Path]:
    """Run every example once under the plugin; pytest's output and its two reports."""
    report_json = folder / "eagersession.json"
    report_xml = folder / "junit.xml"
    command = [
        *PYTEST_OUTSIDE_THE_TREE,
        "docs/examples",
        "-v",
        "--tb=short",
        "-p",
        "no:cacheprovider",
        f"--eagersession-json={report_json}",
        f"--eagersession-most-memory={MOST_MEMORY}",
        f"--junitxml={report_xml}",
        f"--html={folder / 'report.html'}",
        "--self-contained-html",
    ]
    result = subprocess.run(
        command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=600
    )
    if not report_json.exists():
        raise GenerationError(f"pytest wrote no report:\n{result.stdout}\n{result.stderr}")
    return result.stdout, report_json, report_xml


def html_rows(report_html: Path, module: str) -> str:
    """pytest-html's table as text: its header, then the rows of ``module``'s tests. The
    durations and the memory that stayed move from run to run: named, not shown."""
    page = report_html.read_text(encoding="utf-8")
    blob = re.search(r'data-jsonblob="(.*?)"', page, re.S)
    if blob is None:
        raise GenerationError(f"no test data in {report_html}")
    tests = json.loads(html.unescape(blob.group(1)))["tests"]
    header = re.findall(r"<th[^>]*>(.*?)</th>", page)
    header = [cell for cell in header if cell][:6]  # Result, Test, Duration and the plugin's
    lines = [" | ".join(header)]
    for nodeid, rows in tests.items():
        if not nodeid.startswith(module):
            continue
        for row in rows:
            cells = [re.sub(r"<[^>]+>", "", cell) for cell in row["resultsTableRow"]][:6]
            cells[2], cells[4] = "<duration>", "<MiB>"
            lines.append(" | ".join(html.unescape(cell) for cell in cells))
    return "\n".join(lines) + "\n"


def increase_report() -> str:
    """``growing_suite.py`` run twice under ``--eagersession-fail-on-increase``: the second run's
    failure and summary line."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_growing.py").write_text((EXAMPLES / "growing_suite.py").read_text())
        outputs = []
        for batch in ("1024", "4096"):
            result = subprocess.run(
                [
                    *(sys.executable, "-m", "pytest", "-q", "-p", "no:randomly"),
                    "--eagersession-fail-on-increase",
                ],
                cwd=folder,
                env=dict(environment(), BATCH=batch),
                capture_output=True,
                text=True,
                timeout=300,
            )
            outputs.append(result.stdout)
    first, second = outputs
    if "2 passed" not in first or "1 failed, 1 passed" not in second:
        raise GenerationError(f"growing_suite.py did not pass, then fail:\n{first}\n{second}")
    [failure] = sections(second).values()
    summary = [line for line in second.splitlines() if line.startswith("FAILED ")]
    return normalize("\n".join([*failure, *summary]))


def junit_properties(report_xml: Path, nodeid: str) -> str:
    """The ``<properties>`` of one test case, the long JSON property's value elided."""
    module, name = nodeid.rsplit("::", 1)
    classname = module.removesuffix(".py").replace("/", ".")
    for case in ET.parse(report_xml).getroot().iter("testcase"):
        if case.get("classname") == classname and case.get("name") == name:
            properties = case.find("properties")
            if properties is None:
                break
            lines = ["<properties>"]
            for prop in properties:
                value = prop.get("value", "")
                if prop.get("name") == "eagersession":
                    value = "{...the test's entry of the JSON report...}"
                lines.append(f'  <property name="{prop.get("name")}" value="{value}"/>')
            lines.append("</properties>")
            return "\n".join(lines)
    raise GenerationError(f"no properties for {nodeid} in the JUnit XML report")


def produce() -> Produced:
    """Run the examples and return every snippet's normalized text; write nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        output, report_json, report_xml = run_examples(Path(tmp))
        tests = json.loads(report_json.read_text())["tests"]
        ci_properties = junit_properties(report_xml, CI_EXAMPLE)
        html_table = html_rows(report_xml.parent / "report.html", CI_EXAMPLE.split("::")[0])
        summary = subprocess.run(
            [sys.executable, str(EXAMPLES / "leak_summary.py"), str(report_json)],
            cwd=ROOT,
            env=environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    outcomes = {test["nodeid"]: test["outcome"] for test in tests}
    wrong = [
        f"{nodeid}: {outcome}, expected {expected_outcome(nodeid)}"
        for nodeid, outcome in outcomes.items()
        if (outcome == "passed") != (expected_outcome(nodeid) == "passed")
    ]
    if wrong:
        raise GenerationError("examples with another verdict than promised:\n" + "\n".join(wrong))

    found = sections(output)
    snippets: dict[str, str] = {}
    for nodeid, outcome in outcomes.items():
        if outcome == "passed":
            continue
        name = nodeid.rsplit("::", 1)[-1]
        title = f"ERROR at teardown of {name}" if outcome == "error" else name
        if title not in found:  # a unittest method: Class.test_name
            title = next((t for t in found if t.endswith(f".{name}")), title)
        if title not in found:
            raise GenerationError(f"no report for {nodeid} in pytest's output:\n{output}")
        key = name.removeprefix("test_")
        if key in snippets:
            raise GenerationError(f"two failing examples are named {name}; rename one")
        snippets[key] = normalize(failure_text(found[title]))

    # The first report's section, then the end-of-run summary's banner and its line for it.
    first = found[f"ERROR at teardown of {FIRST_REPORT.rsplit('::', 1)[-1]}"]
    banner, *leaked = banner_section(output, "eagersession: leaked TensorFlow objects")
    mine = [line for line in leaked if line.startswith(FIRST_REPORT + ":")]
    snippets["first_report_terminal"] = normalize("\n".join([*first, banner, *mine]))
    by_holder = leaked[: leaked.index("by test:")] if "by test:" in leaked else []
    snippets["run_summary_by_holder"] = normalize("\n".join([banner, *by_holder]))
    known, *kept = banner_section(output, "eagersession: TensorFlow's own known leaks")
    example = "docs/examples/test_shared_gradient.py::"
    snippets["shared_gradient"] = normalize(
        "\n".join([known, *(line for line in kept if line.startswith(example))])
    )
    snippets["most_memory_table"] = normalize(
        "\n".join(banner_section(output, "highest peak of tracked bytes"))
    )
    snippets["fails_on_increase"] = increase_report()
    entry = next(test for test in tests if test["nodeid"] == CI_EXAMPLE)
    # The plugin's own time moves from run to run: its phases are shown, not their figures.
    entry["timings"] = dict.fromkeys(entry.get("timings", {}), "<seconds>")
    for name in entry.get("stats") or {}:
        if name.endswith("_seconds"):
            entry["stats"][name] = "<seconds>"
    # So does the process's memory: its figures are named, not shown.
    retained = entry.get("retained") or {}
    for name, value in retained.items():
        if name.endswith("_bytes") and isinstance(value, int):
            retained[name] = "<bytes>"
    snippets["json_report"] = normalize(json.dumps(entry, indent=2))
    snippets["junit_properties"] = normalize(ci_properties)
    snippets["html_report_rows"] = normalize(html_table)
    snippets["leak_summary"] = normalize(summary.stdout + f"(exit status {summary.returncode})\n")
    chain = subprocess.run(
        [sys.executable, str(EXAMPLES / "registry_chain.py")],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if chain.returncode != 0:
        raise GenerationError(f"registry_chain.py failed:\n{chain.stdout}\n{chain.stderr}")
    snippets["registry_chain"] = normalize(chain.stdout)
    return Produced(snippets, outcomes)


def stale(produced: Produced) -> list[str]:
    """The generated files that differ from ``produced``, are missing, or are left over."""
    names = {f"{key}.txt" for key in produced.snippets}
    problems = []
    for key, text in sorted(produced.snippets.items()):
        path = GENERATED / f"{key}.txt"
        if not path.exists():
            problems.append(f"{path.relative_to(ROOT)} is missing")
        elif path.read_text(encoding="utf-8") != text:
            diff = difflib.unified_diff(
                path.read_text(encoding="utf-8").splitlines(),
                text.splitlines(),
                "committed",
                "printed now",
                lineterm="",
            )
            problems.append(f"{path.relative_to(ROOT)} is stale:\n" + "\n".join(diff))
    if GENERATED.exists():
        for path in sorted(GENERATED.glob("*.txt")):
            if path.name not in names:
                problems.append(f"{path.relative_to(ROOT)} is left over: no example makes it")
    return problems


def write(produced: Produced) -> list[Path]:
    """Write every snippet, and remove the files no example makes any more."""
    GENERATED.mkdir(parents=True, exist_ok=True)
    written = []
    for key, text in sorted(produced.snippets.items()):
        path = GENERATED / f"{key}.txt"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    names = {f"{key}.txt" for key in produced.snippets}
    for path in GENERATED.glob("*.txt"):
        if path.name not in names:
            path.unlink()
            written.append(path)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only check; write nothing")
    args = parser.parse_args()
    produced = produce()
    if args.check:
        problems = stale(produced)
        for problem in problems:
            print(problem)
        if problems:
            print("run: python docs/generate.py")
        return 1 if problems else 0
    for path in write(produced):
        print(f"wrote {path.relative_to(ROOT)}")
    print(f"{len(produced.snippets)} snippets from {len(produced.outcomes)} example tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
