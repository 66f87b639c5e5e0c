"""Sharded PyTorch on an emulated slice (tpuemu.distributed): every collective, DTensor, DDP,
FSDP2, tensor and sequence parallelism and FSDP x TP, each against the same program on the CPU
through gloo in the same processes; timing against ``tpuemu bench collective``; bad input.

The rank programs are in dist_workers.py; each test starts its ranks with
``tpuemu.distributed.spawn`` (one process per chip) with the CPU fallback off.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

import tpuemu.distributed as td

import dist_workers as w

ROOT = Path(__file__).resolve().parents[2]
ENV = {"TORCH_TPU_CPU_FALLBACK": "0"}


def _load(out: Path, name: str, world: int) -> list:
    return [torch.load(out / f"{name}.rank{r}.pt", weights_only=False) for r in range(world)]


def _same(a, b, path=""):
    if isinstance(a, dict):
        assert set(a) == set(b), (path, set(a) ^ set(b))
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, (path, a.dtype, b.dtype, a.shape, b.shape)
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=lambda m: f"{path}: {m}")
    else:
        assert a == b, (path, a, b)


@pytest.fixture(scope="module")
def collectives(tmp_path_factory):
    out = tmp_path_factory.mktemp("collectives")
    td.spawn(w.collectives, args=(str(out),), slice="v5e:2x2",
             env={**ENV, "TORCH_TPU_DEFER_AND_FUSE": "1"})
    return _load(out, "collectives", 4)


def test_every_collective_matches_gloo(collectives):
    for rank, res in enumerate(collectives):
        tpu, cpu = res["tpu"], res["cpu"]
        keys = [k for k in cpu if not k.startswith(("local_", "S", "R", "PP", "full", "ops",
                                                    "functional", "graphs"))]
        assert len(keys) >= 21, keys
        _same({k: tpu[k] for k in keys}, {k: cpu[k] for k in keys}, f"rank {rank}")
    # Hand-checked values: a sum over 4 ranks, the dp and tp sub-groups of the 2x2 mesh.
    r0 = collectives[0]["tpu"]
    f = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    torch.testing.assert_close(r0["all_reduce_SUM"], sum(f * (k + 1) + k for k in range(4)))
    assert r0["group_tp"].tolist() == [3.0] * 3  # ranks 0 and 1
    assert r0["group_dp"].tolist() == [4.0] * 3  # ranks 0 and 2
    assert r0["send_recv"].tolist() == [3.0] * 3  # from rank 3, around the ring


def test_collectives_run_on_the_tpu_process_group(collectives):
    for rank, res in enumerate(collectives):
        m = res["metrics"]
        assert m["fallbacks"] == {}, m["fallbacks"]
        assert m["device"] == str(rank)  # each process its own tpu:LOCAL_RANK
        assert m["mode"] == "defer"
        assert m["flushes"].get("collective", 0) > 0  # DeferAndFuse runs its graph first
        kinds = set(m["collectives"])
        assert {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
                "reduce", "gather", "scatter", "send", "recv"} <= kinds, kinds
        for kind, c in m["collectives"].items():
            assert c["calls"] > 0 and c["ns"] > 0, (kind, c)


def test_dtensor_redistributes_and_computes_as_on_gloo(collectives):
    for rank, res in enumerate(collectives):
        keys = [k for k in res["cpu"] if k.startswith(("local_", "S", "R", "PP", "full", "ops"))]
        assert len(keys) >= 9 + 81 + 9 + 2, len(keys)
        _same({k: res["tpu"][k] for k in keys}, {k: res["cpu"][k] for k in keys}, f"rank {rank}")
    x = torch.arange(35, dtype=torch.float32).reshape(5, 7) / 7
    # Uneven Shard(0) x Shard(1) over 2x2: rank 3 holds rows 3..4, columns 4..6.
    torch.testing.assert_close(collectives[3]["tpu"]["local_S0S1"], x[3:, 4:])
    torch.testing.assert_close(collectives[1]["tpu"]["full_tensor"], x)
    # Partial(sum) over both dimensions: (1 + 2 + 3 + 4) x.
    torch.testing.assert_close(collectives[2]["tpu"]["PP->RR"], 10 * x)


def test_functional_collectives_eager_and_compiled(collectives):
    for res in collectives:
        torch.testing.assert_close(res["tpu"]["functional_eager"], res["cpu"]["functional_eager"])
        torch.testing.assert_close(res["tpu"]["functional_compiled"], res["cpu"]["functional_eager"])
        graphs = res["tpu"]["graphs"]
        assert graphs and all(s == "compiled" for _, s in graphs), graphs


def test_bad_input_is_a_clear_error_on_every_rank(tmp_path):
    td.spawn(w.mismatches, args=(str(tmp_path),), slice="v5e:2", env=ENV)
    res = _load(tmp_path, "mismatches", 2)
    for rank, r in enumerate(res):
        assert "different shapes" in r["shapes"] and "allreduce_" in r["shapes"], r["shapes"]
        assert "rank 0: [[4]], rank 1: [[5]]" in r["shapes"], r["shapes"]
        assert "different dtypes" in r["dtypes"] and "float32" in r["dtypes"], r["dtypes"]
        assert "bfloat16" in r["dtypes"], r["dtypes"]
        assert "different collectives" in r["kinds"], r["kinds"]
        assert "all_reduce" in r["kinds"] and "broadcast" in r["kinds"], r["kinds"]
        assert r["cpu_tensor"] and "cpu" in r["cpu_tensor"].lower(), r["cpu_tensor"]
        assert r["after"].tolist() == [2.0] * 4
        assert r["collectives"]["barrier"]["calls"] == 1


def test_a_rank_that_exits_fails_the_collective_not_hangs(tmp_path):
    td.spawn(w.rank_exits, args=(str(tmp_path),), slice="v5e:2", env=ENV)
    r = json.loads((tmp_path / "exit.json").read_text())
    assert "DistBackendError" in r["error"] and "allreduce_" in r["error"], r["error"]
    assert r["seconds"] < 20, r


def test_a_world_that_does_not_fill_the_slice_is_refused():
    with pytest.raises(ValueError, match="do not fit the slice v5e:2x2"):
        td.spawn(w.mismatches, args=("/nonexistent",), nprocs=2, slice="v5e:2x2")
    with pytest.raises(ValueError, match="slice"):
        td.spawn(w.mismatches, args=("/nonexistent",), slice="v5e:0x2")


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    out = tmp_path_factory.mktemp("training")
    td.spawn(w.training, args=(str(out),), slice="v5e:2x2", env=ENV)
    return out, _load(out, "training", 4)


def _close_params(got: dict, want: dict, atol: float, what: str, stray: float = 1e-3):
    """Every parameter within `atol`, but for at most a `stray` share of each tensor's elements,
    which may be up to 4 `atol` off. AdamW divides by `sqrt(v) + eps`: in the first steps an
    element whose gradient is near zero moves by a share of the learning rate that its
    gradient's last bits decide, and the CPU reference's own last bits depend on the host's
    vector width (PyTorch's CPU kernels sum in other orders with AVX2 than with AVX-512).
    Measured: all within `atol` on an AVX-512 host; 1 element of 8192 at 1.48 `atol` on an AVX2
    host (AMD EPYC, 2026-12-06), at the same tpu bits."""
    assert set(got) == set(want), what
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, (what, k)
        d = (got[k].float() - want[k].float()).abs()
        off = int((d > atol).sum())
        assert off <= stray * d.numel() and (d.numel() == 0 or float(d.max()) <= 4 * atol), (
            f"{what} {k}: {off} of {d.numel()} elements beyond {atol}, largest {float(d.max()):.3g}")


def test_ddp_parameters_identical_on_every_rank_and_equal_to_gloo(training):
    _, res = training
    first = res[0]["tpu"]["ddp"]
    for rank, r in enumerate(res):
        for k, v in r["tpu"]["ddp"].items():
            assert torch.equal(v, first[k]), (rank, k)  # every rank applied the same update
        # Against the same DDP program on the CPU (gloo): float32 matmuls at full precision.
        _close_params(r["tpu"]["ddp"], r["cpu"]["ddp"], 1e-5, f"rank {rank} ddp")
        assert r["metrics"]["fallbacks"] == {}


def _zoo_losses(got, want):
    from tpuemu.zoo.tolerance import LIMITS

    for g, x in zip(got, want):
        assert abs(g - x) / abs(x) <= LIMITS["loss"], (got, want)


# The learning rate of the rank programs' AdamW (dist_workers._steps).
LR = 1e-2


def test_fsdp2_matches_gloo_and_holds_a_quarter_of_the_state(training):
    from tpuemu.zoo.tolerance import LIMITS

    _, res = training
    for rank, r in enumerate(res):
        _zoo_losses(r["tpu"]["fsdp_losses"], r["cpu"]["fsdp_losses"])
        # Parameters after three AdamW steps, in units of the learning rate (zoo tolerance).
        _close_params(r["tpu"]["fsdp_params"], r["cpu"]["fsdp_params"], LIMITS["adamw"] * LR,
                      f"rank {rank} fsdp")
        t = r["tpu"]
        full, local = t["param_bytes"], t["local_bytes"]
        # FSDP2 pads each parameter's dim 0 to a multiple of 4: a quarter, up to padding.
        assert full / 4 <= local < full / 4 * 1.1, (full, local)
        # HBM held once sharded: this chip's quarter of the parameters (each buffer in 512-byte
        # granules); after training, the parameters and AdamW's two moments: three quarters
        # of the parameters' bytes, nothing replicated.
        assert local <= t["hbm_sharded"] <= local * 1.5, (local, t["hbm_sharded"])
        assert 3 * local <= t["hbm_trained"] <= 3 * local * 1.5, (local, t["hbm_trained"])
        assert t["hbm_trained"] < full, (full, t["hbm_trained"])


def test_tensor_sequence_and_2d_parallelism_match_gloo(training):
    from tpuemu.zoo.tolerance import LIMITS

    _, res = training
    for rank, r in enumerate(res):
        for name in ("tp", "fsdp_tp"):
            _zoo_losses(r["tpu"][f"{name}_losses"], r["cpu"][f"{name}_losses"])
            _close_params(r["tpu"][f"{name}_params"], r["cpu"][f"{name}_params"],
                          LIMITS["adamw"] * LR, f"rank {rank} {name}")
    # The two dp replicas trained on different data: their losses differ.
    assert res[0]["tpu"]["fsdp_tp_losses"] != res[2]["tpu"]["fsdp_tp_losses"]


def _spans(path: Path) -> list[dict]:
    """The complete events of a Chrome trace, with their track (tpuemu's own field)."""
    events = json.loads(path.read_text())["traceEvents"]
    return [e for e in events if e.get("ph") == "X"]


def test_ddp_trace_overlaps_gradient_all_reduces_with_the_backward_pass(training):
    out, _ = training
    for rank in range(4):
        spans = _spans(out / "ddp" / f"step.rank{rank}.json")
        colls = [s for s in spans if s["args"]["track"] == {"kind": "link", "chip": 0,
                                                           "link": "collective"}]
        kernels = [s for s in spans if s["args"]["track"].get("kind") == "kernel"]
        assert len([c for c in colls if c["args"]["kind"] == "all_reduce"]) >= 2, colls
        # A kernel runs while a gradient all-reduce is in flight: the backward pass goes on.
        overlapping = [(c["name"], k["name"]) for c in colls for k in kernels
                       if k["ts"] < c["ts"] + c["dur"] and k["ts"] + k["dur"] > c["ts"]]
        assert overlapping, (colls, kernels[-5:])
        meta = json.loads((out / "ddp" / f"step.rank{rank}.json").read_text())["otherData"]["tpuemu"]
        assert (meta["rank"], meta["world_size"], meta["slice"]) == (rank, 4, "v5e:2x2")
    # Every rank's collective spans start and end together (clocks joined).
    first = [(s["ts"], s["dur"]) for s in _spans(out / "ddp" / "step.rank0.json")
             if s["args"]["track"].get("link") == "collective"]
    for rank in range(1, 4):
        mine = [(s["ts"], s["dur"]) for s in _spans(out / "ddp" / f"step.rank{rank}.json")
                if s["args"]["track"].get("link") == "collective"]
        assert mine == first


def _tpuemu_cli() -> Path:
    exe = ROOT / "target" / "release" / "tpuemu"
    if not exe.exists():
        subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "tpuemu"], cwd=ROOT,
                       check=True)
    return exe


def test_an_all_reduce_takes_what_bench_collective_reports(tmp_path):
    # 4 ranks and 16 MiB (8 and 64 MiB before: 39 s of the suite, most of it spawning ranks
    # and moving bytes; the comparison is the same).
    td.spawn(w.timing, args=(str(tmp_path),), nprocs=4, env=ENV)  # v5e, 4 chips: 2x2
    res = _load(tmp_path, "timing", 4)
    # The world group of a 2x2 slice: chip r = x + 2y, so y is the outer axis: --axes 1,0.
    cli = subprocess.run(
        [str(_tpuemu_cli()), "bench", "collective", "--op", "all-reduce", "--slice", "v5e:2x2",
         "--axes", "1,0", "--bytes", str(16 << 20), "--timing-only", "--json"],
        check=True, capture_output=True, text=True)
    want_ns = json.loads(cli.stdout)["seconds_simulated"] * 1e9
    for r in res:
        assert r["ok"]
        assert r["big"]["calls"] == 1 and r["big"]["bytes"] == 16 << 20
        assert abs(r["big"]["ns"] - want_ns) <= 0.01 * want_ns, (r["big"]["ns"], want_ns)
    # Clocks joined: rank 3 computed first, so the others waited for it and it waited for none.
    assert res[3]["joined"]["wait_ns"] == 0.0
    behind = res[3]["t0"] - max(r["t0"] for i, r in enumerate(res) if i != 3)
    assert behind > 0
    for i, r in enumerate(res):
        if i != 3:
            assert r["joined"]["wait_ns"] >= behind * 0.9, (i, r["joined"], behind)


def test_torchrun_trains_the_fsdp_tp_example_against_gloo(tmp_path):
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_TPU_", "TPUEMU_"))}
    env.update(ENV, TPUEMU_SLICE="v5e:2x2")
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
         str(ROOT / "examples" / "train_fsdp_tp.py"), "--steps", "2", "--check",
         "--trace", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "v5e:2x2: dp 2 x tp 2" in out, out
    assert "largest parameter difference from CPU/gloo" in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"step.rank{i}.json" for i in range(4)]
    b = td.step_breakdown(tmp_path / "step.rank0.json")
    assert b["compute_ns"] > 0 and b["collective_ns"] > 0
    assert b["exposed_collective_ns"] <= b["collective_ns"] <= b["step_ns"]


def test_slices_place_ranks_on_the_torus():
    s = td.Slice.parse("v5e:2x2")
    assert s.coords == ((0, 0), (1, 0), (0, 1), (1, 1))  # rank r = x + 2y
    # A (2, 2) DeviceMesh ("dp", "tp"): tp groups {0,1}, {2,3} run along axis 0, dp groups
    # {0,2}, {1,3} along axis 1; the world along both, y outermost.
    assert s.axes_of([0, 1]) == ([0], True)
    assert s.axes_of([1, 3]) == ([1], True)
    assert s.axes_of([0, 1, 2, 3]) == ([1, 0], True)
    assert s.axes_of([0, 2, 1, 3]) == ([0, 1], True)
    assert s.axes_of([0, 3]) == ([1, 0], False)  # diagonal: no sub-torus
    # Without dimensions, the world size's chips in the most nearly square shape.
    assert td.Slice.parse("v5e", 8).mesh == (2, 4)
    assert td.Slice.parse("v5p", 8).mesh == (2, 2, 2)
    assert td.Slice.parse("v5e", 2).mesh == (2,)
    assert td.Slice.parse("2xv5e:2x2").mesh == (2, 2, 2)  # DCN axis last
    with pytest.raises(ValueError, match="at most"):
        td.Slice.parse("v5e:2x2x2")  # v5e is a 2-D torus
    with pytest.raises(ValueError, match="unknown chip"):
        td.Slice.parse("v9:2x2")


def test_step_breakdown_sums_intervals(tmp_path):
    def x(kind, ts, dur, **track):
        return {"ph": "X", "name": kind, "ts": ts, "dur": dur, "args": {"track": {"kind": kind, **track}}}

    events = [x("kernel", 0, 10, chip=0, core=0), x("kernel", 5, 10, chip=0, core=0),
              x("link", 12, 8, chip=0, link="collective"), x("kernel", 30, 5, chip=0, core=0),
              x("link", 28, 4, chip=0, link="collective"), x("host", 40, 1, lane="aten")]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    b = td.step_breakdown(p)
    # Kernels cover [0, 15) and [30, 35): 20 us; collectives [12, 20) and [28, 32): 12 us, of
    # which [15, 20) and [28, 30) have no kernel: 7 us exposed; the span is [0, 41): 41 us,
    # idle where neither runs: [20, 28) and [35, 41): 14 us.
    assert b == {"step_ns": 41e3, "compute_ns": 20e3, "collective_ns": 12e3,
                 "exposed_collective_ns": 7e3, "idle_ns": 14e3}


@pytest.fixture(scope="module")
def review(tmp_path_factory):
    out = tmp_path_factory.mktemp("review")
    td.spawn(w.review, args=(str(out),), slice="v5e:2x2", env=ENV)
    return _load(out, "review", 4)


def test_receives_posted_first_and_noncontiguous_tensors(review):
    for rank, res in enumerate(review):
        keys = ["recv_first", "batch_recv_first", "noncontiguous"]
        _same({k: res["tpu"][k] for k in keys}, {k: res["cpu"][k] for k in keys}, f"rank {rank}")
    assert review[1]["tpu"]["recv_first"].tolist() == [0.0] * 3
    assert review[0]["cpu"]["recv_any"] == [(1, 10), (2, 20), (3, 30)]
    # A receive from any rank is refused, not answered with a wrong rank.
    assert "NotImplementedError" in review[0]["tpu"]["recv_any"], review[0]["tpu"]["recv_any"]
    assert "name the sender" in review[0]["tpu"]["recv_any"]


def test_a_compiled_ddp_model_trains_as_on_gloo(review):
    for rank, res in enumerate(review):
        _close_params(res["tpu"]["compiled_ddp"], res["cpu"]["compiled_ddp"], 1e-5, f"rank {rank}")


def test_refused_arguments_are_errors_on_every_rank_and_the_group_goes_on(review):
    for rank, res in enumerate(review):
        e = res["errors"]
        if rank == 1:  # the rank whose input does not fit
            assert e["one_rank_bad_size"].startswith("ValueError"), e
        else:
            assert "rank 1: ValueError" in e["one_rank_bad_size"], e
            assert "refused its arguments" in e["one_rank_bad_size"], e
        assert "ValueError" in e["bad_root"] and "root rank 7" in e["bad_root"], e
        assert "different roots" in e["roots_differ"], e
        assert "different reduce operations" in e["ops_differ"] and "max" in e["ops_differ"], e
        assert "ReduceOp.BAND needs integer" in e["band_float"], e
        assert "sends 1 rows to rank 0, which expects 2" in e["splits_differ"], e
        # Each rank held 1 + 2j: the sum over the ranks, exactly.
        world = len(review)
        assert e["complex"] == str([complex(world, 2 * world)] * 2), e
        assert e["after"].tolist() == [4.0, 4.0]


def test_memory_is_released_when_a_tensor_goes(review):
    for res in review:
        held, after = res["memory"]
        assert held >= 4 << 20 and after <= 0, res["memory"]


def test_a_block_of_the_slice_is_timed_on_a_slice_of_its_shape():
    s = td.Slice.parse("v5e:2x4")
    # A (2, 4) DeviceMesh's "tp" groups: ranks 0-3 are a 2x2 block of the 2x4 slice.
    assert s.timing_of([0, 1, 2, 3]) == ("v5e:2x2", [1, 0], "block")
    assert s.timing_of([0, 1]) == ("v5e:2x4", [0], "exact")
    assert s.timing_of([0, 3]) == ("v5e:2x4", [1, 0], "enclosing")


def test_a_chip_that_contradicts_the_slice_is_refused():
    from torch.multiprocessing.spawn import ProcessRaisedException

    with pytest.raises(ProcessRaisedException, match="is set to v6e .* but the slice is v5e:2"):
        td.spawn(w.just_init, slice="v5e:2", env={**ENV, "TPUEMU_CHIP": "v6e"})
