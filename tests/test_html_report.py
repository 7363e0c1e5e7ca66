"""With pytest-html installed, its report shows the plugin's columns and each row's leaks."""

from __future__ import annotations

import html
import re

import pytest
import tensorflow  # noqa: F401  (imported before the inner runs: they would import it again)
from support import run_inner

pytest.importorskip("pytest_html")

SUITE = """
    import tensorflow as tf

    KEPT = []

    def test_clean():
        assert float(tf.reduce_sum(tf.ones([256, 256]))) == 256 * 256  # 256 KiB at the peak

    def test_leaks_one():
        KEPT.append(tf.ones([4]))
"""


def test_the_html_report_has_the_plugin_s_columns_and_the_leaks_in_the_row_s_details(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_html=SUITE)
    result = run_inner(pytester, "-p", "no:randomly", "--html=report.html", "--self-contained-html")
    result.assert_outcomes(passed=2, errors=1)
    page = html.unescape((pytester.path / "report.html").read_text(encoding="utf-8"))
    for header in ("Peak", "Stayed in use", "Leaks"):
        assert f'<th class="col-eagersession">{header}</th>' in page
    # each row's cells sit in the page's data, after pytest-html's Duration
    assert columns_of(page, "test_html.py::test_clean")[0] == "256.0 KiB"
    assert columns_of(page, "test_html.py::test_clean")[2] == "0"
    assert columns_of(page, "test_html.py::test_leaks_one")[2] == "1 (16 B)"
    assert "<pre>eagersession: 1 leaked" in page
    assert "held by test_html.KEPT (list) -&gt; [0] -&gt; EagerTensor</pre>" in page


def columns_of(page: str, test_id: str) -> list[str]:
    """The plugin's cells in the first row of ``test_id``."""
    row = re.search(re.escape(f'col-testId\\">{test_id}</td>') + r"(.*?)col-links", page)
    assert row is not None, test_id
    return re.findall(r'col-eagersession\\">(.*?)</td>', row.group(1))
