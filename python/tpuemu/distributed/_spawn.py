"""``tpuemu.distributed.spawn``: the ranks of an emulated slice from one Python call.

As ``torch.multiprocessing.spawn`` does, it starts one process per rank running
``fn(rank, *args)`` and joins them; if one fails, the others are stopped and its traceback is
raised here. Each process gets what ``torchrun`` would set (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and ``TPUEMU_SLICE``,
so ``fn`` calls ``dist.init_process_group()`` as under torchrun. ``fn`` must be importable (a
module-level function), as the processes are started fresh ("spawn").
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import tempfile

from torch.multiprocessing.spawn import ProcessContext, _wrap

from ._slice import Slice


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, fn, args) -> None:
    import tpuemu  # noqa: F401  (this process's tpu, from the environment set for it)

    fn(rank, *args)


def spawn(fn, args=(), nprocs: int | None = None, *, slice: str | None = None,  # noqa: A002
          join: bool = True, env: dict | None = None):
    """Runs ``fn(rank, *args)`` in one process per chip of ``slice`` (``"v5e:2x2"``; default
    ``TPUEMU_SLICE``, else ``nprocs`` chips of the chosen chip). ``env`` adds environment
    variables to every process. Returns the ``ProcessContext`` when ``join`` is False."""
    from .. import chip

    text = slice or os.environ.get("TPUEMU_SLICE") or chip()
    if nprocs is not None and nprocs < 1:
        raise ValueError(f"tpuemu.distributed.spawn: nprocs must be positive, not {nprocs}")
    try:
        s = Slice.parse(text, nprocs)
    except ValueError as e:
        raise ValueError(f"tpuemu.distributed.spawn: {e} (give slice=\"v5e:2x2\", TPUEMU_SLICE, "
                         "or nprocs)") from None
    n = s.chips if nprocs is None else nprocs
    if n != s.chips:
        raise ValueError(
            f"tpuemu.distributed.spawn: {n} processes do not fit the slice {s.spec} ({s.chips} "
            "chips): each rank is one chip"
        )
    port = _free_port()
    ctx = multiprocessing.get_context("spawn")
    processes, error_files = [], []
    saved = dict(os.environ)
    try:
        for rank in range(n):
            os.environ.update(env or {})
            os.environ.update({
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(n),
                "LOCAL_WORLD_SIZE": str(n),
                "GROUP_RANK": "0",
                "TPUEMU_SLICE": s.spec,
            })
            tf = tempfile.NamedTemporaryFile(prefix="tpuemu-errorfile-", suffix=".pickle",
                                             delete=False)
            tf.close()
            os.unlink(tf.name)
            p = ctx.Process(target=_wrap, args=(_entry, rank, (fn, args), tf.name), daemon=False)
            p.start()
            processes.append(p)
            error_files.append(tf.name)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    context = ProcessContext(processes, error_files)
    if not join:
        return context
    while not context.join():
        pass
    return None
