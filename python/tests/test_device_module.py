"""``torch.tpu``, the device module a PyTorch user expects of a backend (as ``torch.cuda``):
memory figures, the chip's properties, device selection, seeding, streams and events timed in
simulated time."""

import time

import pytest
import torch

import tpuemu  # noqa: F401

MIB = 1 << 20


def test_memory_figures_follow_the_tensors_held():
    torch.tpu.synchronize()
    base, base_reserved = torch.tpu.memory_allocated(), torch.tpu.memory_reserved()
    free0 = torch.tpu.mem_get_info()[0]
    # An empty tensor's bytes are reserved by the call that makes it (HBM is taken at the
    # first write: memory_allocated counts what kernels wrote).
    e = torch.empty(MIB, dtype=torch.float32, device="tpu")  # 4 MiB
    assert torch.tpu.memory_reserved() - base_reserved == 4 * MIB
    assert free0 - torch.tpu.mem_get_info()[0] == 4 * MIB
    x = torch.ones(MIB, dtype=torch.float32, device="tpu")  # 4 MiB, written
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() - base == 4 * MIB
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    y = torch.ones(2 * MIB, dtype=torch.float32, device="tpu")  # 8 MiB more
    torch.tpu.synchronize()
    del y
    # x and y were held at once (a fill may hold a transient too).
    assert torch.tpu.max_memory_allocated() - base >= 12 * MIB
    assert torch.tpu.memory_allocated() - base == 4 * MIB
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert stats["allocated_bytes.all.peak"] == torch.tpu.max_memory_allocated()
    assert stats["reserved_bytes.all.current"] == torch.tpu.memory_reserved()
    torch.tpu.empty_cache()
    assert torch.tpu.memory_allocated() - base == 4 * MIB
    del x, e
    assert torch.tpu.memory_allocated() == base
    assert torch.tpu.mem_get_info()[0] == free0


def test_properties_are_the_chips():
    p = torch.tpu.get_device_properties(0)
    assert torch.tpu.get_device_name() == p.name and tpuemu.chip() in p.name
    assert p.total_memory == torch.tpu.mem_get_info()[1]
    # TPU v5e, the default chip: 197 TFLOP/s bf16 and 819 GB/s HBM (Google Cloud's figures).
    assert p.peak_bf16_flops == pytest.approx(197e12, rel=0.01)
    assert p.hbm_bytes_per_s == pytest.approx(819e9, rel=0.01)


def test_one_device_to_select():
    assert torch.tpu.device_count() == 1 and torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.set_device("tpu:0")
    with pytest.raises(ValueError, match="one tpu device"):
        torch.tpu.set_device(1)


def test_manual_seed_all_seeds_the_tpu():
    torch.tpu.manual_seed_all(1234)
    a = torch.randn(5, device="tpu").cpu()
    torch.manual_seed(1234)
    assert torch.equal(torch.randn(5, device="tpu").cpu(), a)
    assert torch.tpu.initial_seed() == 1234


def _timed_product(n):
    x = torch.ones(n, n, device="tpu")
    torch.tpu.synchronize()
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    y = x @ x
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    assert y[0, 0].item() == n
    return start.elapsed_time(end), wall_ms


def test_events_time_the_simulated_chip_not_the_host():
    _timed_product(1024)  # the first call also compiles the kernel, on the host's clock
    ms, wall_ms = _timed_product(1024)
    # At least the product at the chip's peak (2 n^3 flops at 197 TFLOP/s) and its HBM
    # traffic (4 MiB read, 4 MiB written at 819 GB/s); far below what emulating it took.
    assert ms >= max(2 * 1024**3 / 197e12, 8 * MIB / 819e9) * 1e3
    assert ms < wall_ms
    # Simulated time is the same on every run: the events hold absolute simulated times in f64
    # nanoseconds, so their difference carries the rounding of the absolute time (about 1e-7 ns
    # a second into a process's simulated time; it failed once with an exact comparison), never
    # more.
    again = _timed_product(1024)[0]
    assert abs(again - ms) <= 1e-9 * ms, (again, ms)


def test_streams_run_work_in_order():
    s = torch.tpu.Stream()
    x = torch.arange(4.0, device="tpu")
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        y = x * 2 + 1
    s.synchronize()
    assert y.cpu().tolist() == [1.0, 3.0, 5.0, 7.0]
