#!/usr/bin/env bash
# Regenerates golden/cases/ from PyTorch (see golden/README.md).
#
#   golden/regenerate.sh           regenerate into golden/cases/
#   golden/regenerate.sh --check   regenerate, then fail if golden/cases/ differs from git (CI)
#
# PyTorch is pinned and lives in a virtual environment OUTSIDE the repository:
# ${TPUEMU_GOLDEN_VENV:-$HOME/.cache/tpuemu/golden-venv} (created on first use: about 2 minutes
# and 5 GB; the CUDA build of torch runs on the CPU).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${TPUEMU_GOLDEN_VENV:-$HOME/.cache/tpuemu/golden-venv}"
python="${PYTHON:-python3}"
# Exact pins: a different PyTorch gives different samples and different bits.
pins=(torch==2.15.0 expecttest==0.3.0 numpy==2.4.6)

check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi

if [[ ! -x "$venv/bin/python" ]]; then
  echo "creating $venv" >&2
  "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import torch, expecttest, numpy; assert torch.__version__.startswith("2.15.0")' 2>/dev/null; then
  "$venv/bin/pip" install --quiet "${pins[@]}"
fi

rm -rf "$here/cases"
start=$(date +%s)
"$venv/bin/python" "$here/generate.py" --out "$here/cases" --quiet "$@"
echo "generated in $(( $(date +%s) - start )) s" >&2

if (( check )); then
  cd "$here/.."
  changes="$(git status --porcelain -- golden/cases)"  # modified, deleted and new files
  if [[ -n "$changes" ]]; then
    echo "golden/cases/ differs from the committed files after regeneration:" >&2
    echo "$changes" | head -50 >&2
    git diff --stat -- golden/cases | tail -5 >&2
    exit 1
  fi
  echo "golden/cases/ is reproducible: regeneration gave the committed files byte for byte" >&2
fi
