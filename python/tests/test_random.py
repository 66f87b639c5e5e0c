"""Random numbers on the device: the tpu generators are the backend's Threefry streams.

What is checked, each against an independent fact:
- the values: ``torch.rand`` on the tpu is, bit for bit, Threefry-2x32-20 (Random123's
  algorithm, written here in Python and checked against Random123's published known-answer
  vector) of the counters ``offset + i`` under the key ``seed``, its first word's top 24 bits
  scaled to [0, 1) — so seeding, offsets, ``get_rng_state``/``set_rng_state`` and explicit
  generators are checked by where the values come from, not by comparing the device with
  itself;
- the laws: Kolmogorov-Smirnov distances and moments of ``rand``, ``randn``, ``bernoulli``,
  ``exponential_``, ``randint``, ``multinomial``, ``randperm`` and dropout's scale, each within
  bounds derived from the sample size (fixed seeds: nothing flakes);
- the same stream in Strict, Debug, DeferAndFuse and under ``torch.compile`` (a compiled
  function's second call draws what the eager function's second call draws);
- PyTorch's contract: ``torch.manual_seed`` seeds the tpu, ``fork_rng`` restores it, a CPU
  generator given to a tpu operator is refused with PyTorch's message.
Every test runs with the CPU fallback check on: the random operators run on the tpu.
"""

from __future__ import annotations

import math

import pytest
import torch

import tpuemu

M32 = 0xFFFF_FFFF
ROT = (13, 15, 26, 6, 17, 29, 16, 24)


def threefry2x32(key: tuple[int, int], ctr: tuple[int, int]) -> tuple[int, int]:
    """Random123's threefry2x32_R(20, ctr, key)."""
    ks = (key[0], key[1], 0x1BD11BDA ^ key[0] ^ key[1])
    x0, x1 = (ctr[0] + ks[0]) & M32, (ctr[1] + ks[1]) & M32
    for r in range(20):
        x0 = (x0 + x1) & M32
        x1 = ((x1 << ROT[r % 8]) | (x1 >> (32 - ROT[r % 8]))) & M32
        x1 ^= x0
        if r % 4 == 3:
            j = r // 4 + 1
            x0 = (x0 + ks[j % 3]) & M32
            x1 = (x1 + ks[(j + 1) % 3] + j) & M32
    return x0, x1


def reference_rand(seed: int, offset: int, n: int) -> torch.Tensor:
    """float32 uniforms of counters offset .. offset + n under key `seed`."""
    key = (seed & M32, seed >> 32)
    out = []
    for i in range(n):
        c = offset + i
        w0, _ = threefry2x32(key, (c & M32, (c >> 32) & M32))
        out.append((w0 >> 8) * 2.0**-24)
    return torch.tensor(out, dtype=torch.float32)


def state(seed: int, offset: int) -> torch.Tensor:
    return torch.tensor(list(seed.to_bytes(8, "little") + offset.to_bytes(8, "little")), dtype=torch.uint8)


def test_the_reference_is_random123s_threefry():
    # Random123's kat_vectors: threefry2x32 20 rounds.
    assert threefry2x32((0, 0), (0, 0)) == (0x6B200159, 0x99BA4EFE)
    assert threefry2x32((M32, M32), (M32, M32)) == (0x1CB996FC, 0xBB002BE7)
    assert threefry2x32((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3)) == (0xC4923A9C, 0x483DF7A0)


@pytest.mark.parametrize("mode", ["strict", "debug", "defer"])
def test_rand_is_threefry_of_the_seed_and_offset_in_every_mode(mode):
    with tpuemu.mode_guard(mode):
        torch.manual_seed(1234)  # seeds the tpu too
        a = torch.rand(7, device="tpu")
        b = torch.rand(2, 3, device="tpu")
        got = torch.cat([a.cpu(), b.cpu().flatten()])
    assert torch.equal(got, reference_rand(1234, 0, 13))
    # The offset advanced by the elements drawn; the state says so.
    assert torch.equal(torch.tpu.get_rng_state(), state(1234, 13))
    assert torch.tpu.initial_seed() == 1234


def test_get_and_set_rng_state_move_the_stream():
    torch.tpu.set_rng_state(state(2**40 + 5, 2**33))
    got = torch.rand(4, device="tpu").cpu()
    # A 64-bit seed and a counter past 2^32: the carry reaches the high word.
    assert torch.equal(got, reference_rand(2**40 + 5, 2**33, 4))
    s = torch.tpu.get_rng_state()
    x = torch.rand(5, device="tpu").cpu()
    torch.tpu.set_rng_state(s)
    assert torch.equal(torch.rand(5, device="tpu").cpu(), x)
    before = torch.tpu.get_rng_state()
    with torch.random.fork_rng(device_type="tpu"):
        torch.rand(100, device="tpu")
    assert torch.equal(torch.tpu.get_rng_state(), before)
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.tpu.set_rng_state(torch.zeros(5, dtype=torch.uint8))


def test_an_explicit_generator_is_a_stream_of_its_own():
    torch.manual_seed(0)
    g = torch.Generator(device="tpu")
    assert g.device.type == "tpu" and g.initial_seed() == 67280421310721
    g.manual_seed(77)
    a = torch.rand(6, device="tpu", generator=g)
    b = torch.empty(3, device="tpu").uniform_(generator=g)
    assert torch.equal(torch.cat([a.cpu(), b.cpu()]), reference_rand(77, 0, 9))
    assert torch.equal(g.get_state(), state(77, 9))
    # The default stream is untouched by it.
    assert torch.equal(torch.tpu.get_rng_state(), state(0, 0))
    g2 = torch.Generator(device="tpu")
    g2.set_state(g.get_state())
    assert torch.equal(torch.rand(3, device="tpu", generator=g2).cpu(), reference_rand(77, 9, 3))
    with pytest.raises(RuntimeError, match="Expected a 'tpu' device type for generator but found 'cpu'"):
        torch.rand(3, device="tpu", generator=torch.Generator())


def _ks(x: torch.Tensor, cdf) -> float:
    """The Kolmogorov-Smirnov distance of the sample `x` from `cdf`."""
    x = x.double().sort().values
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float(torch.maximum(i / n - f, f - (i - 1) / n).max())


N = 1 << 14
# The 0.1% critical value of the KS distance for n samples: 1.95 / sqrt(n).
KS_BOUND = 1.95 / math.sqrt(N)


def test_distributions_follow_their_laws():
    torch.manual_seed(5)
    u = torch.rand(N, device="tpu").cpu()
    assert _ks(u, lambda v: v.clamp(0, 1)) < KS_BOUND
    z = torch.randn(N, device="tpu").cpu()
    assert _ks(z, lambda v: 0.5 * torch.erfc(-v / math.sqrt(2))) < KS_BOUND
    e = torch.empty(N, device="tpu").exponential_(2.0).cpu()
    assert _ks(e, lambda v: 1 - torch.exp(-2 * v)) < KS_BOUND
    b = torch.bernoulli(torch.full((N,), 0.3, device="tpu")).cpu()
    assert abs(float(b.mean()) - 0.3) < 5 * math.sqrt(0.3 * 0.7 / N)
    r = torch.randint(3, 9, (N,), device="tpu").cpu()
    assert r.dtype == torch.int64 and int(r.min()) == 3 and int(r.max()) == 8
    counts = torch.bincount(r - 3, minlength=6).double()
    assert float((counts - N / 6).abs().max()) < 5 * math.sqrt(N / 6 * 5 / 6)


def test_multinomial_and_randperm():
    torch.manual_seed(6)
    p = torch.tensor([0.1, 0.0, 0.6, 0.3], device="tpu")
    s = torch.multinomial(p, N, replacement=True).cpu()
    counts = torch.bincount(s, minlength=4).double()
    assert counts[1] == 0
    for k, q in enumerate([0.1, 0.0, 0.6, 0.3]):
        assert abs(float(counts[k]) - N * q) <= 5 * math.sqrt(N * q * (1 - q)) + 0.5
    rows = torch.multinomial(torch.ones(64, 5, device="tpu"), 5).cpu()
    assert torch.equal(rows.sort(dim=1).values, torch.arange(5).expand(64, 5))
    perm = torch.randperm(1000, device="tpu").cpu()
    assert perm.dtype == torch.int64 and torch.equal(perm.sort().values, torch.arange(1000))
    assert not torch.equal(perm, torch.arange(1000))
    with pytest.raises(RuntimeError, match="sum of probabilities <= 0"):
        torch.multinomial(torch.zeros(3, device="tpu"), 1, replacement=True)
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(p, 5)


def _dropout_twice(f):
    x = torch.ones(4096, device="tpu", requires_grad=True)
    return [f(x) for _ in range(2)]


def test_dropout_draws_the_same_stream_eagerly_and_compiled():
    f = lambda x: torch.nn.functional.dropout(x, 0.25, training=True) * 2  # noqa: E731
    torch.manual_seed(8)
    eager = [y.detach().cpu() for y in _dropout_twice(f)]
    torch.manual_seed(8)
    compiled = [y.detach().cpu() for y in _dropout_twice(torch.compile(f, backend="tpu"))]
    assert tpuemu._compile.compiled_graphs()[-1][1] == "compiled"
    # Kept elements scaled by 1 / (1 - p), about a quarter dropped; two calls, two masks.
    for y in eager:
        assert set(y.unique().tolist()) <= {0.0, float(torch.tensor(2 / 0.75, dtype=torch.float32))}
        assert abs(float((y == 0).double().mean()) - 0.25) < 5 * math.sqrt(0.25 * 0.75 / 4096)
    assert not torch.equal(eager[0], eager[1])
    assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[1], eager[1])


@pytest.mark.cpu_fallback("aten::poisson", reason="poisson is not on the device yet")
def test_a_random_operator_on_the_host_is_reproducible_and_moves_the_stream():
    torch.manual_seed(9)
    rates = torch.full((64,), 4.0, device="tpu")
    a = torch.poisson(rates).cpu()
    after = torch.tpu.get_rng_state()
    torch.manual_seed(9)
    assert torch.equal(torch.poisson(rates).cpu(), a)
    # The host draw took one counter of the tpu stream: the next device draw starts after it.
    assert torch.equal(after, state(9, 1))
    assert torch.equal(torch.rand(2, device="tpu").cpu(), reference_rand(9, 1, 2))


@pytest.mark.parametrize("mode", ["strict", "debug", "defer"])
def test_rrelu_draws_its_slopes_from_the_stream_as_the_cpu_applies_them(mode):
    # Training: an element <= 0 (-0.0 too) takes the slope lower + u (upper - lower), u the
    # stream's float32 uniform at its index (computed here from Threefry itself), rounded
    # once with the product; others (NaN too) pass unchanged with a noise of 1; in place and
    # functional; bfloat16 rounds the product once. Evaluation is leaky_relu with the mean
    # slope, as the CPU's; the gradient is the noise. noise of another shape raises as the CPU.
    x = torch.randn(3, 50, generator=torch.Generator().manual_seed(6))
    x[0, :3] = torch.tensor([0.0, float("nan"), -0.0])
    lo, hi = 0.1, 0.3
    u = reference_rand(77, 0, x.numel()).reshape(x.shape)
    slope = u * torch.tensor(hi - lo) + torch.tensor(lo)
    neg = x <= 0
    want = torch.where(neg, x * slope, x)
    with tpuemu.mode_guard(mode):
        torch.manual_seed(77)
        xd = x.to("tpu").requires_grad_()
        got = torch.nn.functional.rrelu(xd, lo, hi, training=True)
        assert torch.equal(got.detach().cpu().nan_to_num(5.0), want.nan_to_num(5.0))
        got.backward(torch.full_like(got, 2.0))
        assert torch.equal(xd.grad.cpu(), torch.where(neg, 2 * slope, torch.tensor(2.0)))
        torch.manual_seed(77)
        noise = torch.zeros(3, 50, device="tpu")
        out = torch.ops.aten.rrelu_with_noise(x.to("tpu"), noise, lo, hi, True)
        assert torch.equal(noise.cpu(), torch.where(neg, slope, torch.tensor(1.0)))
        torch.manual_seed(77)
        z = x.to("tpu")
        torch.nn.functional.rrelu(z, lo, hi, training=True, inplace=True)
        assert torch.equal(z.cpu().nan_to_num(5.0), out.cpu().nan_to_num(5.0))
        torch.manual_seed(77)
        b = torch.nn.functional.rrelu(x.to("tpu").bfloat16(), lo, hi, training=True).cpu()
        assert torch.equal(b.nan_to_num(5.0), torch.where(neg, x.bfloat16().float() * slope, x.bfloat16().float())
                           .bfloat16().nan_to_num(5.0))
        for a, c in ((x, 0.2), (x, 0.5)):
            e = torch.nn.functional.rrelu(a.to("tpu"), c, c + 0.1).cpu()
            assert torch.equal(e.nan_to_num(5.0), torch.nn.functional.rrelu(a, c, c + 0.1).nan_to_num(5.0))
        with pytest.raises(RuntimeError, match="noise tensor shape must match"):
            torch.ops.aten.rrelu_with_noise(x.to("tpu"), torch.zeros(3, device="tpu"), lo, hi, True)
        with pytest.raises(RuntimeError, match="expected scalar type Float but found BFloat16"):
            torch.ops.aten.rrelu_with_noise(x.to("tpu"), noise.bfloat16(), lo, hi, True)
        with pytest.raises(RuntimeError, match="from <= to"):
            torch.ops.aten.rrelu_with_noise(x.to("tpu"), noise, hi, lo, True)
        # The functional form aliases no input, in evaluation too.
        kept = torch.ops.aten.rrelu_with_noise_functional(x.to("tpu"), noise, lo, hi, False)[1]
        assert kept.data_ptr() != noise.data_ptr() and torch.equal(kept.cpu(), noise.cpu())
