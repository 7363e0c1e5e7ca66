# Sourced by ./scripts/test and ./scripts/installed: what a user installs, in an environment of
# its own. The wheel in dist/ (./scripts/dist builds it) is installed with its cpu and test
# extras, not editable, into a fresh virtual environment outside the source tree, made anew on
# every call. Then `installed COMMAND ...` runs a command with that environment first on PATH,
# from a scratch folder outside the tree (a command run from the tree's root, `python -m
# pytest` or `python -c` alike, would import the package from the tree).
# EAGERSESSION_TEST_INSTALLED tells tests/conftest.py to refuse a run that imports the package
# from the tree after all.
set -euo pipefail
INSTALLED_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INSTALLED_PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
INSTALLED_VENV="${EAGERSESSION_INSTALLED_VENV:-${TMPDIR:-/tmp}/pytest-eagersession-installed}"
case "$INSTALLED_VENV" in
    "$INSTALLED_ROOT" | "$INSTALLED_ROOT"/*)
        echo "EAGERSESSION_INSTALLED_VENV must be outside the source tree" >&2
        exit 2
        ;;
esac
shopt -s nullglob
INSTALLED_WHEELS=("$INSTALLED_ROOT"/dist/pytest_eagersession-*.whl)
shopt -u nullglob
if [ "${#INSTALLED_WHEELS[@]}" -ne 1 ]; then
    echo "dist/ holds ${#INSTALLED_WHEELS[@]} wheels, not one: run ./scripts/dist first" >&2
    exit 2
fi
echo "installing ${INSTALLED_WHEELS[0]##*/}[cpu,test] into $INSTALLED_VENV (about a minute)" >&2
rm -rf "$INSTALLED_VENV"
"$INSTALLED_PYTHON" -m venv "$INSTALLED_VENV"
# (pip's warnings about this machine's index locations are left out, as in env.sh.)
"$INSTALLED_VENV/bin/python" -m pip install --quiet --upgrade pip 2>&1 \
    | { grep -v "^WARNING: Location" >&2 || true; }
"$INSTALLED_VENV/bin/python" -m pip install --quiet "${INSTALLED_WHEELS[0]}[cpu,test]" 2>&1 \
    | { grep -v "^WARNING: Location" >&2 || true; }
"$INSTALLED_VENV/bin/python" -c "import tensorflow, objgraph, pytest_eagersession" \
    || { echo "installing the wheel failed" >&2; exit 1; }
INSTALLED_SCRATCH="$(mktemp -d)"
trap 'rm -rf "$INSTALLED_SCRATCH"' EXIT

installed() {
    (
        cd "$INSTALLED_SCRATCH"
        export PATH="$INSTALLED_VENV/bin:$PATH" VIRTUAL_ENV="$INSTALLED_VENV"
        export EAGERSESSION_TEST_INSTALLED="$INSTALLED_ROOT"
        export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
        unset PYTHONPATH
        "$@"
    )
}

# pytest on this repository's tests, with its configuration, from outside the tree.
installed_pytest() {
    installed python -m pytest -c "$INSTALLED_ROOT/pyproject.toml" --rootdir "$INSTALLED_ROOT" \
        "$@"
}
