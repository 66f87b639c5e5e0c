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
    """tpus on this host: one, or ``LOCAL_WORLD_SIZE`` when torchrun started one process per
    chip (each process emulates its own, ``tpu:LOCAL_RANK``)."""
    return _shim().device_count()


def current_device() -> int:
    """This process's tpu index (its local rank under torchrun, else 0)."""
    return _shim().own_index()


def _index(device) -> int | None:
    if device is None:
        return None
    if isinstance(device, int):
        return device
    d = torch.device(device) if isinstance(device, str) else device
    if d.type != "tpu":
        raise ValueError(f"expected a tpu device, not {d}")
    return d.index


def set_device(device) -> None:
    """Selects this process's tpu: ``torch.tpu.set_device(local_rank)`` under torchrun. Every
    process emulates one chip, so the only index it accepts is its own."""
    index = _index(device)
    own = current_device()
    if index is None or index == own:
        return
    if device_count() == 1:
        raise ValueError(f"tpuemu has one tpu device (tpu:0), not tpu:{index}")
    raise ValueError(
        f"tpuemu: this process emulates tpu:{own} (LOCAL_RANK={own}); tpu:{index} is another "
        f"process's chip (of {device_count()} on this host)"
    )


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
    """Seeds the default tpu generator: the backend's default Threefry stream restarts."""
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
    """``with torch.tpu.device(i):``, ``i`` this process's tpu."""

    def __init__(self, index):
        set_device(index)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------------------------
# Streams and events: the chip runs its work in issue order on one stream; a collective's
# result is ready when it lands (kernels that read it wait), and Work.wait() orders later
# kernels after it. Streams are that one stream; events read simulated time.


class Stream(torch.Stream):
    """A tpu stream (the chip's one in-order stream)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        index = _index(device)
        return super().__new__(cls, device=torch.device("tpu", current_device() if index is None else index),
                               priority=priority)


def current_stream(device=None) -> Stream:
    return Stream(device)


def default_stream(device=None) -> Stream:
    return Stream(device)


def set_stream(stream) -> None:
    """Work runs in issue order whichever stream is current."""


class stream:  # noqa: N801  (torch.cuda.stream's name)
    """``with torch.tpu.stream(s):`` (work stays in issue order)."""

    def __init__(self, s):
        self.stream = s

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


class Event(torch.Event):
    """A point in the chip's stream; ``elapsed_time`` is simulated time, in ms."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False):
        e = super().__new__(cls, device=torch.device("tpu", current_device()),
                            enable_timing=enable_timing, blocking=blocking,
                            interprocess=interprocess)
        e._ns = None
        return e

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None) -> None:
        super().record(stream)
        self._ns = _rust.device_time_ns()

    def wait(self, stream=None) -> None:
        """The stream is in order: nothing to wait for."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        _rust.sync()

    def elapsed_time(self, end_event: "Event") -> float:
        if self._ns is None or getattr(end_event, "_ns", None) is None:
            raise RuntimeError("both events must be recorded (tpu events) before elapsed_time")
        return (end_event._ns - self._ns) / 1e6


# ---------------------------------------------------------------------------------------------
# Memory: this process's chip's HBM.


def memory_allocated(device=None) -> int:
    """HBM bytes held by tensors on this process's chip."""
    return _rust.memory()[0]


def max_memory_allocated(device=None) -> int:
    """The most HBM bytes held at once since the start or ``reset_peak_memory_stats()``."""
    return _rust.memory()[1]


def memory_reserved(device=None) -> int:
    """HBM bytes reserved by live tensors: every tensor's bytes count from the call that made
    it (a new tensor must fit beside them, or the call raises ``torch.OutOfMemoryError``), even
    before a kernel writes it or when fusion keeps it on chip."""
    return _rust.memory()[3]


def max_memory_reserved(device=None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None) -> None:
    _rust.reset_peak_memory()


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) HBM bytes of this process's chip; free is what a new tensor may still take."""
    _, _, total, reserved = _rust.memory()
    return total - reserved, total


def memory_stats(device=None) -> dict:
    used, peak, total, reserved = _rust.memory()
    return {
        "allocated_bytes.all.current": used,
        "allocated_bytes.all.peak": peak,
        "reserved_bytes.all.current": reserved,
        "reserved_bytes.all.peak": peak,
        "total_bytes": total,
    }


def empty_cache() -> None:
    """Storages free their HBM when their last tensor goes: nothing is cached."""


class _DeviceProperties:
    """``torch.tpu.get_device_properties()``: the chip preset's figures."""

    def __init__(self, info: dict, total: int):
        self.name = f"tpuemu {info['chip']}"
        self.type = "tpu"
        self.generation = info["generation"]
        self.total_memory = total
        self.clock_hz = info["clock_hz"]
        self.peak_bf16_flops = info["peak_bf16_flops"]
        self.hbm_bytes_per_s = info["hbm_bytes_per_s"]
        # CUDA-style fields some libraries read.
        self.major, self.minor = 0, 0
        self.multi_processor_count = 1

    def __repr__(self) -> str:
        return (f"_TpuDeviceProperties(name='{self.name}', total_memory={self.total_memory >> 20}MB, "
                f"peak_bf16_flops={self.peak_bf16_flops:.3g}, hbm_bytes_per_s={self.hbm_bytes_per_s:.3g})")


def get_device_properties(device=None) -> _DeviceProperties:
    import json

    return _DeviceProperties(json.loads(_rust.chip_info()), _rust.memory()[2])


def get_device_capability(device=None) -> tuple[int, int]:
    return (0, 0)
