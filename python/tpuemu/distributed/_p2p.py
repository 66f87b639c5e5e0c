"""The "tpu" process group's point-to-point transfers: ``send`` and ``recv`` from a named rank,
so ``isend``/``irecv``/``batch_isend_irecv`` too.

Neither side blocks: a send copies its bytes to the host and hands them with its header to
gloo, which delivers them when the receiver asks (its ``Work.wait()`` returns at once: the
tensor may be reused; a delivery that fails is raised by the group's next call); a receive
posts the receive of the header and finishes in ``Work.wait()`` (header, checks, bytes,
landing). Pairs posted and waited for in any order on either side do not block each other. The receiver's result lands when both chips have arrived, plus the
transfer's time on the torus (one remote DMA, ``send_ns``); the sender's clock does not wait
for the receiver. A receive from any rank (``dist.recv(t)`` without ``src``) is refused:
torch.distributed learns the sender from a C++ method of the returned work that a Python
process group cannot answer.
"""

from __future__ import annotations

import json

import torch

from .. import _C, _rust
from . import _exchange as ex
from ._core import dtype_name, human, nbytes, untraced
from ._work import Work


class _RecvWork(Work):
    """A posted receive: ``wait()`` takes the header and the bytes and lands them."""

    def __init__(self, finish):
        super().__init__([], 0.0)
        self._finish = finish
        self._done = False

    def _complete(self) -> None:
        if not self._done:
            self._done = True
            outputs, end = self._finish()
            self._outputs, self.end_ns = outputs, end
            self._future = torch.futures.Future()
            self._future.set_result(outputs)

    def wait(self, timeout=None) -> bool:  # noqa: ARG002
        self._complete()
        return super().wait()

    def get_future(self) -> torch.futures.Future:
        self._complete()
        return self._future

    def is_completed(self) -> bool:
        return self._done

    def result(self):
        self._complete()
        return self._outputs


class PointToPoint:
    """Methods of :class:`._backend.ProcessGroupTPU` (c10d's names and arguments)."""

    def _send_ns(self, src_group_rank: int, dst_group_rank: int, size: int) -> float:
        if size == 0:
            return 0.0
        return _rust.send_ns(self._slice.spec, self._ranks[src_group_rank],
                             self._ranks[dst_group_rank], int(size))

    def _p2p_check(self, what: str, tensors) -> torch.Tensor:
        try:
            self._check(what, tensors)
        except ex.Refused as r:
            raise r.error from None
        return tensors[0]

    @untraced
    def send(self, tensors, dstRank, tag):  # noqa: N803  (c10d's names)
        t = self._p2p_check("send", tensors)
        shapes = str([list(t.shape)])
        entry = _rust.begin_collective("c10d::send", shapes)
        ready = max(entry[2], entry[3])
        h = ex.Header(ready, 0, "send", dtype_name(t), shapes, ex.digest(shapes))
        self._sends_delivered()
        try:
            self._in_flight += [self._gloo.send([h.encode()], dstRank, tag),
                                self._gloo.send([_C.peek(t)], dstRank, tag)]
        except RuntimeError as e:
            raise ex.transport_error("send", self._ranks, e) from None
        size = nbytes([t])
        end = ready + self._send_ns(self._group_rank, dstRank, size)
        args = {"to": self._ranks[dstRank], "slice": self._slice.spec}
        _rust.end_collective(entry, "send", f"send {human(size)} to rank {self._ranks[dstRank]}",
                             size, ready, end, json.dumps(args))
        return Work([t], end)

    def _sends_delivered(self) -> None:
        """Forgets the sends gloo has delivered; raises the first that failed."""
        waiting = []
        for w in getattr(self, "_in_flight", []):
            if not w.is_completed():
                waiting.append(w)
            elif not w.is_success():
                self._in_flight = waiting
                raise ex.transport_error("send", self._ranks, w.exception())
        self._in_flight = waiting

    def _finish_recv(self, t, src, tag, entry, header, header_work):
        """Takes the header and the bytes of a receive posted before; lands them: (outputs,
        end)."""
        ready = max(entry[2], entry[3])
        shapes = str([list(t.shape)])
        try:
            header_work.wait()
            h = ex.Header.decode(header)
            if h.dtype != dtype_name(t) or h.digest != ex.digest(shapes):
                # Take the bytes anyway, so that the sender is not left waiting.
                junk = torch.empty(json.loads(h.shapes)[0], dtype=getattr(torch, h.dtype))
                self._gloo.recv([junk], src, tag).wait()
                raise ex.CollectiveMismatch(
                    f"tpuemu: recv on rank {self._me}: rank {self._ranks[src]} sent {h.dtype} "
                    f"{h.shapes}, the receiving tensor is {dtype_name(t)} {shapes}")
            got = torch.empty(t.shape, dtype=t.dtype)
            self._gloo.recv([got], src, tag).wait()
        except ex.CollectiveMismatch:
            raise
        except RuntimeError as e:
            raise ex.transport_error("recv", self._ranks, e) from None
        size = nbytes([t])
        start = max(ready, h.ready_ns)
        end = start + self._send_ns(src, self._group_rank, size)
        _C.land(t, got, end)
        args = {"from": self._ranks[src], "slice": self._slice.spec}
        _rust.end_collective(entry, "recv", f"recv {human(size)} from rank {self._ranks[src]}",
                             size, start, end, json.dumps(args))
        return [t], end

    @untraced
    def recv(self, tensors, srcRank, tag):  # noqa: N803
        t = self._p2p_check("recv", tensors)
        entry = _rust.begin_collective("c10d::recv_", str([list(t.shape)]))
        try:
            header, w = ex.recv_header(self._gloo, srcRank, tag)
        except RuntimeError as e:
            raise ex.transport_error("recv", self._ranks, e) from None
        return _RecvWork(lambda: self._finish_recv(t, srcRank, tag, entry, header, w))

    @untraced
    def recv_anysource(self, tensors, tag):
        # torch.distributed learns the sender from the returned work's C++ sourceRank(), which
        # a Python process group cannot answer: refused rather than a wrong or missing rank.
        raise NotImplementedError(
            "tpuemu: recv from any rank (dist.recv/irecv without src) is not supported by the "
            "tpu process group; name the sender (src=...)")
