"""Hostile but ordinary inputs raise as PyTorch's CPU kernels do, where they do, and never
return a silently wrong value: memory asked for is there or refused at the call, switch
variables with no meaning are refused, integer powers that have no integer value raise."""

import os
import signal
import subprocess
import sys

import pytest
import torch

import tpuemu
from tpuemu._compile import compiled_graphs


def test_memory_is_reserved_by_the_call_that_makes_a_tensor(mode):
    # The default chip is a TPU v5e: 16 GB (10^9 bytes) of HBM (Google Cloud's published
    # figure). Tensors of 1 GiB fill what is free, and the one that does not fit raises at its
    # own call.
    gib = 1 << 30
    free, total = torch.tpu.mem_get_info()
    assert tpuemu.chip() == "v5e" and total == 16 * 10**9
    held = []
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 1\.00 GiB"):
        for _ in range(64):
            held.append(torch.empty(gib // 4, dtype=torch.float32, device="tpu"))
    assert len(held) == free // gib <= 14
    assert torch.tpu.mem_get_info()[0] == free - len(held) * gib
    # Addresses of live storages never repeat; a dropped tensor's bytes can be taken again.
    ptrs = {t.untyped_storage().data_ptr() for t in held}
    assert len(ptrs) == len(held)
    held.pop()
    again = torch.empty(gib // 4, dtype=torch.float32, device="tpu")
    assert again.untyped_storage().data_ptr() not in ptrs
    del held, again
    assert torch.tpu.mem_get_info()[0] == free


@pytest.mark.parametrize(
    "var", ["TORCH_TPU_DEFER_AND_FUSE", "TORCH_TPU_LAUNCH_BLOCKING", "TORCH_TPU_CPU_FALLBACK"]
)
def test_a_switch_with_a_meaningless_value_is_refused_at_import(var):
    env = {**os.environ, var: "banana"}
    r = subprocess.run(
        [sys.executable, "-c", "import tpuemu"], env=env, capture_output=True, text=True
    )
    assert r.returncode != 0
    assert "ValueError" in r.stderr and f'{var}="banana"' in r.stderr, r.stderr[-2000:]
    assert "1, 0, true, false" in r.stderr
    env[var] = "TRUE"
    r = subprocess.run(
        [sys.executable, "-c", "import tpuemu; print(tpuemu.mode())"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]



def test_an_integer_tensor_to_a_negative_integer_power_raises(mode):
    floats = []
    for dev in ["cpu", "tpu"]:
        x = torch.tensor([2, 3], device=dev)
        with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
            x**-1
        # A float exponent makes the result float: no error.
        floats.append((x**-1.0).cpu())
    assert floats[1].dtype == floats[0].dtype and torch.equal(floats[0], floats[1])


_X3 = torch.randn(2, 5, generator=torch.Generator().manual_seed(0))

# Values PyTorch's CPU kernels refuse: the tpu raises the same exception type with the same
# message (after the operator's name), checked on the device and raised at the read.
REFUSED = {
    "index_select": lambda d: torch.arange(3.0, device=d).index_select(
        0, torch.tensor([5], device=d)
    ),
    "gather": lambda d: torch.arange(3.0, device=d).gather(0, torch.tensor([5], device=d)),
    "gather_negative": lambda d: torch.arange(3.0, device=d).gather(
        0, torch.tensor([-1], device=d)
    ),
    "embedding": lambda d: torch.nn.functional.embedding(
        torch.tensor([3], device=d), torch.ones(3, 2, device=d)
    ),
    "getitem": lambda d: torch.arange(3.0, device=d)[torch.tensor([7], device=d)],
    "getitem_negative": lambda d: torch.arange(3.0, device=d)[torch.tensor([-4], device=d)],
    "scatter_add": lambda d: torch.zeros(3, device=d).scatter_add(
        0, torch.tensor([-2], device=d), torch.ones(1, device=d)
    ),
    "cross_entropy": lambda d: torch.nn.functional.cross_entropy(
        _X3.to(d), torch.tensor([5, 0], device=d)
    ),
    "nll_loss": lambda d: torch.nn.functional.nll_loss(_X3.to(d), torch.tensor([-5, 0], device=d)),
    "floor_divide": lambda d: torch.tensor([2, 3], device=d) // torch.tensor([0, 1], device=d),
    "remainder": lambda d: torch.tensor([2, 3], device=d) % torch.tensor([0, 1], device=d),
    "fmod": lambda d: torch.fmod(torch.tensor([2, 3], device=d), torch.tensor([0, 1], device=d)),
    "div_trunc": lambda d: torch.div(
        torch.tensor([2, 3], device=d), torch.tensor([1, 0], device=d), rounding_mode="trunc"
    ),
    # A result with two checks (the divisor and the quotient's range), read through another op.
    "floor_divide_then_float": lambda d: (
        torch.tensor([2, 3], device=d) // torch.tensor([0, 1], device=d)
    ).float(),
    "take": lambda d: torch.take(torch.arange(4.0, device=d), torch.tensor([7], device=d)),
    "take_negative": lambda d: torch.take(
        torch.arange(4.0, device=d), torch.tensor([-5], device=d)
    ),
    "put": lambda d: torch.zeros(4, device=d).put(
        torch.tensor([9], device=d), torch.ones(1, device=d)
    ),
    "put_accumulate": lambda d: torch.zeros(4, device=d).put(
        torch.tensor([-9], device=d), torch.ones(1, device=d), accumulate=True
    ),
    "repeat_interleave": lambda d: torch.repeat_interleave(torch.tensor([-1, 2], device=d)),
}


def _raised(f, dev):
    try:
        f(dev).cpu()
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return e
    return None


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_values_the_cpu_refuses_raise_the_same_on_the_tpu(mode, case):
    want = _raised(REFUSED[case], "cpu")
    assert want is not None, "the CPU raises for this case"
    got = _raised(REFUSED[case], "tpu")
    assert type(got) is type(want), f"{case}: tpu raised {got!r}, the CPU {want!r}"
    assert str(want).splitlines()[0] in str(got), f"{case}: {got} vs {want}"


def test_one_hot_out_of_range_raises(mode):
    # PyTorch's one_hot leaves the check on non-CPU devices to scatter's device assert, as on
    # CUDA: a RuntimeError naming the bad value (the CPU's own message differs).
    for bad in (-1, 3):
        with pytest.raises(RuntimeError, match=f"index {bad} is out of bounds"):
            torch.nn.functional.one_hot(torch.tensor([bad, 0], device="tpu"), 3).cpu()
    ok = torch.nn.functional.one_hot(torch.tensor([2, 0], device="tpu"), 3).cpu()
    assert ok.tolist() == [[0, 0, 1], [1, 0, 0]]


def test_a_failed_result_stays_failed_and_other_tensors_stay_readable():
    # Strict and DeferAndFuse raise where the failing value would be read (Debug raises at the
    # operator, tested above).
    for m in ["strict", "defer"]:
        with tpuemu.mode_guard(m):
            x = torch.arange(3.0, device="tpu")
            bad = x.index_select(0, torch.tensor([5], device="tpu"))
            derived = bad.sum() * 2
            good = x * 2
            assert good.cpu().tolist() == [0.0, 2.0, 4.0], m
            for t in (bad, derived, bad):
                # The error names the operator and the line that called it.
                with pytest.raises(
                    IndexError,
                    match=r"aten::index_select: index out of range in self "
                    r"\(called at .*test_errors\.py:\d+\)",
                ):
                    t.cpu()
            # Computed from a failed tensor after the failure was found: failed too.
            with pytest.raises(IndexError, match="index out of range"):
                (bad + 1).cpu()
            assert (good + 1).cpu().tolist() == [1.0, 3.0, 5.0], m


def test_in_range_indices_and_ignored_targets_are_not_errors(mode):
    x = torch.arange(6.0).reshape(2, 3)
    i = torch.tensor([[2, -3]])
    assert torch.equal(x.to("tpu")[:, i.to("tpu")].cpu(), x[:, i])
    t = torch.tensor([-100, 4])
    got = torch.nn.functional.nll_loss(_X3.to("tpu"), t.to("tpu")).cpu()
    assert torch.allclose(got, torch.nn.functional.nll_loss(_X3, t))
    assert (torch.tensor([7, -7], device="tpu") // torch.tensor([2, 2], device="tpu")).cpu().tolist() == [3, -4]


def test_a_float_cast_to_int64_is_exact_or_refused(mode):
    # The CPU casts 3e9, -5e9 and 2**40 exactly; the device holds int64 in 32-bit lanes and
    # would saturate them at +-2**31: refused instead. Values that fit truncate as on the CPU.
    for bad in ([3e9], [-5e9], [2.0**40], [1.0, 2.0**31], [-(2.0**63)]):
        x = torch.tensor(bad, device="tpu")
        with pytest.raises(RuntimeError, match="outside int32's range"):
            x.to(torch.int64).cpu()
    ok = torch.tensor([1.5, -2.7, 2.0**31 - 128, -(2.0**31)])
    assert torch.equal(ok.to("tpu").to(torch.int64).cpu(), ok.to(torch.int64))
    # NaN, infinities and magnitudes past 2^63 have no defined int64 on the CPU either (models
    # cast them and mask them out, as T5's position buckets cast log(0)): not refused.
    undefined = torch.tensor([float("nan"), float("-inf"), float("inf"), 2.0**64])
    assert undefined.to("tpu").to(torch.int64).cpu().shape == (4,)


WIDE_NUMBERS = {
    "mul": lambda d: torch.tensor([3, 5], device=d) * 2**40,
    "add": lambda d: torch.tensor([3, 5], device=d) + 2**33,
    "add_alpha": lambda d: torch.tensor([3, 5], device=d).add(
        torch.tensor([1, 1], device=d), alpha=2**40
    ),
    "full": lambda d: torch.full((2,), 2**40, device=d),
    "clamp": lambda d: torch.tensor([3, 5], device=d).clamp(max=2**40),
    "fill_": lambda d: torch.tensor([3, 5], device=d).fill_(2**35),
}


_WIDE_CHECK = """
import torch, tpuemu, test_errors as t
for case, f in sorted(t.WIDE_NUMBERS.items()):
    if tpuemu.cpu_fallback_enabled():
        got, want = f("tpu").cpu(), f("cpu")
        assert torch.equal(got, want), (case, got, want)
    else:
        try:
            f("tpu")
        except NotImplementedError as e:
            assert "needs more than 32 bits" in str(e), (case, e)
        else:
            raise AssertionError(case + ": not refused")
print("checked", len(t.WIDE_NUMBERS))
"""


@pytest.mark.parametrize("fallback", ["0", "1"])
def test_an_int64_number_beyond_32_bits_is_exact_or_refused(fallback):
    # The device's int64 lanes hold 32 bits: a number beyond them is refused when the call is
    # made (never truncated: these gave 0 or ignored the bound). With the CPU fallback off that
    # is the error; with it on the call runs on the CPU, exactly (a process for each).
    env = {**os.environ, "TORCH_TPU_CPU_FALLBACK": fallback}
    here = os.path.dirname(__file__)
    r = subprocess.run(
        [sys.executable, "-c", _WIDE_CHECK], env=env, cwd=here, capture_output=True, text=True
    )
    assert r.returncode == 0 and f"checked {len(WIDE_NUMBERS)}" in r.stdout, r.stderr[-2000:]


def test_an_int64_sum_beyond_int32_is_refused_not_wrapped(mode):
    # The device accumulates int64 in 32-bit lanes: these sums wrapped (704982704, 3, -2).
    for make in (
        lambda d: torch.arange(100000, device=d),
        lambda d: torch.tensor([2**31 - 1, 2**31 - 1, 5], device=d),
        lambda d: torch.tensor([2**31 - 1, 2**31 - 1], dtype=torch.int32, device=d),
    ):
        assert make("cpu").sum().item() >= 2**31
        with pytest.raises(RuntimeError, match="int64 result beyond int32's range"):
            make("tpu").sum().cpu()
    # A sum that fits is exact, even when partial sums wrap on the way.
    for v in ([2**30, 2**30, -(2**30), -(2**30)], list(range(1000))):
        assert torch.tensor(v, device="tpu").sum().item() == sum(v)
    x = torch.arange(12).reshape(3, 4)
    assert torch.equal(x.to("tpu").sum(1).cpu(), x.sum(1))


def _i(*v, dtype=torch.int64):
    return lambda d: torch.tensor(list(v), dtype=dtype, device=d)


# int64 results beyond int32 that the device's 32-bit lanes wrapped without a word (the
# values in the comments are what the tpu returned): each is refused on the device now.
OUTGROWN = {
    "mul": lambda d: _i(100000)(d) * _i(100000)(d),  # 1410065408
    "mul_scalar": lambda d: _i(100000)(d) * 100000,
    "square": lambda d: _i(65536)(d).square(),  # 2147483647
    "add": lambda d: _i(2**31 - 1)(d) + _i(1)(d),  # -2**31
    "add_alpha": lambda d: _i(2**31 - 1)(d).add(_i(2**31 - 1)(d), alpha=2),
    "sub_scalar": lambda d: _i(-(2**31))(d) - 1,  # 2**31 - 1
    "rsub": lambda d: torch.rsub(_i(2**31 - 1)(d), -(2**31)),
    "neg": lambda d: -_i(-(2**31))(d),  # -2**31
    "abs": lambda d: _i(5, -(2**31))(d).abs(),
    "pow": lambda d: _i(3)(d) ** 25,  # 2147483647
    "pow_tensor": lambda d: _i(2, 3)(d) ** _i(31, 20)(d),
    "floor_divide": lambda d: _i(-(2**31))(d) // -1,  # 0
    "cumsum": lambda d: _i(2**31 - 1, 5)(d).cumsum(0),
    "cumsum_int32": lambda d: _i(2**31 - 1, 5, dtype=torch.int32)(d).cumsum(0),
    "cumprod": lambda d: _i(65536, 65536)(d).cumprod(0),  # [65536, 0]
    "prod": lambda d: _i(65536, 65536)(d).prod(),  # 0
    "prod_dim": lambda d: _i(65536, 65536, 65536, 5)(d).reshape(2, 2).prod(0),
    "dot": lambda d: torch.dot(_i(65536, 1)(d), _i(65536, 1)(d)),  # 1
    "mm": lambda d: _i(100000)(d).reshape(1, 1) @ _i(100000)(d).reshape(1, 1),
    "addcmul": lambda d: torch.addcmul(_i(1)(d), _i(65536)(d), _i(65536)(d)),  # 1
    "diff": lambda d: torch.diff(_i(-(2**31), 2**31 - 1)(d)),  # -1
    "trace": lambda d: torch.trace(torch.full((2, 2), 2**30, device=d)),
    "index_computed": lambda d: torch.arange(10.0, device=d)[_i(65536)(d) * _i(65536)(d)],
    "index_add": lambda d: _i(2**31 - 1, 0)(d).index_add(0, _i(0)(d), _i(1)(d)),
    "index_add_alpha": lambda d: _i(0, 0)(d).index_add(0, _i(0)(d), _i(70000)(d), alpha=70000),
    "lcm": lambda d: torch.lcm(_i(65537)(d), _i(65539)(d)),  # 262147
    "lcm_just_beyond": lambda d: torch.lcm(_i(2, -2)(d), _i(2**30 + 1, 2**30 + 1)(d)),
    "scatter_add": lambda d: _i(2**31 - 1, 0)(d).scatter_add(0, _i(0, 0)(d), _i(1, 1)(d)),
    "index_put_accumulate": lambda d: _i(2**31 - 1)(d).index_put(
        (_i(0)(d),), _i(1)(d), accumulate=True
    ),
    "put_accumulate": lambda d: _i(2**31 - 1, 0)(d).put(_i(0)(d), _i(1)(d), accumulate=True),
    "scatter_reduce_prod": lambda d: _i(65536, 1)(d).scatter_reduce(
        0, _i(0)(d), _i(65536)(d), "prod"
    ),
    "index_reduce_prod": lambda d: _i(65536, 1)(d).index_reduce(0, _i(0)(d), _i(65536)(d), "prod"),
    # Computed from two checked results: fails with either (it followed only the first).
    "two_checked_inputs": lambda d: _i(3)(d) * 2 + _i(70000)(d) * _i(70000)(d),
    "in_place_after_a_checked_op": lambda d: (_i(2**30)(d) * 1).add_(2**30),
}

# The same operators where the true result fits int32: exact, even when a partial result
# wraps on the way (wrap-around arithmetic is exact modulo 2^32).
FITS = {
    "mul": lambda d: _i(46340, -46341)(d) * _i(46340, 46340)(d),
    "add": lambda d: _i(2**31 - 2, -(2**31) + 1)(d) + _i(1, -1)(d),
    "neg": lambda d: -_i(2**31 - 1, -(2**31) + 1)(d),
    "pow": lambda d: _i(3, -3, 2, 1, -1, 0)(d) ** 19,
    "pow_exact": lambda d: _i(3)(d) ** 19,  # 1162261467; f32 gave 1162261504
    "pow_tensor": lambda d: _i(3, -2, 7, 1, -1, 5, 0)(d) ** _i(19, 31, 0, -3, -3, -1, 5)(d),
    # A negative power of 0 from a tensor is 0 (ATen's powi), not refused.
    "pow_tensor_zero_base": lambda d: _i(0, 0, 2)(d) ** _i(-1, -2, -1)(d),
    # Within n 2^-24 sum(|x|) of 2^31 a sum cannot be told from one beyond (refused).
    "cumsum": lambda d: _i(2**30, -5, 5, 2**30 - 4096, -(2**31) + 1)(d).cumsum(0),
    "cumprod": lambda d: _i(-2, 3, 5, 7, 11, -13, 17, 19)(d).cumprod(0),
    "prod": lambda d: _i(65536, 65536, 0)(d).prod(),
    "prod_large": lambda d: _i(1024, 1024, 1024, 1)(d).prod(),
    "floor_divide": lambda d: _i(-(2**31), 7)(d) // _i(2, -2)(d),
    "addcmul": lambda d: torch.addcmul(_i(-(2**30))(d), _i(32768)(d), _i(32768)(d)),
    "mm": lambda d: torch.arange(12, device=d).reshape(3, 4) @ torch.arange(8, device=d).reshape(4, 2),
    "index_add": lambda d: _i(2**31 - 5000, -(2**31) + 5000)(d).index_add(
        0, _i(0, 1, 0)(d), _i(1000, -1000, -7)(d)
    ),
    "index_add_alpha": lambda d: _i(5, 0)(d).index_add(0, _i(0, 1)(d), _i(3, -70000)(d), alpha=30000),
    "lcm": lambda d: torch.lcm(_i(46340, -6, 0, 65536)(d), _i(46341, 4, 5, 32768)(d)),
    "scatter_reduce_prod": lambda d: _i(65536, 3)(d).scatter_reduce(
        0, _i(0, 1)(d), _i(-32768, 5)(d), "prod"
    ),
}


@pytest.mark.parametrize("case", sorted(OUTGROWN))
def test_an_int64_result_beyond_int32_is_refused_not_wrapped(mode, case):
    if case == "index_computed":
        # The CPU computes the index 2**32 and refuses it; the tpu refuses the product.
        with pytest.raises(IndexError, match="index 4294967296 is out of bounds"):
            OUTGROWN[case]("cpu")
    else:
        assert OUTGROWN[case]("cpu").abs().max().item() >= 2**31
    with pytest.raises(RuntimeError, match="int64 result beyond int32's range"):
        OUTGROWN[case]("tpu").cpu()


@pytest.mark.parametrize("case", sorted(FITS))
def test_an_int64_result_inside_int32_is_exact(mode, case):
    want = FITS[case]("cpu")
    got = FITS[case]("tpu").cpu()
    assert got.dtype == want.dtype and torch.equal(got, want), (case, got, want)


@pytest.mark.parametrize("case", sorted(OUTGROWN))
def test_an_int64_result_beyond_int32_is_refused_in_a_compiled_graph(case):
    # The same operators compiled whole (a compiled int64 sum gave 704982704): each graph is
    # compiled, not run eagerly, and its check is part of it.
    torch._dynamo.reset()
    before = len(compiled_graphs())
    with pytest.raises(RuntimeError, match="int64 result beyond int32's range"):
        torch.compile(lambda: OUTGROWN[case]("tpu"), backend="tpu")().cpu()
    graphs = compiled_graphs()[before:]
    assert graphs and all(kind == "compiled" for _, kind in graphs), graphs


def _compiled(f, *args):
    torch._dynamo.reset()
    return torch.compile(f, backend="tpu")(*args)


def test_compiled_graphs_check_values_as_eager_mode_does():
    # A compiled graph wrapped int64 results (a compiled int64 sum gave 704982704) and let bad
    # indices through: its checks are part of the graph now, raised by the first read of a
    # result of the call that broke one, and by every later one.
    d = "tpu"
    big = torch.arange(100000, device=d)
    with pytest.raises(RuntimeError, match="int64 result beyond int32's range"):
        _compiled(lambda x: x.sum(), big).cpu()
    r = _compiled(lambda x: (x * x, x + 1), _i(100000)(d))
    for t in r:
        with pytest.raises(RuntimeError, match="aten::mul.Tensor: an int64 result beyond"):
            t.cpu()
    x = torch.arange(3.0, device=d)
    f = torch.compile(lambda x, i: x.index_select(0, i) * 2, backend="tpu")
    torch._dynamo.reset()
    assert f(x, _i(2, 0)(d)).cpu().tolist() == [4.0, 0.0]
    bad = f(x, _i(5, 0)(d))
    with pytest.raises(IndexError, match="index out of range in self"):
        bad.cpu()
    # The same graph, called again with good values: no error, and earlier results stay failed.
    assert f(x, _i(1, 1)(d)).cpu().tolist() == [2.0, 2.0]
    with pytest.raises(IndexError):
        bad.cpu()
    # A result that fits is exact.
    got = _compiled(lambda x: (x.sum(), x.cumsum(0)), torch.arange(1000, device=d))
    assert got[0].item() == 499500 and torch.equal(got[1].cpu(), torch.arange(1000).cumsum(0))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        _compiled(lambda a, b: a // b, _i(3, 4)(d), _i(1, 0)(d)).cpu()


def _run_as_from_a_terminal(code):
    """Runs `code` in a new Python whose SIGINT is the default, as in a terminal: a shell starts
    a background job (`cmd &`, CI runners, nohup) with SIGINT ignored, its children inherit
    that, and Python then installs no KeyboardInterrupt handler (these tests failed so when the
    suite was started with `&`)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


_CTRL_C = """
import os, signal, threading, time, torch, tpuemu
a = torch.ones(4096, 4096, device="tpu")
torch.tpu.synchronize()
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
t0 = time.time()
try:
    (a @ a).cpu()
    print("not stopped")
except KeyboardInterrupt as e:
    print("stopped:", e)
assert torch.ones(3, device="tpu").add(1).cpu().tolist() == [2.0, 2.0, 2.0]
torch.tpu.synchronize()
print("still working")
"""


_CTRL_C_IN_PYTHON = """
import os, signal, time, torch, tpuemu
x = torch.ones(3, device="tpu")
try:
    os.kill(os.getpid(), signal.SIGINT)   # while Python runs, not the device
    time.sleep(1)
    print("not raised")
except KeyboardInterrupt:
    print("raised by Python")
# The Ctrl-C was Python's: the next operators are not stopped by it.
print(x.add(1).cpu().tolist(), (x @ x).item())
"""

_OWN_HANDLER = """
import os, signal, threading, time
hits = []
signal.signal(signal.SIGINT, lambda *a: hits.append(1))   # before tpuemu is imported
import torch, tpuemu
a = torch.ones(2048, 2048, device="tpu")
torch.tpu.synchronize()
# Sent while the product emulates (about a second on a 2-core machine).
threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
r = (a @ a)[0, 0].item()
time.sleep(0.3)   # the handler has run, wherever the signal landed
print("result", r, "hits", len(hits))
"""


_CTRL_C_DEFERRED = """
import os, signal, threading, torch, tpuemu
tpuemu.set_mode("defer")
a = torch.ones(4096, 4096, device="tpu")
small = torch.arange(3.0, device="tpu")
tpuemu.sync()
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    b = a @ a                 # recorded; the flush at sync() runs it
    c = b[0, :3] + 1
    d = small * 2
    tpuemu.sync()
    print("not stopped")
except KeyboardInterrupt:
    print("stopped")
for t in (b, c, d):
    try:
        print(t.flatten()[:3].cpu().tolist())
    except RuntimeError as e:
        print("raises:", "not computed" in str(e))
print((small + 1).cpu().tolist())
# Written whole again (by an operator, from the host), they hold values again.
b.zero_()
c.copy_(torch.ones(3))
print(b[0, :2].cpu().tolist(), c.cpu().tolist())
"""


def test_results_a_stopped_flush_did_not_compute_raise_when_read():
    # The flush stopped at the product: its result, what was fused after it, and an
    # unrelated group of the same flush were never computed. They read as zeros before; now
    # each read raises, and new work runs.
    r = _run_as_from_a_terminal(_CTRL_C_DEFERRED)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == [
        "stopped", "raises: True", "raises: True", "raises: True", "[1.0, 2.0, 3.0]",
        "[0.0, 0.0] [1.0, 1.0, 1.0]",
    ], r.stdout


def test_ctrl_c_outside_a_call_is_pythons_and_stops_nothing_later():
    r = _run_as_from_a_terminal(_CTRL_C_IN_PYTHON)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["raised by Python", "[2.0, 2.0, 2.0] 3.0"], r.stdout


def test_ctrl_c_with_the_users_own_handler_runs_it_and_stops_no_launch():
    # A program that handles SIGINT itself decides what Ctrl-C means: the product runs to its
    # end and the handler runs once.
    r = _run_as_from_a_terminal(_OWN_HANDLER)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "result 2048.0 hits 1", r.stdout


def test_ctrl_c_stops_a_long_launch_and_the_device_keeps_working():
    # A 4096-cube product emulates for seconds; Python runs its Ctrl-C handler only between
    # bytecodes, so before the emulator polled for it the product ran to its end. Now the
    # launch stops where it is (the message names the stopped program, which only the
    # emulator's stop writes), KeyboardInterrupt reaches the caller, and the device goes on.
    r = _run_as_from_a_terminal(_CTRL_C)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "stopped: aten::mm: interrupted: program `mm` was stopped (Ctrl-C)" in r.stdout
    assert "still working" in r.stdout


def test_checks_of_a_million_int64_elements_reduce_in_chunks():
    # An int64 product or sum checks its result on the device; a million elements did not fit
    # one row of VMEM ("kernel does not fit"). Now: exact where it fits int32, refused where not.
    x = torch.arange(2**20) % 1000
    got = (x.to("tpu") * 3).sum()
    assert int(got.cpu()) == int((x * 3).sum())
    with pytest.raises(RuntimeError, match="beyond int32"):
        (x.to("tpu") * 3000).sum().cpu()
    with pytest.raises(RuntimeError, match="beyond int32"):
        (x.to("tpu") * 3000000).cpu()


def test_leaky_relu_backward_from_its_result_refuses_a_negative_slope_as_the_cpu():
    # From the result alone a negative slope cannot tell which side an element came from.
    g, y = torch.ones(3), torch.tensor([-1.0, 0.5, 2.0])
    with pytest.raises(RuntimeError, match="In-place leakyReLu backward") as cpu:
        torch.ops.aten.leaky_relu_backward(g, y, -0.1, True)
    with pytest.raises(RuntimeError, match="In-place leakyReLu backward"):
        torch.ops.aten.leaky_relu_backward(g.to("tpu"), y.to("tpu"), -0.1, True)
    assert "out-of-place" in str(cpu.value)
    want = torch.ops.aten.leaky_relu_backward(g, y, 0.1, True)
    assert torch.equal(torch.ops.aten.leaky_relu_backward(g.to("tpu"), y.to("tpu"), 0.1, True).cpu(), want)
