#!/usr/bin/env bash
# Runs every test of the workspace. On a fresh machine it only needs the Rust toolchain
# (cargo); nothing else is installed or downloaded at run time (crates come from crates.io on
# the first build).
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
