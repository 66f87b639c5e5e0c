#!/usr/bin/env bash
# The main job: a transformer block forward and backward on an emulated TPU v5e in Strict,
# DeferAndFuse and Compile, side by side, with a trace per mode. Builds on first use.
#
#   scripts/demo.sh [tpuemu demo options, e.g. --chip v6e]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v cargo >/dev/null; then
  echo "error: cargo not found; install Rust 1.95 (https://rustup.rs)" >&2
  exit 1
fi
cargo build --release --locked --quiet
exec target/release/tpuemu demo "$@"
