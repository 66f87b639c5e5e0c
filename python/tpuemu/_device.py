"""``torch.tpu``: the device module PyTorch finds for device type "tpu"."""

from __future__ import annotations

import torch

from . import _rust


def _shim():
    from . import _C  # set by tpuemu/__init__.py

    return _C


def is_available() -> bool:
    """The emulated chip is always there."""
    return True


def device_count() -> int:
    """One emulated chip."""
    return 1


def current_device() -> int:
    return 0


def set_device(device) -> None:
    index = torch.device("tpu", device).index if isinstance(device, int) else torch.device(device).index
    if index not in (None, 0):
        raise ValueError(f"tpuemu has one tpu device (tpu:0), not tpu:{index}")


def is_initialized() -> bool:
    return _rust.started()


def _lazy_init() -> None:
    pass


def _is_in_bad_fork() -> bool:
    return False


def synchronize(device=None) -> None:
    """Runs everything recorded (DeferAndFuse) and waits for the device."""
    _rust.sync()


def get_device_name(device=None) -> str:
    return f"tpuemu {_rust.chip()}"


def manual_seed(seed: int) -> None:
    """Seeds the tpu generator (random operators draw on the host from it)."""
    _shim().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    _shim().seed()


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return _shim().initial_seed()


def get_rng_state(device="tpu") -> torch.Tensor:
    return _shim().get_rng_state()


def set_rng_state(new_state: torch.Tensor, device="tpu") -> None:
    _shim().set_rng_state(new_state)


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported() -> bool:
    return True


class device:
    """``with torch.tpu.device(0):`` (there is one device)."""

    def __init__(self, index):
        set_device(index)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
