"""The real-suite gate: other people's tests, with the plugin off and on, side by side.

Runs two libraries' own tests, each a fixed subset of the test files their installed wheels
ship, as suites of their own: Keras's (with the project's ``tf.test.TestCase``-style suite,
``realsuite/tf_style``) and Sonnet's (``dm-sonnet``: ``tf.test.TestCase`` and absl
``parameterized`` tests), so that the gate is not tuned to one library. Each suite runs twice:
with ``-p no:eagersession`` and with the plugin on, at its default settings; each is reported
on its own (counts, the on/off wall-time ratio, the plugin's time by phase), then every test's
outcome is compared. The plugin may change a test's outcome in one way only: by reporting a leak
at its teardown. Any other difference (a failure, another error, a test that passes only with
the plugin) breaks the gate.

    python benchmarks/realsuite.py [--only on|off] [--suite NAME ...] [--json PATH] [-n N]
                                   [--rounds N] [--side-by-side]
                                   [--eagersession-OPTION=VALUE ...] [-- PYTEST_ARGS ...]

``--rounds 2`` runs each side twice, off-on-on-off, and adds the times up: on a machine whose
speed drifts while the gate runs (a shared one does, by several percent in a few minutes), the
side that runs second would otherwise carry the drift alone. ``--side-by-side`` runs the two
sides of a suite at the same time instead, each with half of ``-n``'s workers, so that the
drift falls on both alike; the side that ends first runs again, untimed, until the other ends,
so that the machine stays as busy to the end. Each side's CPU time is its own (the kernel's
account of its process and workers). CI runs ``--side-by-side -n 2 --rounds 2``: on its 2-core
machine one side's own rounds in turn differed by up to 17%; side by side, the plugin-off side
against itself came out at 1.01x (Sonnet) and 1.00x (Keras).

``--eagersession-*`` options go to the plugin-on runs; ``-n`` and everything after ``--``
(``-k``, ``-x``, ...) go to every run. ``--suite keras`` or ``--suite sonnet`` runs that suite
alone. ``--only on`` runs the plugin-on side alone (a version matrix job): a test then breaks
the gate if it fails or errors other than by a leak report, since every test here passes
without the plugin. ``--only off`` checks that baseline. Keras comes with TensorFlow; Sonnet
with the project's ``test`` extra: where it is not installed, its suite is skipped with a line
saying so, and the verdict names it. ``./scripts/realsuite`` runs this in the project's
environment. Exit status: 0 the gate holds, 1 it does not, 2 a run did not complete (a crash,
a usage error, no report).
"""
