"""The rank programs of test_distributed.py (importable by the processes ``spawn`` starts).

Each program runs the same code on the CPU through gloo and on the tpu through the "tpu"
process group in the same processes (``init_process_group("cpu:gloo,tpu:tpu")``), and saves
what the test compares in ``out_dir``: the tpu results are checked against the CPU/gloo ones,
never against themselves.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def _init(precision: str = "highest"):
    import tpuemu

    dist.init_process_group("cpu:gloo,tpu:tpu")
    tpuemu.set_matmul_precision(precision)
    return dist.get_rank(), dist.get_world_size()


def _save(out_dir: str, rank: int, name: str, obj) -> None:
    torch.save(obj, Path(out_dir) / f"{name}.rank{rank}.pt")


# ------------------------------------------------------------------------------------------
# Collectives, sub-groups, DTensor, functional collectives (4 ranks, v5e:2x2)


def _collectives(dev: str, rank: int, world: int, groups) -> dict:
    r = {}
    f = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1) + rank

    def t(x):
        return x.to(dev)

    for op in ("SUM", "MAX", "MIN", "PRODUCT"):
        x = t(f.clone())
        dist.all_reduce(x, getattr(dist.ReduceOp, op))
        r[f"all_reduce_{op}"] = x.cpu()
    i = t(torch.arange(6, dtype=torch.int32) * (rank + 2))
    dist.all_reduce(i)
    r["all_reduce_int"] = i.cpu()
    b = t(torch.ones(5, dtype=torch.bfloat16) * (rank + 0.5))
    dist.all_reduce(b)
    r["all_reduce_bf16"] = b.cpu()
    out = t(torch.empty(world * 3, 4))
    dist.all_gather_into_tensor(out, t(f))
    r["all_gather_into_tensor"] = out.cpu()
    outs = [t(torch.empty(3, 4)) for _ in range(world)]
    dist.all_gather(outs, t(f))
    r["all_gather"] = torch.stack([o.cpu() for o in outs])
    rs = t(torch.empty(2, 4))
    dist.reduce_scatter_tensor(rs, t(torch.arange(8 * world * 1.0).reshape(2 * world, 4) + rank))
    r["reduce_scatter_tensor"] = rs.cpu()
    rl = t(torch.empty(2, 4))
    dist.reduce_scatter(rl, [t(torch.arange(8.0).reshape(2, 4) + rank + k) for k in range(world)])
    r["reduce_scatter_list"] = rl.cpu()
    # Uneven all-to-all: rank r sends r + k + 1 rows to rank k.
    in_splits = [rank + k + 1 for k in range(world)]
    out_splits = [k + rank + 1 for k in range(world)]
    a2a_in = t(torch.arange(sum(in_splits) * 2.0).reshape(-1, 2) + 100 * rank)
    a2a_out = t(torch.empty(sum(out_splits), 2))
    dist.all_to_all_single(a2a_out, a2a_in, out_splits, in_splits)
    r["all_to_all_single_uneven"] = a2a_out.cpu()
    even_out = t(torch.empty(world * 2))
    dist.all_to_all_single(even_out, t(torch.arange(world * 2.0) + 10 * rank))
    r["all_to_all_single"] = even_out.cpu()
    lo = [t(torch.empty(2)) for _ in range(world)]
    dist.all_to_all(lo, [t(torch.full((2,), float(rank * 10 + k))) for k in range(world)])
    r["all_to_all"] = torch.stack([o.cpu() for o in lo])
    bc = t(f.clone() if rank == 2 else torch.zeros(3, 4))
    dist.broadcast(bc, src=2)
    r["broadcast"] = bc.cpu()
    red = t(f.clone())
    dist.reduce(red, dst=1)
    if rank == 1:
        r["reduce"] = red.cpu()
    g_out = [t(torch.empty(3, 4)) for _ in range(world)] if rank == 0 else None
    dist.gather(t(f), g_out, dst=0)
    if rank == 0:
        r["gather"] = torch.stack([o.cpu() for o in g_out])
    sc = t(torch.empty(4))
    dist.scatter(sc, [t(torch.full((4,), float(k))) for k in range(world)] if rank == 3 else None, src=3)
    r["scatter"] = sc.cpu()
    # send/recv around a ring, and isend/irecv.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    got = t(torch.empty(3))
    if rank % 2 == 0:
        dist.send(t(torch.full((3,), float(rank))), nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(t(torch.full((3,), float(rank))), nxt)
    r["send_recv"] = got.cpu()
    ops = [dist.P2POp(dist.isend, t(torch.full((2,), rank + 0.5)), nxt),
           dist.P2POp(dist.irecv, got2 := t(torch.empty(2)), prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    r["batch_isend_irecv"] = got2.cpu()
    # Coalesced forms and async work.
    c1, c2 = t(f.clone()), t(torch.ones(7) * rank)
    with dist._coalescing_manager():
        dist.all_reduce(c1)
        dist.all_reduce(c2)
    r["all_reduce_coalesced"] = (c1.cpu(), c2.cpu())
    with dist._coalescing_manager(async_ops=True) as cm:
        o1, o2 = t(torch.empty(world * 2)), t(torch.empty(world * 3))
        dist.all_gather_into_tensor(o1, t(torch.ones(2) * rank))
        dist.all_gather_into_tensor(o2, t(torch.ones(3) * -rank))
    cm.wait()
    r["coalesced_all_gather"] = (o1.cpu(), o2.cpu())
    w = dist.all_reduce(aw := t(f.clone()), async_op=True)
    w.wait()
    r["async_all_reduce"] = aw.cpu()
    dist.barrier()
    # Sub-groups of a 2x2 mesh.
    for name, g in groups.items():
        x = t(torch.ones(3) * (rank + 1))
        dist.all_reduce(x, group=g)
        r[f"group_{name}"] = x.cpu()
    return r


def _dtensor(dev: str, mesh) -> dict:
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    r = {}
    x = torch.arange(5 * 7, dtype=torch.float32).reshape(5, 7) / 7  # uneven on a 2x2 mesh
    placements = {
        "S0": Shard(0), "S1": Shard(1), "R": Replicate(), "P": Partial(),
    }
    for a in ("S0", "S1", "R"):
        for b in ("S0", "S1", "R"):
            d = distribute_tensor(x.to(dev), mesh, [placements[a], placements[b]])
            r[f"local_{a}{b}"] = d.to_local().cpu()
            for c in ("S0", "S1", "R"):
                for e in ("S0", "S1", "R"):
                    r[f"{a}{b}->{c}{e}"] = d.redistribute(mesh, [placements[c], placements[e]]).to_local().cpu()
    # Partial -> everything (a sum of per-rank contributions).
    from torch.distributed.tensor import DTensor

    me = dist.get_rank()
    part = DTensor.from_local((x * (me + 1)).to(dev), mesh, [Partial(), Partial()])
    for c in ("S0", "S1", "R"):
        for e in ("S0", "S1", "R"):
            r[f"PP->{c}{e}"] = part.redistribute(mesh, [placements[c], placements[e]]).to_local().cpu()
    r["full_tensor"] = distribute_tensor(x.to(dev), mesh, [Shard(0), Shard(1)]).full_tensor().cpu()
    # Operators on DTensors, with PyTorch's sharding propagation.
    w = torch.arange(7 * 6, dtype=torch.float32).reshape(7, 6) / 40
    dx = distribute_tensor(x.to(dev), mesh, [Shard(0), Replicate()])
    dw = distribute_tensor(w.to(dev), mesh, [Replicate(), Shard(1)])
    y = torch.softmax(dx @ dw, dim=-1).sum(0)
    r["ops"] = y.full_tensor().cpu()
    return r


def _functional(dev: str, rank: int) -> dict:
    import torch.distributed._functional_collectives as fc

    def f(x):
        y = x * 2 + 1
        z = fc.all_reduce(y, "sum", dist.group.WORLD)
        g = fc.all_gather_tensor(z.sin(), 0, dist.group.WORLD)
        s = fc.reduce_scatter_tensor(g * 3, "sum", 0, dist.group.WORLD)
        return s + fc.all_to_all_single(z, None, None, dist.group.WORLD).sum()

    x = (torch.arange(8.0) + rank).to(dev)
    r = {"functional_eager": f(x).cpu()}
    if dev == "tpu":
        import tpuemu

        r["functional_compiled"] = torch.compile(f, backend="tpu")(x).cpu()
        r["graphs"] = tpuemu._compile.compiled_graphs()
    return r


def collectives(rank: int, out_dir: str) -> None:
    """Every collective, sub-groups, DTensor and functional collectives, CPU then tpu."""
    import tpuemu
    from torch.distributed.device_mesh import init_device_mesh

    rank, world = _init()
    results = {}
    for dev in ("cpu", "tpu"):
        mesh = init_device_mesh(dev, (2, 2), mesh_dim_names=("dp", "tp"))
        groups = {"dp": mesh["dp"].get_group(), "tp": mesh["tp"].get_group()}
        r = _collectives(dev, rank, world, groups)
        r.update(_dtensor(dev, mesh))
        r.update(_functional(dev, rank))
        results[dev] = r
    m = tpuemu.metrics()
    results["metrics"] = {"collectives": m["collectives"], "fallbacks": m["cpu_fallbacks"],
                          "mode": m["mode"], "device": str(torch.tpu.current_device()),
                          "flushes": m["flushes"]}
    _save(out_dir, rank, "collectives", results)
    dist.destroy_process_group()


# ------------------------------------------------------------------------------------------
# Training: DDP, FSDP2, tensor and sequence parallelism, FSDP x TP (4 ranks)


def _llama():
    from tpuemu.zoo.parallel import llama

    return llama()


def _steps(model, inputs, dev, steps=3, foreach=None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=foreach)
    losses = []
    for _ in range(steps):
        out = model(**{k: v.to(dev) for k, v in inputs.items()})
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(out.loss.item())
        del out
    return losses, opt


def _full(model) -> dict:
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu()
            for n, p in model.named_parameters()}


def _ddp(dev: str, rank: int, trace: str | None) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 4)).to(dev)
    # Small buckets: several all-reduces per backward pass, started while it runs.
    m = DDP(model, bucket_cap_mb=0.02)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(100 + rank)
    import contextlib

    import tpuemu

    for step in range(3):
        x = torch.randn(32, 64, generator=g).to(dev)
        ctx = tpuemu.trace(trace) if (trace and dev == "tpu" and step == 2) else contextlib.nullcontext()
        with ctx:
            loss = m(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if dev == "tpu":
                tpuemu.sync()
    return {n: p.detach().cpu() for n, p in model.named_parameters()}


def training(rank: int, out_dir: str) -> None:
    """DDP, FSDP2 on the zoo's Llama, TP+SP, and FSDP x TP, CPU then tpu."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from tpuemu.zoo.parallel import tensor_parallel

    rank, world = _init()
    results = {}
    for dev in ("cpu", "tpu"):
        r = {}
        r["ddp"] = _ddp(dev, rank, os.path.join(out_dir, "ddp", "step.json"))
        # FSDP2 over all four ranks, from a CPU model (fully_shard moves it).
        model, inputs = _llama()
        mesh = init_device_mesh(dev, (world,))
        if dev == "tpu":
            base = torch.tpu.memory_allocated()
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        if dev == "tpu":
            r["hbm_sharded"] = torch.tpu.memory_allocated() - base
        inputs = {k: (v + rank) % 128 for k, v in inputs.items()}
        r["fsdp_losses"], opt = _steps(model, inputs, dev)
        if dev == "tpu":
            r["hbm_trained"] = torch.tpu.memory_allocated() - base
            r["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
            r["local_bytes"] = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
        r["fsdp_params"] = _full(model)
        del model, opt
        # Tensor + sequence parallelism over the "tp" dimension of a 2x2 mesh, then FSDP x TP.
        mesh2 = init_device_mesh(dev, (2, 2), mesh_dim_names=("dp", "tp"))
        for name, fsdp in (("tp", False), ("fsdp_tp", True)):
            model, inputs = _llama()
            model = model.to(dev)
            tensor_parallel(model, mesh2["tp"], sequence=True)
            if fsdp:
                for layer in model.model.layers:
                    fully_shard(layer, mesh=mesh2["dp"])
                fully_shard(model, mesh=mesh2["dp"])
            dp = mesh2["dp"].get_local_rank()
            inputs = {k: (v + dp) % 128 for k, v in inputs.items()}
            r[f"{name}_losses"], _ = _steps(model, inputs, dev, foreach=False)
            r[f"{name}_params"] = _full(model)
        results[dev] = r
    import tpuemu

    results["metrics"] = {"fallbacks": tpuemu.metrics()["cpu_fallbacks"]}
    _save(out_dir, rank, "training", results)
    dist.destroy_process_group()


# ------------------------------------------------------------------------------------------
# Timing (8 ranks)


def timing(rank: int, out_dir: str) -> None:
    """A 16 MiB all-reduce over the world (4 ranks), and clocks joined at a collective."""
    import tpuemu

    dist.init_process_group("tpu")
    x = torch.ones(4 << 20, device="tpu")
    tpuemu.sync()
    tpuemu.reset_metrics()
    dist.all_reduce(x)
    big = tpuemu.metrics()["collectives"]["all_reduce"]
    ok = bool((x[:1024].cpu() == dist.get_world_size()).all())
    # Rank 3 computes first: everybody's collective starts when rank 3 arrives.
    y = torch.ones(256, 256, device="tpu")
    if rank == 3:
        for _ in range(20):
            y = y @ y * 0.001
    tpuemu.sync()
    t0 = tpuemu.metrics()["simulated_time_ns"]
    tpuemu.reset_metrics()
    small = torch.ones(1024, device="tpu")
    path = os.path.join(out_dir, "join", "t.json")
    with tpuemu.trace(path):
        dist.all_reduce(small)
    joined = tpuemu.metrics()["collectives"]["all_reduce"]
    _save(out_dir, rank, "timing", {"big": big, "ok": ok, "joined": joined, "t0": t0})
    dist.destroy_process_group()


# ------------------------------------------------------------------------------------------
# Bad input (2 ranks)


def _error(f) -> str:
    try:
        f()
    except Exception as e:  # noqa: BLE001  (what the test inspects)
        return f"{type(e).__name__}: {e}"
    return ""


def mismatches(rank: int, out_dir: str) -> None:
    """Different shapes, dtypes and collectives across ranks; CPU tensors in a tpu group."""
    from datetime import timedelta

    dist.init_process_group("tpu", timeout=timedelta(seconds=20))
    r = {}
    r["shapes"] = _error(lambda: dist.all_reduce(torch.ones(4 + rank, device="tpu")))
    r["dtypes"] = _error(lambda: dist.all_reduce(
        torch.ones(4, device="tpu", dtype=torch.float32 if rank == 0 else torch.bfloat16)))
    r["kinds"] = _error(lambda: dist.all_reduce(torch.ones(4, device="tpu")) if rank == 0
                        else dist.broadcast(torch.ones(4, device="tpu"), 0))
    r["cpu_tensor"] = _error(lambda: dist.all_reduce(torch.ones(4)))
    # The group still works after the errors.
    x = torch.ones(4, device="tpu")
    dist.all_reduce(x)
    r["after"] = x.cpu()
    dist.barrier()
    import tpuemu

    r["collectives"] = tpuemu.metrics()["collectives"]
    _save(out_dir, rank, "mismatches", r)
    dist.destroy_process_group()


def rank_exits(rank: int, out_dir: str) -> None:
    """Rank 1 exits; rank 0's all-reduce fails with an error naming it, not a hang."""
    from datetime import timedelta

    dist.init_process_group("tpu", timeout=timedelta(seconds=20))
    x = torch.ones(4, device="tpu")
    dist.all_reduce(x)
    if rank == 1:
        os._exit(0)
    t0 = time.monotonic()
    msg = _error(lambda: dist.all_reduce(x))
    Path(out_dir, "exit.json").write_text(json.dumps({"error": msg, "seconds": time.monotonic() - t0}))
    os._exit(0)


# ------------------------------------------------------------------------------------------
# What a first review found (4 ranks)


def review(rank: int, out_dir: str) -> None:
    """Receives posted before sends, recv from any rank, compiled DDP, refusals, non-contiguous
    tensors, complex tensors, memory released when a tensor goes; CPU then tpu."""
    from datetime import timedelta

    import tpuemu
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("cpu:gloo,tpu:tpu", timeout=timedelta(seconds=60))
    tpuemu.set_matmul_precision("highest")
    world = dist.get_world_size()
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    results = {}
    for dev in ("cpu", "tpu"):
        r = {}
        # irecv before isend on every rank (pipeline parallelism posts receives first).
        got = torch.empty(3, device=dev)
        works = [dist.irecv(got, prv), dist.isend(torch.full((3,), float(rank), device=dev), nxt)]
        for w_ in works:
            w_.wait()
        r["recv_first"] = got.cpu()
        ops = [dist.P2POp(dist.irecv, got2 := torch.empty(2, device=dev), prv),
               dist.P2POp(dist.isend, torch.full((2,), rank + 0.5, device=dev), nxt)]
        for w_ in dist.batch_isend_irecv(ops):
            w_.wait()
        r["batch_recv_first"] = got2.cpu()
        # A receive from any rank: gloo says who sent; the tpu group refuses it clearly.
        if rank == 0:
            if dev == "tpu":
                r["recv_any"] = _error(lambda: dist.recv(torch.empty(1, device=dev)))
            else:
                srcs = []
                for _ in range(world - 1):
                    t = torch.empty(1, device=dev)
                    srcs.append((dist.recv(t), int(t.item())))
                r["recv_any"] = sorted(srcs)
        elif dev == "cpu":
            dist.send(torch.full((1,), float(rank * 10), device=dev), 0)
        # Non-contiguous tensors, as gloo takes them.
        x = (torch.arange(12.0, device=dev).reshape(3, 4) + rank).t()
        dist.all_reduce(x)
        r["noncontiguous"] = x.cpu()
        # torch.compile of a DDP model (DDP calls the group from C++ inside the compiled step).
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 2)).to(dev)
        ddp = DDP(model)
        step = torch.compile(ddp, backend="tpu" if dev == "tpu" else "eager")
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for i in range(2):
            loss = step(torch.ones(4, 8, device=dev) * (rank + i)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        r["compiled_ddp"] = {n: p.detach().cpu() for n, p in model.named_parameters()}
        results[dev] = r
    # Refusals: one rank's bad arguments are an error on every rank, and the group goes on.
    e = {}
    n = 5 if rank == 1 else 4
    e["one_rank_bad_size"] = _error(lambda: dist.all_gather_into_tensor(
        torch.empty(world * 4, device="tpu"), torch.ones(n, device="tpu")))
    e["bad_root"] = _error(lambda: dist.broadcast(torch.ones(2, device="tpu"), src=7))
    e["roots_differ"] = _error(lambda: dist.broadcast(torch.ones(2, device="tpu"),
                                                      src=0 if rank < 2 else 1))
    e["ops_differ"] = _error(lambda: dist.all_reduce(
        torch.ones(2, device="tpu"), dist.ReduceOp.MAX if rank == 0 else dist.ReduceOp.SUM))
    e["band_float"] = _error(lambda: dist.all_reduce(torch.ones(2, device="tpu"), dist.ReduceOp.BAND))
    # All-to-all splits that disagree: rank 0 expects 2 rows from rank 1, which sends it 1.
    in_splits = [1] * world
    out_splits = [1, 2, 1, 1] if rank == 0 else [1] * world
    e["splits_differ"] = _error(lambda: dist.all_to_all_single(
        torch.empty(sum(out_splits), device="tpu"), torch.ones(world, device="tpu"),
        out_splits, in_splits))
    # A complex tensor is reduced as its pairs of reals (PyTorch's c10d views it so).
    c = torch.full((2,), 1 + 2j, dtype=torch.complex64, device="tpu")
    e["complex"] = _error(lambda: dist.all_reduce(c)) or str(c.cpu().tolist())
    ok = torch.ones(2, device="tpu")
    dist.all_reduce(ok)
    e["after"] = ok.cpu()
    results["errors"] = e
    # Memory: a tensor's HBM is released when it goes.
    before = torch.tpu.memory_allocated()
    y = torch.ones(1 << 20, device="tpu")
    held = torch.tpu.memory_allocated() - before
    del y
    results["memory"] = (held, torch.tpu.memory_allocated() - before)
    _save(out_dir, rank, "review", results)
    dist.destroy_process_group()


def just_init(rank: int) -> None:
    """Creates the process group (a test of what creating it refuses)."""
    dist.init_process_group("tpu")
    dist.destroy_process_group()
