#!/usr/bin/env bash
# Runs the project's Python with tpuemu (the PyTorch bridge) built from this working tree.
#
#   scripts/python.sh examples/train_mlp.py      run a script
#   scripts/python.sh -m pytest python/tests     any python arguments
#   scripts/python.sh - <<'PY' ... PY            a program on stdin
#
# The environment lives outside the repository, at ${TPUEMU_VENV:-~/.cache/tpuemu/venv}
# (scripts/python-env.sh creates it on a fresh machine with the pins of
# python/requirements.txt: torch 2.15.0 is about 5 GB and a few minutes). It then builds the package
# when its sources changed: the Rust extension with maturin (`maturin develop --release`,
# editable: python/tpuemu is what Python imports) and the C++ shim against the installed torch
# (g++ and ninja; about a minute the first time). Nothing is downloaded at run time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "python.sh: $*" >&2; }
venv="$("$root/scripts/python-env.sh")"

# Rebuild the Rust extension (which links the command line too) when a source it depends on
# is newer than the last build from this tree (or another tree's build is installed).
stamp="$root/python/tpuemu/.built"
so="$(ls "$root"/python/tpuemu/_rust*.so 2>/dev/null | head -1 || true)"
installed="$("$venv/bin/python" -c 'import importlib.util as u; s = u.find_spec("tpuemu"); print(s.submodule_search_locations[0] if s else "")' 2>/dev/null || true)"
if [[ -z "$so" || ! -f "$stamp" || "$installed" != "$root/python/tpuemu" ]] ||
  [[ -n "$(find "$root/python/src" "$root/python/Cargo.toml" "$root/python/pyproject.toml" \
    "$root/backend/src" "$root/backend/kernels/src" "$root/backend/schema/src" \
    "$root/backend/macros/src" "$root/backend/build.rs" "$root/emulator/src" "$root/isa/src" "$root/Cargo.lock" \
    "$root/src" "$root/visualizer/src" "$root/workloads/src" "$root/golden/src" \
    "$root/Cargo.toml" -newer "$stamp" -print -quit)" ]]; then
  log "building the Rust extension (maturin develop --release)"
  # Installed from this tree already: only the extension module needs rebuilding in place
  # (unless the package's metadata, its entry points, changed).
  skip=()
  [[ "$installed" == "$root/python/tpuemu" && -f "$stamp" && ! "$root/python/pyproject.toml" -nt "$stamp" ]] &&
    skip=(--skip-install)
  (cd "$root/python" && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
    "$venv/bin/maturin" develop --release --quiet "${skip[@]}" >&2)
  touch "$stamp"
fi
# The C++ shim (rebuilt when its sources changed).
PATH="$venv/bin:$PATH" "$venv/bin/python" "$root/python/tpuemu/_build.py" >&2

exec "$venv/bin/python" "$@"
