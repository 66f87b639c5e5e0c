"""``Work`` objects of the "tpu" process group.

The bytes of a collective have moved by the time the call returns (gloo carries them between
the rank processes); what a ``Work`` still stands for is simulated time. ``wait()`` makes the
chip's stream wait for the collective's end, as ``Work.wait()`` makes the current CUDA stream
wait for NCCL's: kernels launched afterwards start no earlier. Kernels that read the result
wait for it anyway (``tpuemu_backend::runtime::external``); others overlap the collective.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .. import _rust


class Work(dist._Work):
    """A finished exchange whose simulated end is ``end_ns``; ``result()`` gives the output
    tensors (what DDP's reducer reads through ``get_future()``)."""

    def __init__(self, outputs: list, end_ns: float, source_rank: int = -1,
                 blocking: bool = False):
        super().__init__()
        # A barrier's wait holds the host too (NCCL's barrier synchronises the device).
        self._blocking = blocking
        self._outputs = outputs
        self.end_ns = end_ns
        self._source = source_rank
        self._future = torch.futures.Future()
        self._future.set_result(outputs)

    def wait(self, timeout=None) -> bool:  # noqa: ARG002  (the exchange is over)
        _rust.wait_until(self.end_ns)
        if self._blocking:
            _rust.sync()
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self):
        return None

    def result(self) -> list[torch.Tensor]:
        return self._outputs

    def source_rank(self) -> int:
        return self._source

    def synchronize(self) -> None:
        self.wait()
