#!/usr/bin/env bash
# The Python package (python/, PyO3 + maturin) and its Ray backend:
# builds the extension into a venv under target/, installs what is missing
# there (maturin, pandas, ray, pytest from PyPI), and runs python/tests
# against the mmsim binary `cargo test` built (target/debug/mmsim).
#
# Everything stays under target/: the venv (target/python-venv), the
# extension's build (target/python) and its wheel.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)

venv=target/python-venv
if [ ! -x "$venv/bin/python" ]; then
    # Python 3.9 or later: pyenv's 3.11 where there is one, else python3.
    python=python3
    for candidate in "$HOME/.pyenv/versions"/3.11*/bin/python3 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1; then
            python=$candidate
            break
        fi
    done
    echo "python suite: creating a venv in $venv with $python"
    "$python" -m venv "$venv"
fi
py="$venv/bin/python"
missing=()
for module in maturin pandas ray pytest; do
    "$py" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)" ||
        missing+=("$module")
done
if [ ${#missing[@]} -ne 0 ]; then
    echo "python suite: installing ${missing[*]} from PyPI into $venv"
    "$py" -m pip install --quiet --disable-pip-version-check "${missing[@]}"
fi

# The extension, as a wheel built with its own cached target directory,
# installed over any earlier build.
wheels=target/python/wheels
rm -rf "$wheels"
(
    cd python
    CARGO_TARGET_DIR=../target/python VIRTUAL_ENV="$PWD/../$venv" \
        "../$venv/bin/maturin" build --release --quiet --interpreter "../$py" --out "../$wheels"
)
"$py" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheels"/mmsim-*.whl

# The binary the tests compare with, from the same commit.
if [ ! -x target/debug/mmsim ] || [ -n "$(find src build.rs Cargo.toml -newer target/debug/mmsim -print -quit)" ]; then
    cargo build --quiet
fi
export MMSIM_BIN="$PWD/target/debug/mmsim"
# Ray's local cluster: no usage report, its session files under target/.
export RAY_USAGE_STATS_ENABLED=0
# No __pycache__ in the source tree.
export PYTHONDONTWRITEBYTECODE=1
status=0
"$py" -m pytest -q -p no:cacheprovider python/tests || status=$?
echo "python suite: $(($(date +%s) - started)) s"
exit $status
