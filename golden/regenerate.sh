#!/usr/bin/env bash
# Regenerates golden/cases/ and the backend's ATen schema table
# (backend/schema/src/aten-2.15.0.txt) from PyTorch (see golden/README.md).
#
#   golden/regenerate.sh           regenerate into golden/cases/
#   golden/regenerate.sh --check   regenerate, then fail if golden/cases/ differs from git (CI)
#
# PyTorch is pinned and lives in the project's one Python environment, OUTSIDE the repository:
# ${TPUEMU_VENV:-$HOME/.cache/tpuemu/venv} (scripts/python-env.sh creates it on first use with
# the exact pins of python/requirements.txt: about 4 minutes and 5 GB; the CUDA build of torch
# runs on the CPU). TPUEMU_GOLDEN_VENV is still honoured.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Exact pins (python/requirements.txt): a different PyTorch gives different samples and bits.
venv="$("$here/../scripts/python-env.sh")"

check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi

rm -rf "$here/cases"
start=$(date +%s)
"$venv/bin/python" "$here/generate.py" --out "$here/cases" --quiet "$@"
# The backend's table of PyTorch's operator schemas comes from the same PyTorch.
schemas="$here/../backend/schema/src/aten-2.15.0.txt"
"$venv/bin/python" "$here/../backend/schema/generate.py" "$schemas"
echo "generated in $(( $(date +%s) - start )) s" >&2

if (( check )); then
  cd "$here/.."
  changes="$(git status --porcelain -- golden/cases backend/schema/src/aten-2.15.0.txt)"  # modified, deleted and new files
  # Floating-point values of a few kernels depend on the host CPU in their last bits (see
  # compare_cases.py): modified case tensors within rounding of the committed ones pass.
  rounding="$(grep -E '^ M golden/cases/.*\.safetensors$' <<<"$changes" | cut -c4- || true)"
  if [[ -n "$rounding" ]] && "$venv/bin/python" golden/compare_cases.py $rounding; then
    echo "golden/cases/: $(wc -l <<<"$rounding") case files differ from the committed ones only by floating-point rounding (host-CPU-dependent kernels); the committed files are kept" >&2
    git checkout -- $rounding
    changes="$(git status --porcelain -- golden/cases backend/schema/src/aten-2.15.0.txt)"
  fi
  if [[ -n "$changes" ]]; then
    echo "golden/cases/ (or the schema table) differs from the committed files after regeneration:" >&2
    echo "$changes" | head -50 >&2
    git diff --stat -- golden/cases | tail -5 >&2
    exit 1
  fi
  if [[ -n "$rounding" ]]; then
    echo "golden/cases/ is reproducible: every other byte of the regeneration matches the committed files" >&2
  else
    echo "golden/cases/ is reproducible: regeneration gave the committed files byte for byte" >&2
  fi
fi
