"""The "tpu" process group's point-to-point transfers: ``send``, ``recv`` (from a rank or any),
so ``isend``/``irecv``/``batch_isend_irecv`` too. A send's bytes and header go to gloo at once
and complete when the receiver takes them (``Work.wait()``); the receiver's result lands when
both chips have arrived plus the transfer's time on the torus (one remote DMA, ``send_ns``)."""

from __future__ import annotations

import json

import torch

from .. import _C, _rust
from . import _exchange as ex
from ._core import dtype_name, human, nbytes
from ._work import Work


class PointToPoint:
    """Methods of :class:`._backend.ProcessGroupTPU` (c10d's names and arguments)."""

    # ------------------------------------------------------------------ point to point

    def _send_ns(self, src_group_rank: int, dst_group_rank: int, size: int) -> float:
        if size == 0:
            return 0.0
        return _rust.send_ns(self._slice.spec, self._ranks[src_group_rank],
                             self._ranks[dst_group_rank], int(size))

    def send(self, tensors, dstRank, tag):  # noqa: N803  (c10d's names)
        self._check("send", tensors)
        t = tensors[0]
        shapes = str([list(t.shape)])
        entry = _rust.begin_collective("c10d::send", shapes)
        ready = max(entry[2], entry[3])
        h = ex.Header(ready, 0, "send", dtype_name(t), shapes, ex.digest(shapes))
        # The sends complete when the receiver takes them: waited for by Work.wait(), so that
        # isend/irecv pairs posted in any order do not block each other.
        try:
            pending = [self._gloo.send([h.encode()], dstRank, tag),
                       self._gloo.send([_C.peek(t)], dstRank, tag)]
        except RuntimeError as e:
            raise ex.backend_error("send", self._ranks, e) from None
        size = nbytes([t])
        end = ready + self._send_ns(self._group_rank, dstRank, size)
        args = {"to": self._ranks[dstRank], "slice": self._slice.spec}
        _rust.end_collective(entry, "send", f"send {human(size)} to rank {self._ranks[dstRank]}",
                             size, ready, end, json.dumps(args))
        return Work([t], end, pending=pending,
                    on_error=lambda e: ex.backend_error("send", self._ranks, e))

    def _recv(self, tensors, src, tag):
        self._check("recv", tensors)
        t = tensors[0]
        shapes = str([list(t.shape)])
        entry = _rust.begin_collective("c10d::recv_", shapes)
        ready = max(entry[2], entry[3])
        try:
            h, src = ex.recv_header(self._gloo, src, tag)
            if h.dtype != dtype_name(t) or h.digest != ex.digest(shapes):
                # Take the data anyway, so that the sender is not left waiting.
                junk = torch.empty(_shape_of(h.shapes), dtype=getattr(torch, h.dtype))
                self._gloo.recv([junk], src, tag).wait()
                raise ex.CollectiveMismatch(
                    f"tpuemu: recv on rank {self._me}: rank {self._ranks[src]} sent {h.dtype} "
                    f"{h.shapes}, the receiving tensor is {dtype_name(t)} {shapes}"
                )
            got = torch.empty(t.shape, dtype=t.dtype)
            self._gloo.recv([got], src, tag).wait()
        except ex.CollectiveMismatch:
            raise
        except RuntimeError as e:
            raise ex.backend_error("recv", self._ranks, e) from None
        size = nbytes([t])
        start = max(ready, h.ready_ns)
        end = start + self._send_ns(src, self._group_rank, size)
        _C.land(t, got, end)
        args = {"from": self._ranks[src], "slice": self._slice.spec}
        _rust.end_collective(entry, "recv",
                             f"recv {human(size)} from rank {self._ranks[src]}", size, start,
                             end, json.dumps(args))
        return Work([t], end, source_rank=src)

    def recv(self, tensors, srcRank, tag):  # noqa: N803
        return self._recv(tensors, srcRank, tag)

    def recv_anysource(self, tensors, tag):
        return self._recv(tensors, None, tag)



def _shape_of(shapes: str) -> list[int]:
    return json.loads(shapes)[0]
