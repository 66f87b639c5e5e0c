"""What the ranks of a group tell each other before a collective: when each chip reaches it,
which collective it is and on what tensors.

Every rank sends the same small header (JSON in 512 bytes) over the group's gloo connection
before any data moves, so that every rank sees every header: the collective starts when the
last chip arrives (the ranks' simulated clocks are joined there), and ranks that called
different collectives, or the same one on tensors of different shapes or dtypes, all raise the
same error instead of handing gloo buffers that do not match (which hangs or corrupts).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import torch
import torch.distributed as dist

HEADER_BYTES = 512


@dataclass
class Header:
    """One rank's view of a collective."""

    ready_ns: float  # when this chip reaches it (enqueued, and its earlier work done)
    seq: int  # the group's collective count on this rank
    kind: str  # all_reduce, broadcast, ...
    dtype: str
    shapes: str  # the tensors' shapes, for messages
    digest: str  # of what must match across ranks
    extra: float = 0.0  # what a kind needs from every rank (all-to-all: the largest block)

    def encode(self) -> torch.Tensor:
        d = self.__dict__.copy()
        for limit in (160, 40, 0):
            raw = json.dumps(d, separators=(",", ":")).encode()
            if len(raw) <= HEADER_BYTES:
                break
            d["shapes"] = self.shapes[:limit] + "..."
        buf = bytearray(raw.ljust(HEADER_BYTES, b" "))
        return torch.frombuffer(buf, dtype=torch.uint8).clone()

    @staticmethod
    def decode(t: torch.Tensor) -> "Header":
        return Header(**json.loads(bytes(t.tolist()).decode().rstrip()))


def digest(*parts) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


class CollectiveMismatch(RuntimeError):
    """Ranks called different collectives, or the same on tensors that do not match."""


def exchange(gloo, mine: Header, size: int) -> list[Header]:
    """Every rank's header, in group order (an all-gather over gloo)."""
    out = torch.empty(size * HEADER_BYTES, dtype=torch.uint8)
    gloo._allgather_base(out, mine.encode()).wait()
    return [Header.decode(out[i * HEADER_BYTES : (i + 1) * HEADER_BYTES]) for i in range(size)]


def check(headers: list[Header], ranks: list[int], what: str, same_shapes: bool) -> None:
    """Raises :class:`CollectiveMismatch` (on every rank alike) unless the ranks agree."""

    def listing(f) -> str:
        return ", ".join(f"rank {ranks[i]}: {f(h)}" for i, h in enumerate(headers))

    first = headers[0]
    if any((h.kind, h.seq) != (first.kind, first.seq) for h in headers):
        raise CollectiveMismatch(
            f"tpuemu: {what}: the ranks of group {ranks} called different collectives "
            f"({listing(lambda h: f'{h.kind} #{h.seq}')}); every rank of a group must make the "
            "same collectives in the same order"
        )
    if any(h.dtype != first.dtype for h in headers):
        raise CollectiveMismatch(
            f"tpuemu: {what}: the ranks of group {ranks} passed tensors of different dtypes "
            f"({listing(lambda h: h.dtype)})"
        )
    if same_shapes and any(h.digest != first.digest for h in headers):
        raise CollectiveMismatch(
            f"tpuemu: {what}: the ranks of group {ranks} passed tensors of different shapes "
            f"({listing(lambda h: h.shapes)})"
        )


def recv_header(gloo, src: int | None, tag: int) -> tuple[Header, int]:
    """A header from ``src`` (any rank when None) and the rank it came from."""
    t = torch.empty(HEADER_BYTES, dtype=torch.uint8)
    if src is None:
        w = gloo.recv_anysource([t], tag)
        w.wait()
        src = w._source_rank()
    else:
        gloo.recv([t], src, tag).wait()
    return Header.decode(t), src


def backend_error(what: str, ranks: list[int], e: BaseException) -> Exception:
    """A transport failure (a peer gone, a timeout) as c10d reports it, naming the collective."""
    return dist.DistBackendError(
        f"tpuemu: {what} on group {ranks} failed while moving data between the rank processes: "
        f"{e}"
    )
