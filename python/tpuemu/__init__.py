"""tpuemu: PyTorch device "tpu" backed by an emulated TPU chip.

    import torch, tpuemu
    model = MyModel().to("tpu")

Installed, the package loads with ``import torch`` (PyTorch's ``torch.backends`` entry point for
device backends; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off), so code that never names
tpuemu finds the device. Importing it registers PrivateUse1 renamed "tpu": tensors on it are ordinary
``torch.Tensor``s whose storage lives in the emulated chip's HBM, and every aten operator goes to
the Rust backend by its overload name (operators it lacks run on the CPU, with a one-time
warning; ``TORCH_TPU_CPU_FALLBACK=0`` makes that an error). Modes come from the environment as in
TorchTPU: Strict by default, ``TORCH_TPU_LAUNCH_BLOCKING=1`` Debug, ``TORCH_TPU_DEFER_AND_FUSE=1``
DeferAndFuse; ``torch.compile(model, backend="tpu")`` compiles whole graphs.
"""

from __future__ import annotations

import contextlib
import json
import os

import torch

from . import _build, _device, _fft, _registry, _rust

__all__ = [
    "set_chip",
    "chip",
    "chip_info",
    "sync",
    "mode",
    "set_mode",
    "mode_guard",
    "set_matmul_precision",
    "matmul_precision",
    "metrics",
    "metrics_report",
    "reset_metrics",
    "trace",
    "timing",
    "reset_timing",
    "cpu_fallback_enabled",
    "set_cpu_fallback",
]

# The torch releases this package supports. The C++ shim is compiled against the installed torch
# at the first import (so the C++ ABI of any build of a supported release matches), but it
# uses ATen's internal C++ API — the PrivateUse1 hooks, the dispatcher's boxed CPU fallback, the
# autocast op lists — which changes between minor releases: the supported range is the minor
# release the package is tested with (python/pyproject.toml declares the same).
TORCH_SUPPORTED = ((2, 15), (2, 16))


def _check_torch(version: str) -> None:
    """Refuses a torch outside :data:`TORCH_SUPPORTED` (``ImportError`` naming the range)."""
    parts = version.split("+")[0].split(".")
    try:
        have = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        raise ImportError(f"tpuemu: cannot read the torch version {version!r}") from None
    lo, hi = TORCH_SUPPORTED
    if not lo <= have < hi:
        raise ImportError(
            f"tpuemu supports torch >={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]} (its C++ shim uses "
            f"ATen's internal API, which changes between minor releases); torch {version} is "
            f"installed"
        )


_check_torch(torch.__version__)

# A switch variable with a value that means nothing (TORCH_TPU_DEFER_AND_FUSE=banana) is a
# ValueError here, before any work, never a silent default.
_rust.check_env()

_C = _build.load()
_C.init(*_rust.vtable())
_device._C = _C


def _process_layout() -> None:
    """One process per chip under ``torchrun`` (or ``tpuemu.distributed.spawn``): this
    process's tpu is ``tpu:LOCAL_RANK`` of ``LOCAL_WORLD_SIZE``, on the chip ``TPUEMU_SLICE``
    names."""
    local = os.environ.get("LOCAL_RANK")
    if local is not None and local.isdigit():
        count = os.environ.get("LOCAL_WORLD_SIZE", "")
        _C.set_device_layout(int(local), int(count) if count.isdigit() else int(local) + 1)
    text = os.environ.get("TPUEMU_SLICE")
    if text and not os.environ.get("TPUEMU_CHIP") and not _rust.started():
        world = os.environ.get("WORLD_SIZE", "")
        info = json.loads(_rust.slice_info(text, int(world) if world.isdigit() else None))
        _rust.set_chip(info["chip"])


_process_layout()

if torch._C._get_privateuse1_backend_name() != "tpu":
    torch.utils.rename_privateuse1_backend("tpu")
torch._register_device_module("tpu", _device)
# A TPU's matrix units take bfloat16: `torch.autocast("tpu")` without a dtype uses it.
torch.set_autocast_dtype("tpu", torch.bfloat16)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)

_KERNELS, _VARIANTS = _registry.plan(_rust.registry())
for _v in _VARIANTS:
    _C.set_variant(*_v)
_C.register_kernels(_KERNELS)
_fft.register()


def cpu_fallback_enabled() -> bool:
    """Whether operators the backend lacks run on the CPU (``TORCH_TPU_CPU_FALLBACK``: on when
    unset or empty; ``0``/``false`` turn it off; ``import tpuemu`` refuses other values)."""
    return os.environ.get("TORCH_TPU_CPU_FALLBACK", "").strip().lower() not in ("0", "false")


_C.set_cpu_fallback(cpu_fallback_enabled())


def set_cpu_fallback(on: bool) -> None:
    """Allows (or forbids) running on the CPU the operators the backend lacks, from now on (as
    ``TORCH_TPU_CPU_FALLBACK`` does at import; forbidden, such an operator raises
    ``NotImplementedError``)."""
    os.environ["TORCH_TPU_CPU_FALLBACK"] = "1" if on else "0"
    _C.set_cpu_fallback(bool(on))


def set_chip(name: str) -> None:
    """Chooses the emulated chip (``"v4"``, ``"v5e"``, ``"v5p"``, ``"v6e"``, ``"v7x"`` or a preset
    TOML file) before the first tpu tensor exists. ``TPUEMU_CHIP`` does the same."""
    _rust.set_chip(str(name))


def chip() -> str:
    """The chip in use."""
    return _rust.chip()


def chip_info() -> dict:
    """The chip's generation, clock, peak bf16 FLOP/s and HBM bandwidth."""
    return json.loads(_rust.chip_info())


def sync() -> None:
    """A synchronisation point: runs what DeferAndFuse recorded and waits for the device."""
    _rust.sync()


def mode() -> str:
    """``"strict"``, ``"debug"`` or ``"defer"``."""
    return _rust.mode()


def set_mode(m: str) -> None:
    """Switches the eager mode (``"strict"``, ``"debug"``, ``"defer"``)."""
    _rust.set_mode(m)


@contextlib.contextmanager
def mode_guard(m: str):
    """``with tpuemu.mode_guard("defer"):`` runs the block in that mode."""
    previous = mode()
    set_mode(m)
    try:
        yield
    finally:
        set_mode(previous)


def set_matmul_precision(p: str) -> None:
    """Float32 matmul precision on the matrix units: ``"default"`` (one bf16 pass, as a TPU),
    ``"high"`` (3 passes) or ``"highest"`` (6 passes)."""
    _rust.set_matmul_precision(p)


def matmul_precision() -> str:
    return _rust.matmul_precision()


def metrics() -> dict:
    """Counters since the start (or ``reset_metrics()``): operator calls (``ops``,
    ``ops_by_name``), ``kernels_launched``, ``cpu_fallbacks`` by overload, ``flushes`` by reason,
    ``hbm_bytes`` moved and ``hbm_bytes_in_use``, transfers, ``device_busy_ns`` and
    ``simulated_time_ns`` (the simulated host clock), fused groups, compiles."""
    return json.loads(_rust.metrics_json())


def metrics_report() -> str:
    """The metrics as text, PyTorch/XLA style."""
    return _rust.metrics_report()


def reset_metrics() -> None:
    _rust.reset_metrics()


def timing() -> dict:
    """Host time inside the backend's operators and inside the emulator since the last
    ``reset_timing()`` (for benchmarks of the bridge's own cost)."""
    calls, backend_ns, device_ns = _rust.timing()
    return {"backend_calls": calls, "backend_ns": backend_ns, "emulator_ns": device_ns}


def reset_timing() -> None:
    _rust.reset_timing()


def _patch_printing() -> None:
    # Printing runs formatting operators (in float64, which the device does not compute with) on
    # the tensor: do them on one host copy, as PyTorch does for XLA tensors.
    import torch._tensor_str as ts

    original = ts._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == "tpu":
            self = self.to("cpu")
        return original(self, indent)

    ts._tensor_str = _tensor_str


_patch_printing()

from ._trace import trace  # noqa: E402
from . import _module  # noqa: E402,F401  (keeps tied weights tied in Module.to("tpu"))
from . import distributed  # noqa: E402  (registers the c10d backend "tpu")
# torch.compile(backend="tpu") finds tpuemu._compile.tpu_backend through the
# "torch_dynamo_backends" entry point (python/pyproject.toml), imported only when used.

