#!/usr/bin/env bash
# Checks that the Python extension's build (maturin, `cargo build -p tpuemu-python`) and the test
# build (`cargo test --workspace`) resolve the workspace's crates alike, so a cold CI run compiles
# them once (python/Cargo.toml's "build alignment" says why they might not). Seconds when both
# builds are current; on a mismatch it names the crates built twice.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
libs() { { grep -o 'libtpuemu\(_[a-z]*\)\?-[0-9a-f]*\.rlib' || true; } | sort -u; }
tests="$(cargo test --workspace --release --locked --no-run -q --message-format=json | libs)"
ext="$(cargo build --release --locked -p tpuemu-python -q --message-format=json | libs)"
if [[ -z "$tests" || -z "$ext" ]]; then
  echo "error: cargo named no workspace crate for one of the builds (did it fail?)" >&2
  exit 1
fi
twice="$(comm -13 <(echo "$tests") <(echo "$ext"))"
if [[ -n "$twice" ]]; then
  echo "error: the extension's build compiles these crates apart from the test build:" >&2
  echo "$twice" >&2
  echo "name the features that differ in python/Cargo.toml (compare cargo's --message-format=json" >&2
  echo "\"features\" of both builds)" >&2
  exit 1
fi
echo "check-shared-build: the extension and the tests share $(echo "$ext" | wc -l) workspace crates"
