#!/usr/bin/env bash
# Creates or updates the project's one Python environment and prints its path.
#
# It lives outside the repository, at ${TPUEMU_VENV:-~/.cache/tpuemu/venv} (TPUEMU_GOLDEN_VENV
# is still honoured), with the exact pins of python/requirements.txt (torch 2.15.0: the first
# time about 5 GB and a few minutes; later runs only compare the installed versions, without
# importing anything). Used by scripts/python.sh and golden/regenerate.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TPUEMU_VENV:-${TPUEMU_GOLDEN_VENV:-$HOME/.cache/tpuemu/venv}}"
python="${PYTHON:-python3}"
log() { echo "python-env.sh: $*" >&2; }

if [[ ! -x "$venv/bin/python" ]]; then
  log "creating $venv"
  "$python" -m venv "$venv"
fi
if ! "$venv/bin/python" - "$root/python/requirements.txt" <<'PY' 2>/dev/null; then
import sys, importlib.metadata as md
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, want = line.split("==")
        have = md.version(name)
        if have != want and not have.startswith(want + "+"):
            sys.exit(1)
PY
  log "installing python/requirements.txt into $venv"
  "$venv/bin/pip" install --quiet --upgrade pip >&2
  "$venv/bin/pip" install --quiet -r "$root/python/requirements.txt" >&2
fi
echo "$venv"
