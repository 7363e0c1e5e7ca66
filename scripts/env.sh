# Sourced by the other scripts: create (or refresh) the project's own virtual environment in .venv.
# It is rebuilt whenever pyproject.toml changes, so nothing depends on what was installed by hand.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
STAMP="$VENV/.installed-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
    echo "setting up $VENV (TensorFlow is large: about a minute)" >&2
    rm -rf "$VENV"
    if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
        # Debian ships venv's pip bootstrap separately (python3-venv): install it when we can.
        rm -rf "$VENV"
        if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
            apt-get update -qq && apt-get install -y -qq "python3-venv" >/dev/null
        fi
        "$PYTHON" -m venv "$VENV" || {
            echo "cannot create a virtual environment: install python3-venv" >&2
            exit 1
        }
    fi
    "$VENV/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v "^WARNING: Location" >&2 || true
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[cpu,dev]" 2>&1 | grep -v "^WARNING: Location" >&2 || true
    "$VENV/bin/python" -c "import tensorflow, objgraph, pytest_eagersession" 2>/dev/null \
        || { echo "environment set-up failed" >&2; exit 1; }
    touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
cd "$ROOT"
