#!/usr/bin/env bash
# Opens `tpuemu viz` in a real window (eframe, wgpu) on a virtual X display and takes a
# screenshot of the screen, to check the windowed viewer on a machine without a display.
#
# Needs: apt-get install -y --no-install-recommends xvfb xauth imagemagick x11-utils
# and a wgpu adapter: Mesa's llvmpipe through GL (libegl1, libgl1-mesa-dri) or lavapipe
# (libvulkan1 mesa-vulkan-drivers).
#
# Usage (from the repository root, after `cargo build --release`):
#   visualizer/scripts/window-screenshot.sh OUT.png TRACE.json [TRACE2.json]
# Environment: TPUEMU_BIN (default target/release/tpuemu), SCREEN (default 1600x900),
# WAIT_S (seconds to wait for the window, default 60).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUT.png TRACE.json [TRACE2.json]" >&2; exit 2; }
out=$(realpath -m "$1"); shift
bin=$(realpath "${TPUEMU_BIN:-target/release/tpuemu}")
screen=${SCREEN:-1600x900}
wait_s=${WAIT_S:-60}
for tool in xvfb-run import xwininfo; do
  command -v $tool >/dev/null || { echo "missing $tool: apt-get install -y xvfb xauth imagemagick x11-utils" >&2; exit 1; }
done
XDG_RUNTIME_DIR=$(mktemp -d); export XDG_RUNTIME_DIR
log=$(mktemp)
# Inside the virtual display: start the viewer, wait until its window is mapped and has
# drawn a few frames, grab the screen, close the viewer.
xvfb-run -a -s "-screen 0 ${screen}x24" bash -c '
  out=$1; wait_s=$2; log=$3; bin=$4; shift 4
  "$bin" viz "$@" >"$log" 2>&1 & pid=$!
  for _ in $(seq 1 "$wait_s"); do
    sleep 1
    kill -0 $pid 2>/dev/null || { echo "viewer exited:"; cat "$log"; exit 1; }
    xwininfo -root -tree | grep -q "tpuemu viz" && break
  done
  xwininfo -root -tree | grep -q "tpuemu viz" || { echo "no window after ${wait_s}s"; cat "$log"; kill $pid; exit 1; }
  sleep 3
  import -window root "$out"
  kill $pid
' _ "$out" "$wait_s" "$log" "$bin" "$@"
echo "wrote $out"
