"""What the ranks of a group tell each other before a collective: when each chip reaches it,
which collective it is and on what.

Every rank sends the same small header (JSON in 4 KiB) over the group's gloo connection before
any data moves, so that every rank sees every header: the collective starts when the last chip
arrives (the ranks' simulated clocks are joined there), and every rank raises the same error
instead of handing gloo buffers that do not match (which hangs, corrupts or aborts the process)
when the ranks called different collectives, or the same one with different dtypes, shapes,
reduce operations, roots or all-to-all splits, or when a rank refused its own arguments (it
still sends a header, saying why, so that its peers are not left waiting).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

HEADER_BYTES = 4096


@dataclass
class Header:
    """One rank's view of a collective."""

    ready_ns: float  # when this chip reaches it (enqueued, and its earlier work done)
    seq: int  # the group's collective count on this rank
    kind: str  # all_reduce, broadcast, ...
    dtype: str = ""
    shapes: str = ""  # the tensors' shapes, for messages
    digest: str = ""  # of the shapes, which must match across ranks where `same_shapes`
    extra: float = 0.0  # what a kind needs from every rank (all-to-all: the largest block)
    op: str = ""  # the reduce operation
    root: int = -1  # the root of a rooted collective (group rank)
    splits: list | None = None  # all-to-all: [rows sent to each rank, rows from each rank]
    error: str = ""  # why this rank refused its own arguments

    def encode(self) -> torch.Tensor:
        d = asdict(self)
        raw = json.dumps(d, separators=(",", ":")).encode()
        if len(raw) > HEADER_BYTES:
            # Very large groups: splits go unchecked; long shape lists are cut for messages.
            d["splits"] = None
            d["shapes"] = self.shapes[:200] + "..."
            raw = json.dumps(d, separators=(",", ":")).encode()
        buf = bytearray(raw.ljust(HEADER_BYTES, b" "))
        return torch.frombuffer(buf, dtype=torch.uint8).clone()

    @staticmethod
    def decode(t: torch.Tensor) -> "Header":
        return Header(**json.loads(bytes(t.tolist()).decode().rstrip()))


def digest(*parts) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


class CollectiveMismatch(RuntimeError):
    """Ranks called different collectives, or the same on arguments that do not match, or a
    rank refused its arguments."""


class Refused(Exception):
    """This rank's own arguments are wrong: the group is told (a header with ``error``) before
    the rank raises ``error``."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def exchange(gloo, mine: Header, size: int) -> list[Header]:
    """Every rank's header, in group order (an all-gather over gloo)."""
    out = torch.empty(size * HEADER_BYTES, dtype=torch.uint8)
    gloo._allgather_base(out, mine.encode()).wait()
    return [Header.decode(out[i * HEADER_BYTES : (i + 1) * HEADER_BYTES]) for i in range(size)]


def check(headers: list[Header], ranks: list[int], what: str, same_shapes: bool) -> None:
    """Raises :class:`CollectiveMismatch` (on every rank alike) unless the ranks agree."""

    def listing(f, who=None) -> str:
        return ", ".join(f"rank {ranks[i]}: {f(h)}" for i, h in enumerate(headers)
                         if who is None or who(h))

    def mismatch(what_differs: str, f) -> CollectiveMismatch:
        return CollectiveMismatch(
            f"tpuemu: {what}: the ranks of group {ranks} {what_differs} ({listing(f)})")

    refused = [h for h in headers if h.error]
    if refused:
        raise CollectiveMismatch(
            f"tpuemu: {what}: a rank of group {ranks} refused its arguments, so the collective "
            f"did not run ({listing(lambda h: h.error, lambda h: h.error)})")
    first = headers[0]
    if any((h.kind, h.seq) != (first.kind, first.seq) for h in headers):
        raise CollectiveMismatch(
            f"tpuemu: {what}: the ranks of group {ranks} called different collectives "
            f"({listing(lambda h: f'{h.kind} #{h.seq}')}); every rank of a group must make the "
            "same collectives in the same order")
    if any(h.dtype != first.dtype for h in headers):
        raise mismatch("passed tensors of different dtypes", lambda h: h.dtype)
    if any(h.op != first.op for h in headers):
        raise mismatch("asked for different reduce operations", lambda h: h.op)
    if any(h.root != first.root for h in headers):
        raise mismatch("named different roots", lambda h: f"root {h.root}")
    if same_shapes and any(h.digest != first.digest for h in headers):
        raise mismatch("passed tensors of different shapes", lambda h: h.shapes)
    if all(h.splits is not None for h in headers) and first.splits is not None:
        n = len(headers)
        for i, h in enumerate(headers):
            for j in range(n):
                sent, got = headers[j].splits[0][i], h.splits[1][j]
                if sent != got:
                    raise CollectiveMismatch(
                        f"tpuemu: {what}: rank {ranks[j]} sends {sent} rows to rank {ranks[i]}, "
                        f"which expects {got} (all-to-all splits must agree: output split j of "
                        "rank i is input split i of rank j)")


def recv_header(gloo, src: int | None, tag: int):
    """Posts the receive of a header from ``src`` (any rank when None): (buffer, gloo work)."""
    t = torch.empty(HEADER_BYTES, dtype=torch.uint8)
    w = gloo.recv_anysource([t], tag) if src is None else gloo.recv([t], src, tag)
    return t, w


_TRANSPORT = ("connection", "timed out", "timeout", "broken pipe", "socket", "peer", "closed")


def transport_error(what: str, ranks: list[int], e: BaseException) -> Exception:
    """A failure while gloo moved the bytes: a peer gone or a timeout is c10d's
    ``DistBackendError`` naming the collective; anything else gloo refused is a
    ``RuntimeError`` naming it."""
    text = str(e)
    if any(k in text.lower() for k in _TRANSPORT):
        return dist.DistBackendError(
            f"tpuemu: {what} on group {ranks} failed while moving data between the rank "
            f"processes: {text}")
    return RuntimeError(f"tpuemu: {what} on group {ranks}: {text}")
