#!/usr/bin/env bash
# Refresh requirements/lock-pyX.Y.txt, the versions `make setup|demo|test` and CI install by default.
#
# In a new virtual environment (never the one you work in, whose history hides drift) it installs berds the
# way `make setup LOCKED=0` does, with the newest versions pyproject.toml allows; runs the test suite on it
# (SKIP_TESTS=1 skips that, for a lock you will test yourself); and only when the tests pass writes every
# installed distribution as `name==version` to the lock. Run it on each Python you support:
#     make lock                       # or: PYTHON=python3.12 bash scripts/update_lock.sh
# then commit the lock with the test run's summary in the message.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TEST_WORKERS=${TEST_WORKERS:-2}
ver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
lock="requirements/lock-py$ver.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "installing the newest allowed versions into $work/venv (Python $ver) ..."
make --no-print-directory setup LOCKED=0 PYTHON="$PYTHON" VENV="$work/venv" TORCH_SPEC="$TORCH_SPEC"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    echo "running the test suite on them ..."
    make --no-print-directory test LOCKED=0 PYTHON="$PYTHON" VENV="$work/venv" TORCH_SPEC="$TORCH_SPEC" \
        TEST_WORKERS="$TEST_WORKERS"
fi
mkdir -p requirements
{
    echo "# The versions berds' test suite passed with on Python $ver ($(uname -m), $(date -u +%Y-%m-%d))."
    echo "# Written by scripts/update_lock.sh (make lock); installed as constraints by make and .ci/run."
    echo "# torch is pinned without its local build tag (+cpu, +cu124): set TORCH_SPEC for another build."
    "$work/venv/bin/python" -m pip freeze --all --exclude-editable \
        | sed -E 's/^(torch==[^+]+)\+.*/\1/' | LC_ALL=C sort -f
} > "$lock.tmp"
mv "$lock.tmp" "$lock"
echo "wrote $lock ($(grep -c '==' "$lock") pins)"
