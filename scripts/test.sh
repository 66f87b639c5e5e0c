#!/usr/bin/env bash
# Runs every test of the workspace: the Rust tests, then the PyTorch bridge's Python tests.
# On a fresh machine it needs the Rust toolchain (cargo), Python 3.9+ with venv, and g++ (the
# bridge's C++ shim); the Python environment is created outside the repository on first use
# (scripts/python-env.sh: torch 2.15.0 from PyPI, about 5 GB). Nothing is downloaded at run time
# (crates come from crates.io on the first build).
#
#   scripts/test.sh            all tests
#   scripts/test.sh FILTER     only tests whose name contains FILTER
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v cargo >/dev/null; then
  echo "error: cargo not found; install Rust 1.95 (https://rustup.rs)" >&2
  exit 1
fi
# Screenshot tests render on the CPU; a private runtime dir silences Mesa warnings if a GPU
# stack is present.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
cargo test --workspace --release --locked -- "$@"

# The Python tests (python/tests), against the package built from this tree; one worker per
# core (at most 4), each running whole files (a file's module fixtures are built once) but the
# operator database's entries, dealt into test classes (python/tests/test_op_db.py).
pytest_args=(-q -p no:cacheprovider -n auto --maxprocesses 4 --dist loadscope python/tests)
if [[ $# -gt 0 ]]; then pytest_args+=(-k "$1"); fi
rc=0
scripts/python.sh -m pytest "${pytest_args[@]}" || rc=$?
# 5: no Python test matched the filter.
if [[ $rc -ne 0 && ! ($rc -eq 5 && $# -gt 0) ]]; then exit $rc; fi
