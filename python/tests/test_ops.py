"""Operators reach the Rust backend by overload name and compute what the CPU computes."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

import tpuemu
from conftest import assert_same, tpu

CASES = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=0.5),
    "sub_mul_div": lambda a, b: (a - b) * b / (b.abs() + 1),
    "pow": lambda a, b: a.abs().pow(1.5) + a.pow(2),
    "unary": lambda a, b: a.exp() + a.tanh() + a.sigmoid() + a.sin() + a.cos() + a.neg() + a.relu(),
    "log_sqrt_rsqrt": lambda a, b: (a.abs() + 1).log() + (a.abs() + 1).sqrt() + (a.abs() + 1).rsqrt(),
    "compare_where": lambda a, b: torch.where(a > b, a, b) + (a == a).float() + (a <= 0).float(),
    "reductions": lambda a, b: (a.sum(), a.mean(1), a.amax(0), a.sum(1, keepdim=True), a.var(1), a.std()),
    "max_min_dim": lambda a, b: (a.max(1), a.min(0), a.argmax(1), a.argmin(0)),
    "matmul": lambda a, b: (a @ b.t(), torch.addmm(a[:, 0], a, b.t()), a.t().mm(b)),
    "bmm": lambda a, b: torch.bmm(a.reshape(4, 2, 6), b.reshape(4, 6, 2)),
    "softmax": lambda a, b: (a.softmax(-1), a.log_softmax(0)),
    "layer_norm": lambda a, b: F.layer_norm(a, (12,), b[0], b[1]),
    "gelu_silu": lambda a, b: (F.gelu(a), F.gelu(a, approximate="tanh"), F.silu(a)),
    "cat_stack": lambda a, b: (torch.cat([a, b], 0), torch.stack([a, b], 1)),
    "layout": lambda a, b: (a.t().contiguous(), a.reshape(3, 4, 4).permute(2, 0, 1).contiguous(), a.flip(0)),
    "tril_triu": lambda a, b: (a.tril(), a.triu(1)),
    "clamp": lambda a, b: a.clamp(-0.5, 0.5),
    "embedding": lambda a, b: F.embedding(torch.tensor([[0, 3], [2, 2]], device=a.device), a),
    "gather_index_select": lambda a, b: (a.gather(1, torch.tensor([[0, 1]] * 4, device=a.device)),
                                         a.index_select(0, torch.tensor([3, 0], device=a.device))),
    "cross_entropy": lambda a, b: F.cross_entropy(a, torch.tensor([1, 0, 11, 5], device=a.device)),
    "masked_fill": lambda a, b: a.masked_fill(a > 0, -1.0),
    "split": lambda a, b: [t.contiguous() for t in a.split(5, 1)],
    "pad": lambda a, b: F.pad(a, (1, 2)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_matches_cpu(name, mode):
    torch.manual_seed(0)
    a, b = torch.randn(4, 12), torch.randn(4, 12)
    f = CASES[name]
    assert_same(f(*tpu((a, b))), f(a, b), rtol=1e-5, atol=1e-5)


STRIDED = {
    "unary_t": lambda a, b: a.t().sin(),
    "binary_t_first": lambda a, b: a.t() + b.reshape(12, 4),
    "binary_t_second": lambda a, b: b.reshape(12, 4) + a.t(),
    "broadcast_row": lambda a, b: a.t() * b[0, :4],
    "permuted": lambda a, b: a.reshape(2, 2, 12).permute(2, 0, 1).exp(),
    "chain": lambda a, b: (a.t() * 2 + 1).tanh().sigmoid(),
    "where": lambda a, b: torch.where(a.t() > 0, a.t(), b.t()),
}


@pytest.mark.parametrize("name", sorted(STRIDED))
def test_elementwise_outputs_have_the_cpu_strides(name, mode):
    """PyTorch lays out `x.t() + 1` as transposed as `x.t()`; the tpu's outputs must too."""
    torch.manual_seed(0)
    a, b = torch.randn(4, 12), torch.randn(4, 12)
    f = STRIDED[name]
    want = f(a, b)
    got = f(*tpu((a, b)))
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    assert_same(got, want, rtol=1e-5, atol=1e-5)
    assert_same(got.reshape(-1), want.reshape(-1), rtol=1e-5, atol=1e-5)


def test_in_place_and_out_forms(mode):
    a, b = torch.randn(3, 5), torch.randn(3, 5)
    ta, tb = tpu((a, b))
    for x, y in [(a, b), (ta, tb)]:
        x.mul_(y).add_(y, alpha=2).div_(3).exp_()
        x.sub_(0.5).clamp_(max=1.5)
    assert_same(ta, a, rtol=1e-5)
    out = torch.empty(3, 5, device="tpu")
    torch.mul(ta, tb, out=out)
    assert_same(out, a * b, rtol=1e-5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.ones(2, dtype=torch.int64, device="tpu").add_(torch.ones(2, device="tpu") * 0.5)


OUT_FORMS = {
    # scatter.src_out runs scatter.src (it was once matched to scatter.reduce, whose reduce
    # it lacks, and failed).
    "scatter_src_out": lambda x, o: torch.scatter(
        x, 0, torch.tensor([[0, 1, 2, 0]], device=x.device), x * 2 + 1, out=o),
    # Factories: the out tensor's dtype is the one created in.
    "zeros_out_int": lambda x, o: torch.zeros(2, 3, out=o.int()),
    "full_out": lambda x, o: torch.full((3, 4), 2.5, out=o),
    "arange_out": lambda x, o: torch.arange(1, 9, 2, out=o[0]),
    # A Tensor[] out list, element by element.
    "split_copy_out": lambda x, o: torch.split_copy(x, 2, 0, out=[o[:2].clone(), o[2:].clone()]),
}


@pytest.mark.parametrize("name", sorted(OUT_FORMS))
def test_out_forms_derived_by_the_backend_run_without_the_cpu(name, mode):
    """Each out= form here is one of the backend's derived forms (its table, exported to the
    bridge, says which functional overload runs and where its arguments come from)."""
    x, o = torch.randn(3, 4), torch.empty(3, 4)
    tpuemu.set_cpu_fallback(False)
    try:
        got = OUT_FORMS[name](*tpu((x, o)))
    finally:
        tpuemu.set_cpu_fallback(True)
    assert_same(got, OUT_FORMS[name](x, o), exact=True)


def test_bf16_and_f16_compute_as_the_cpu(mode):
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    for dt in [torch.bfloat16, torch.float16]:
        x, y = a.to(dt), b.to(dt)
        f = lambda p, q: ((p * q + p).exp() - q).softmax(-1)  # noqa: E731
        assert_same(f(*tpu((x, y))), f(x, y), exact=True)


def test_integer_and_bool_ops(mode):
    a = torch.tensor([[5, -3, 7], [0, 2, -8]])
    t = tpu(a)
    assert_same(t + t * 3, a + a * 3, exact=True)
    assert_same(t // 2, a // 2, exact=True)
    assert_same(t % 3, a % 3, exact=True)
    assert_same((t > 0) & (t < 6), (a > 0) & (a < 6), exact=True)
    assert_same(t.sum(1), a.sum(1), exact=True)


def test_integer_products_take_alpha_and_beta_as_integers(mode):
    """PyTorch's kernels make alpha and beta integers for an integer product (0.6 is 0; found
    by the op_db run: addmv, addbmm and baddbmm of int64 returned alpha applied as a float)."""
    g = torch.Generator().manual_seed(0)
    s2, m, v = (torch.randint(-9, 9, shape, generator=g) for shape in [(5,), (5, 10), (10,)])
    b1, b2, s3 = (torch.randint(-9, 9, shape, generator=g) for shape in [(3, 5, 4), (3, 4, 6), (3, 5, 6)])
    s1 = torch.randint(-9, 9, (5, 6), generator=g)
    for beta, alpha in [(0.2, 0.6), (1.9, 2.7), (-1.5, 3)]:
        kw = dict(beta=beta, alpha=alpha)
        assert_same(torch.addmv(*tpu((s2, m, v)), **kw), torch.addmv(s2, m, v, **kw), exact=True)
        assert_same(torch.addbmm(*tpu((s1, b1, b2)), **kw), torch.addbmm(s1, b1, b2, **kw), exact=True)
        assert_same(torch.baddbmm(*tpu((s3, b1, b2)), **kw), torch.baddbmm(s3, b1, b2, **kw), exact=True)
        assert_same(torch.addmm(*tpu((s1, b1[0], b2[0])), **kw), torch.addmm(s1, b1[0], b2[0], **kw), exact=True)


def test_addr_takes_alpha_and_beta_in_bfloat16():
    """addr computes in its dtype, alpha and beta rounded to it (0.2 is 0.2002 in bfloat16)."""
    g = torch.Generator().manual_seed(1)
    s, a, b = (torch.randn(shape, generator=g).to(torch.bfloat16) * 4 for shape in [(7, 9), (7,), (9,)])
    want = torch.addr(s, a, b, beta=0.2, alpha=0.6)
    assert_same(torch.addr(*tpu((s, a, b)), beta=0.2, alpha=0.6), want, exact=True)


def test_scatter_takes_int32_indices(mode):
    """PyTorch accepts int32 indices in every scatter form (the op_db run found them refused)."""
    x, src = torch.zeros(4, 3), torch.arange(6.0).reshape(2, 3)
    i = torch.tensor([[0, 1, 2], [3, 2, 1]], dtype=torch.int32)
    t = tpu((x, i, src))
    assert_same(t[0].scatter(0, t[1], t[2]), x.scatter(0, i, src), exact=True)
    assert_same(t[0].scatter_add(0, t[1], t[2]), x.scatter_add(0, i, src), exact=True)
    assert_same(t[0].scatter_reduce(0, t[1], t[2], "amax"), x.scatter_reduce(0, i, src, "amax"), exact=True)
    assert_same(t[0].scatter(0, t[1], 2.5), x.scatter(0, i, 2.5), exact=True)


def test_integer_and_bfloat16_spaces_take_their_ends_as_the_cpu(mode):
    """linspace/logspace take their ends in the result's dtype (4.3 is 4 for int64, 4.3125 for
    bfloat16), an integer step as a double, and one step is `start` as given."""
    cases = [
        lambda dev: torch.linspace(4.3, -3, 50, dtype=torch.int64, device=dev),
        lambda dev: torch.linspace(torch.tensor(4.3, device=dev), torch.tensor(-3, device=dev), 50, dtype=torch.int64),
        lambda dev: torch.linspace(-2.0, -3, 1, dtype=torch.int64, device=dev),
        lambda dev: torch.logspace(0, 1.2, 2, dtype=torch.int64, device=dev),
        lambda dev: torch.logspace(0, -3, 1, dtype=torch.int64, device=dev),
        lambda dev: torch.logspace(4.3, -3, 2, dtype=torch.bfloat16, device=dev),
        lambda dev: torch.logspace(4.3, -3, 1, dtype=torch.bfloat16, device=dev),
    ]
    for f in cases:
        assert_same(f("tpu"), f("cpu"), exact=True)


def test_a_number_to_a_tensors_powers(mode):
    """`torch.pow(2, x)` and `2 ** x` (`aten::pow.Scalar`) were missing (found by the op_db
    run's gradients of logaddexp2): in the promoted dtype, as the CPU."""
    x = torch.tensor([[-1.5, 0.0, 2.0], [3.0, 0.5, -4.0]])
    i = torch.tensor([[0, 1, 2], [5, -1, 3]])
    for base, e in [(2, x), (2.5, x), (2, i), (3, i), (-2, i), (1.5, i), (True, i)]:
        assert_same(torch.pow(base, tpu(e)), torch.pow(base, e))
    assert_same(2 ** tpu(x), 2 ** x)


def test_operators_arrive_by_overload_name():
    tpuemu.reset_metrics()
    a = torch.randn(4, 4).to("tpu")
    b = torch.addmm(a[0], a, a)
    (b + a).relu_()
    by = tpuemu.metrics()["ops_by_name"]
    assert by.get("aten::addmm", 0) >= 1
    assert by.get("aten::add.Tensor", 0) >= 1
    assert by.get("aten::relu", 0) >= 1  # relu_ runs as relu plus a copy into its input


def test_matmul_default_precision_is_one_bf16_pass():
    a = torch.randn(64, 64)
    b = torch.randn(64, 64)
    ta, tb = tpu((a, b))
    tpuemu.set_matmul_precision("default")
    try:
        got = (ta @ tb).cpu()
    finally:
        tpuemu.set_matmul_precision("highest")
    want = a.bfloat16().float() @ b.bfloat16().float()  # bf16 inputs, f32 accumulation
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert (got - a @ b).abs().max() > 1e-3  # and not full float32
    torch.testing.assert_close((ta @ tb).cpu(), a @ b, rtol=1e-5, atol=1e-4)


def test_errors_name_the_operator_and_the_device_keeps_working(mode):
    a = torch.ones(2, 3, device="tpu")
    with pytest.raises(RuntimeError, match="mm"):
        torch.mm(a, a)
    with pytest.raises(IndexError):
        a.sum(dim=5)
    assert a.sum().item() == 6.0
    table = torch.ones(3, 2, device="tpu")
    with pytest.raises(IndexError, match="embedding: index out of range in self"):
        # An index past the table is checked on the device; raised as on the CPU at the read.
        F.embedding(torch.tensor([7], device="tpu"), table).cpu()
    assert (table * 2).sum().item() == 12.0


def test_histc_counts_integer_inputs_as_their_float_values():
    # PyTorch's CPU kernel refuses integers (its CUDA kernel takes them); Hugging Face's
    # mixture-of-experts layers call histc on int32 expert ids on a "tpu" device.
    ids = torch.tensor([0, 3, 1, 1, 7, 3, 3, 2], dtype=torch.int32)
    got = torch.histc(ids.to("tpu"), bins=8, min=0, max=7).cpu()
    assert got.dtype == torch.int32
    assert got.tolist() == torch.histc(ids.float(), bins=8, min=0, max=7).int().tolist()


def _both(f, *args, **kwargs):
    """f on the CPU and on the tpu (every tensor argument moved), or the error each raised."""
    out = []
    for move in (lambda v: v, tpu):
        try:
            out.append(f(*move(list(args)), **{k: move(v) for k, v in kwargs.items()}))
        except RuntimeError as e:
            out.append(e)
    return out


def test_histograms_place_edges_nan_and_outliers_as_the_cpu(mode):
    # A value on an edge goes to the bin it opens, the last edge closes the last bin; NaN and
    # values outside the edges count nowhere; unsorted edges, weights, density: torch.histogram
    # with given edges and torch.histogramdd (bin counts, given edges) against the CPU.
    x = torch.tensor([0.0, 1.0, 1.0, 2.5, 3.0, float("nan"), -1.0, 4.0])
    w = torch.arange(8.0)
    for edges, kw in ((torch.tensor([0.0, 1.0, 3.0]), {}),
                      (torch.tensor([0.0, 1.0, 3.0]), {"weight": w, "density": True}),
                      (torch.tensor([1.0, 1.0, 4.0]), {"weight": w}),
                      (torch.tensor([3.0, 1.0, 2.0]), {})):  # nothing lies in [3, 2]
        want, got = _both(torch.histogram, x, edges, **kw)
        assert_same(list(got), list(want))
    pts = torch.tensor([[0.0, 1.0], [2.0, 3.0], [1.0, 1.0], [5.0, 0.5], [float("nan"), 1.0], [2.0, 0.0]])
    for bins, kw in (([2, 3], {"range": [0.0, 2.0, 0.0, 3.0]}),
                     ([2, 3], {"range": [0.0, 2.0, 0.0, 3.0], "weight": torch.arange(6.0), "density": True}),
                     ([torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 2.0, 4.0])], {"density": True}),
                     ([3, 1], {})):
        data = pts[:4] if not kw else pts  # without a range NaN makes the data's range NaN
        want, got = _both(torch.histogramdd, data, bins, **kw)
        assert_same(list(got.bin_edges), list(want.bin_edges))
        assert_same(got.hist, want.hist)
    # Where the CPU raises, the tpu raises (edges of another dtype or shape, too few, a range
    # of the wrong length or reversed, a weight of another shape).
    for f, args, kw in ((torch.histogram, (x, torch.tensor([[0.0, 1.0]])), {}),
                        (torch.histogram, (x, torch.tensor([1.0])), {}),
                        (torch.histogram, (x, 2), {"range": (1.0, 0.0)}),
                        (torch.histogram, (x, torch.tensor([0.0, 1.0])), {"weight": w[:3]}),
                        (torch.histogramdd, (pts[:4], [2, 3]), {"range": [0.0, 1.0]}),
                        (torch.histogramdd, (pts[:4], [2]), {})):
        want, got = _both(f, *args, **kw)
        assert isinstance(want, RuntimeError), want
        assert isinstance(got, RuntimeError) and str(want) in str(got), (str(got), str(want))


def test_embedding_max_norm_renormalises_the_rows_named_as_the_cpu(mode):
    # F.embedding(max_norm=) renormalises, in place, the weight rows its indices name (twice,
    # or counted from the end) whose norm is above max_norm; bfloat16 bit for bit (PyTorch's
    # kernel takes the scale in the weight's dtype); an index outside is PyTorch's IndexError.
    w = torch.randn(6, 4, generator=torch.Generator().manual_seed(0)) * 3
    idx = torch.tensor([[0, 2, 2], [5, 1, 0]])
    for dtype, exact in ((torch.float32, False), (torch.bfloat16, True)):
        for p in (2.0, 1.0, 3.5):
            wc = w.to(dtype)
            wd = tpu(wc.clone())
            want = F.embedding(idx, wc, max_norm=1.5, norm_type=p)
            got = F.embedding(tpu(idx), wd, max_norm=1.5, norm_type=p)
            assert_same(got, want, exact=exact)
            assert_same(wd, wc, exact=exact)
    want, got = _both(torch.embedding_renorm_, w.clone(), torch.tensor([-1, 3]), 1.0, 2.0)
    assert_same(got, want)
    with pytest.raises(IndexError, match="index -7 out of range for tensor of size"):
        torch.embedding_renorm_(tpu(w.clone()), tpu(torch.tensor([1, -7])), 1.0, 2.0).cpu()


def test_multilabel_margin_loss_reads_labels_up_to_the_first_minus_one_as_the_cpu(mode):
    # F.multilabel_margin_loss: the labels before a row's first -1 are its targets (a repeated
    # label counts again), every reduction and its gradient, a vector alone; a label outside
    # -1..C (also after the first -1) is PyTorch's "target is out of range" at the read.
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([[3, 0, -1, 1, 4], [0, 0, 4, 1, 2], [-1, 2, 0, 0, 1], [4, 4, -1, -1, -1]])
    for red in ("none", "mean", "sum"):
        xc, xd = x.clone().requires_grad_(), tpu(x).requires_grad_()
        want = F.multilabel_margin_loss(xc, y, reduction=red)
        got = F.multilabel_margin_loss(xd, tpu(y), reduction=red)
        assert_same(got, want)
        want.sum().backward()
        got.sum().backward()
        assert_same(xd.grad, xc.grad)
    want, got = _both(F.multilabel_margin_loss, x[1], y[3])
    assert_same(got, want)
    # An inactive pair's margin may be infinite or NaN: it adds nothing (not 0 times it).
    xi = torch.tensor([[0.0, float("-inf"), 1.0], [float("nan"), 0.5, 2.0]])
    want, got = _both(F.multilabel_margin_loss, xi, torch.tensor([[0, -1, 1], [2, -1, 0]]),
                      reduction="none")
    assert_same(got, want)
    for bad in (torch.tensor([0, -1, 5, 1, 2]), torch.tensor([-2, 0, 1, 2, 3])):
        with pytest.raises(RuntimeError, match="argument #2 'target' is out of range"):
            F.multilabel_margin_loss(tpu(x[0]), tpu(bad)).cpu()


def test_unique_along_a_dim_sorts_slices_lexicographically_as_the_cpu(mode):
    # torch.unique(dim=): the distinct rows (columns, middle slices) in lexicographic order, the
    # inverse and the counts; NaN after every number and equal to no other (1-d, as the CPU);
    # a 0-dim tensor, another dim of size 0 and a dim out of range raise as the CPU.
    g = torch.Generator().manual_seed(2)
    cases = [torch.tensor([[1, 2], [0, 5], [1, 2], [0, 1]]), torch.randint(0, 2, (5, 3, 4), generator=g),
             torch.tensor([3.0, float("nan"), float("nan"), 1.0]), torch.tensor([True, False, True]),
             torch.randint(-1, 1, (6, 2), generator=g).to(torch.bfloat16)]
    for x in cases:
        for d in range(x.dim()):
            want, got = _both(torch.unique, x, dim=d, return_inverse=True, return_counts=True)
            assert_same(got[0].nan_to_num(9.0), want[0].nan_to_num(9.0), exact=True)
            assert_same(list(got[1:]), list(want[1:]), exact=True)
    for bad, d, err in ((torch.tensor(3.0), 0, IndexError), (torch.zeros(3, 0), 0, RuntimeError),
                        (torch.zeros(0, 0), 0, RuntimeError), (torch.zeros(2, 2), 2, IndexError)):
        with pytest.raises(err):
            torch.unique(bad, dim=d)
        with pytest.raises(err):
            torch.unique(tpu(bad), dim=d)


def test_segment_reduce_and_its_gradient_as_the_cpu(mode):
    # torch.segment_reduce: lengths (an empty segment, rows along axis 1) and offsets (elements
    # outside every segment left out), initial taking part as one more element, every reduction
    # and its gradient (a negative gradient goes whole to every tie of a max, as on the CPU);
    # lengths that are negative or do not cover the data raise at the read, as the CPU raises.
    x = torch.tensor([1.0, 3.0, 3.0, 0.0, 2.0, 0.0, 0.0, 0.5])
    lengths = torch.tensor([3, 2, 2, 0, 1])
    g = torch.tensor([-2.0, 1.5, 3.0, 1.0, -1.0])
    for red in ("sum", "mean", "max", "min", "prod"):
        for initial in (None, 2.0):
            xc, xd = x.clone().requires_grad_(), tpu(x).requires_grad_()
            want = torch.segment_reduce(xc, red, lengths=lengths, initial=initial)
            got = torch.segment_reduce(xd, red, lengths=tpu(lengths), initial=initial)
            assert got.device.type == "tpu"
            torch.testing.assert_close(got.cpu(), want, equal_nan=True)  # an empty mean is NaN
            want.backward(g)
            got.backward(tpu(g))
            assert_same(xd.grad, xc.grad)
    x2 = torch.arange(10.0).reshape(2, 5)
    offsets = torch.tensor([[1, 2, 2, 4], [0, 1, 2, 5]])
    want, got = _both(torch.segment_reduce, x2, "mean", offsets=offsets, axis=1)
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    for bad, unsafe, match in ((torch.tensor([2, 2]), False, "sum to data.size"),
                               (torch.tensor([2, -1, 4]), False, "lengths contains negative value"),
                               (torch.tensor([3, -2, 2]), True, "segment_length >= 0")):
        with pytest.raises(RuntimeError, match=match):
            torch.segment_reduce(tpu(x[:5]), "sum", lengths=tpu(bad), unsafe=unsafe).cpu()
    # prod's gradient at a zero or NaN is the product of the others (NaN beside another NaN).
    xn = torch.tensor([float("nan"), 0.0, 0.0, float("nan"), 5.0, float("nan"), 2.0])
    xc, xd = xn.clone().requires_grad_(), tpu(xn).requires_grad_()
    ln = torch.tensor([2, 3, 2])
    torch.segment_reduce(xc, "prod", lengths=ln).sum().backward()
    torch.segment_reduce(xd, "prod", lengths=tpu(ln)).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, equal_nan=True)


@pytest.mark.parametrize("interp", ["bilinear", "bicubic"])
def test_antialiased_interpolation_and_its_gradient_as_the_cpu(mode, interp):
    # F.interpolate(antialias=True): shrinking (windows wider than the taps), growing, a dim
    # left as it is, align_corners, a scale factor; values and gradients against the CPU.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 10, 12, generator=g)
    for kw in ({"size": (3, 5)}, {"size": (17, 12), "align_corners": True},
               {"scale_factor": (0.45, 2.5)}):
        xc, xd = x.clone().requires_grad_(), tpu(x).requires_grad_()
        want = F.interpolate(xc, mode=interp, antialias=True, **kw)
        got = F.interpolate(xd, mode=interp, antialias=True, **kw)
        assert_same(got, want, atol=1e-5, rtol=1e-5)
        cot = torch.randn(want.shape, generator=g)
        want.backward(cot)
        got.backward(tpu(cot))
        assert_same(xd.grad, xc.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("interp", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_in_3d_as_the_cpu(mode, interp):
    # F.grid_sample on 5-d inputs (aten::grid_sampler_3d): trilinear, nearest and tricubic
    # (64 taps), every padding mode, with and without align_corners, points inside and outside.
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 4, 5, 6, generator=g)
    grid = torch.rand(2, 3, 4, 2, 3, generator=g) * 2.4 - 1.2
    for pad in ("zeros", "border", "reflection"):
        for align in (False, True):
            want, got = _both(F.grid_sample, x, grid, mode=interp, padding_mode=pad,
                              align_corners=align)
            assert_same(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_with_update_writes_its_running_statistics_as_the_cpu(mode, affine):
    # aten::_batch_norm_with_update (what torch.export and compile's pre-dispatch tracing record
    # for BatchNorm training) writes the running statistics in place; batch_norm_backward takes
    # its empty uint8 `reserve` back.
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5)
    w, b = (torch.randn(3), torch.randn(3)) if affine else (None, None)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    args = [x, w, b, rm.clone(), rv.clone()]
    dargs = [tpu(a.clone()) if a is not None else None for a in args]
    xs = (args[0].requires_grad_(), dargs[0].requires_grad_())
    want = torch.ops.aten._batch_norm_with_update(*args, 0.1, 1e-5)
    got = torch.ops.aten._batch_norm_with_update(*dargs, 0.1, 1e-5)
    assert_same(list(got), list(want), rtol=1e-4, atol=1e-5)
    assert_same(dargs[3], args[3], rtol=1e-5, atol=1e-6)
    assert_same(dargs[4], args[4], rtol=1e-5, atol=1e-6)
    if not affine:
        return  # PyTorch's batch_norm_backward itself refuses an undefined weight
    g = torch.linspace(-1, 1, x.numel()).reshape(x.shape)
    (gx,) = torch.autograd.grad(want[0], xs[0], g)
    (gxd,) = torch.autograd.grad(got[0], xs[1], tpu(g))
    assert_same(gxd, gx, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_training_updates_its_running_statistics_as_the_cpu(mode, affine):
    # nn.BatchNorm2d in eager training (native_batch_norm and its backward here): two steps,
    # outputs, gradients and running statistics against the CPU.
    torch.manual_seed(0)
    cpu = torch.nn.BatchNorm2d(3, affine=affine, momentum=0.2)
    dev = torch.nn.BatchNorm2d(3, affine=affine, momentum=0.2).to("tpu")
    dev.load_state_dict(cpu.state_dict())
    for step in range(2):
        x = torch.randn(4, 3, 5, 5)
        xd = x.to("tpu").requires_grad_()
        x.requires_grad_()
        y, yd = cpu(x), dev(xd)
        assert_same(yd, y, rtol=1e-4, atol=1e-5)
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
        (yd * torch.linspace(-1, 1, y.numel()).reshape(y.shape).to("tpu")).sum().backward()
        assert_same(xd.grad, x.grad, rtol=1e-4, atol=1e-5)
        assert_same(dev.running_mean, cpu.running_mean, rtol=1e-5, atol=1e-6)
        assert_same(dev.running_var, cpu.running_var, rtol=1e-5, atol=1e-6)
        assert int(dev.num_batches_tracked) == step + 1
    if affine:
        assert_same(dev.weight.grad, cpu.weight.grad, rtol=1e-4, atol=1e-4)
        assert_same(dev.bias.grad, cpu.bias.grad, rtol=1e-4, atol=1e-4)


def test_embedding_bag_as_the_cpu(mode):
    # F.embedding_bag / torch's _embedding_bag: each mode with an empty bag, padding_idx,
    # per_sample_weights, include_last_offset, 2-D input, int32 indices, max's ties and NaN;
    # every output (offset2bag, bag_size and max_indices follow the CPU's quirks) against the
    # CPU; bad indices and offsets raise at the read, as the CPU raises.
    g = torch.Generator().manual_seed(5)
    w = torch.randn(10, 3, generator=g)
    i = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    o = torch.tensor([0, 4, 4, 6])
    for m in (0, 1, 2):
        for pad in (-1, 4):
            for dt in (torch.int64, torch.int32):
                want = torch.ops.aten._embedding_bag(w, i.to(dt), o.to(dt), False, m, False,
                                                     None, False, pad)
                got = torch.ops.aten._embedding_bag(tpu(w), tpu(i.to(dt)), tpu(o.to(dt)), False,
                                                    m, False, None, False, pad)
                for a, b in zip(got, want):
                    assert a.device.type == "tpu"
                    assert a.dtype == b.dtype and a.shape == b.shape, (m, pad, a, b)
                    torch.testing.assert_close(a.cpu(), b)
    psw = torch.rand(8, generator=g)
    for kw in ({"mode": "sum", "per_sample_weights": psw}, {"mode": "mean"},
               {"mode": "max", "padding_idx": 2}, {"mode": "sum", "include_last_offset": True}):
        want, got = _both(lambda w_, i_, o_, **k: F.embedding_bag(i_, w_, o_, **k), w, i,
                          torch.tensor([0, 4, 6]), **kw)
        torch.testing.assert_close(got.cpu(), want)
    want, got = _both(lambda w_, i_: F.embedding_bag(i_, w_, mode="max"), w, i.reshape(2, 4))
    torch.testing.assert_close(got.cpu(), want)
    wb = w.bfloat16()
    want, got = _both(lambda w_, i_, o_: F.embedding_bag(i_, w_, o_, mode="mean"), wb, i, o)
    torch.testing.assert_close(got.cpu(), want)
    # max: the first of equal rows wins; a NaN only as its bag's first row.
    wn = torch.tensor([[float("nan"), 2.0], [1.0, 2.0], [0.0, 3.0], [1.0, float("nan")]])
    i2, o2 = torch.tensor([0, 1, 2, 1, 3, 0, 2]), torch.tensor([0, 3])
    want = torch.ops.aten._embedding_bag(wn, i2, o2, False, 2)
    got = torch.ops.aten._embedding_bag(tpu(wn), tpu(i2), tpu(o2), False, 2)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.cpu(), b, equal_nan=True)
    for bad_i, bad_o, match in ((torch.tensor([1, 10]), torch.tensor([0]), "valid range"),
                                (torch.tensor([1, -1]), torch.tensor([0]), "valid range"),
                                (i, torch.tensor([1, 4]), "offsets\\[0\\] has to be 0"),
                                (i, torch.tensor([0, 9]), "can not be greater than input's length")):
        with pytest.raises(RuntimeError, match=match):
            torch.ops.aten._embedding_bag(tpu(w), tpu(bad_i), tpu(bad_o), False, 1)[0].cpu()
    with pytest.raises(RuntimeError, match="only supported with mode='sum'"):
        torch.ops.aten._embedding_bag(tpu(w), tpu(i), tpu(o), False, 1, False, tpu(psw))


def test_embedding_bag_gradients_as_the_cpu(mode):
    # The weight's gradient of every mode (padding_idx, scale_grad_by_freq, an empty bag, max's
    # rows) and the per-sample weights' gradient, through autograd and the aten backward with
    # offset2bag left empty (a sum's forward), against the CPU; sparse gradients are refused.
    g = torch.Generator().manual_seed(7)
    w = torch.randn(10, 3, generator=g)
    i = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    o = torch.tensor([0, 4, 4, 6])
    up = torch.randn(4, 3, generator=g)
    for m in ("sum", "mean", "max"):
        for kw in ({}, {"padding_idx": 4}, {"scale_grad_by_freq": m != "max"}):
            wc, wd = w.clone().requires_grad_(), tpu(w).requires_grad_()
            F.embedding_bag(i, wc, o, mode=m, **kw).backward(up)
            F.embedding_bag(tpu(i), wd, tpu(o), mode=m, **kw).backward(tpu(up))
            torch.testing.assert_close(wd.grad.cpu(), wc.grad)
    psw = torch.rand(8, generator=g)
    wc, wd = w.clone().requires_grad_(), tpu(w).requires_grad_()
    pc, pd = psw.clone().requires_grad_(), tpu(psw).requires_grad_()
    F.embedding_bag(i, wc, o, mode="sum", per_sample_weights=pc, padding_idx=4).backward(up)
    F.embedding_bag(tpu(i), wd, tpu(o), mode="sum", per_sample_weights=pd,
                    padding_idx=4).backward(tpu(up))
    torch.testing.assert_close(wd.grad.cpu(), wc.grad)
    torch.testing.assert_close(pd.grad.cpu(), pc.grad)
    empty = torch.empty(0, dtype=torch.int64)
    want = torch.ops.aten._embedding_bag_backward(up, i, o, empty, empty, empty, 10, False, 0,
                                                  False, None)
    got = torch.ops.aten._embedding_bag_backward(tpu(up), tpu(i), tpu(o), tpu(empty), tpu(empty),
                                                 tpu(empty), 10, False, 0, False, None)
    torch.testing.assert_close(got.cpu(), want)
    with pytest.raises(RuntimeError, match="sparse"):
        torch.ops.aten._embedding_bag_backward(tpu(up), tpu(i), tpu(o), tpu(empty), tpu(empty),
                                               tpu(empty), 10, False, 0, True, None)


def test_embedding_bag_edges_as_the_cpu(mode):
    # What the CPU kernel does at the edges: a padding row holding inf takes no part (not
    # multiplied by 0); with include_last_offset short of the indices, the positions past it
    # belong to the last bag for max and for sums with a padding_idx (not without one); the
    # forward-only sum sizes bag_size by the offsets; mixed int32/int64 indices and offsets give
    # int64; a bfloat16 mean rounds the sum and then the quotient; an inf gradient at a padding
    # row leaves it 0.
    E = torch.ops.aten._embedding_bag
    EF = torch.ops.aten._embedding_bag_forward_only
    w = torch.tensor([[1.0], [5.0], [7.0]])
    i, o = torch.tensor([0, 1]), torch.tensor([0, 1])
    wi = torch.tensor([[float("inf")], [1.0]])
    cases = [(E, (wi, torch.tensor([0, 1]), torch.tensor([0]), False, 0, False, None, False, 0)),
             (E, (w, i, o, False, 2, False, None, True, -1)),
             (E, (w, i, o, False, 0, False, None, True, 2)),
             (E, (w, i, o, False, 1, False, None, True, 2)),
             (E, (w, i, o, False, 1, False, None, True, -1)),
             (EF, (w, i, o, False, 0, False, None, True, -1)),
             (E, (w, i.int(), o, False, 1, False, None, False, -1)),
             (E, (torch.tensor([[0.11328125], [3.34375], [1.734375]]).bfloat16(),
                  torch.tensor([0, 1, 2]), torch.tensor([0]), False, 1))]
    for f, args in cases:
        want = f(*args)
        got = f(*[tpu(a) if isinstance(a, torch.Tensor) else a for a in args])
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.shape == b.shape, (args, a, b)
            torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0)
    up = torch.tensor([[float("inf")]])
    wc, wd = wi.clone().requires_grad_(), tpu(wi).requires_grad_()
    F.embedding_bag(torch.tensor([0, 1]), wc, torch.tensor([0]), mode="sum",
                    padding_idx=0).backward(up)
    F.embedding_bag(tpu(torch.tensor([0, 1])), wd, tpu(torch.tensor([0])), mode="sum",
                    padding_idx=0).backward(tpu(up))
    torch.testing.assert_close(wd.grad.cpu(), wc.grad)


@contextlib.contextmanager
def no_fallback():
    """The CPU fallback off in the block (a refusal is the device's own, not the CPU's)."""
    tpuemu.set_cpu_fallback(False)
    try:
        yield
    finally:
        tpuemu.set_cpu_fallback(True)


def test_integer_convolutions_as_the_cpu(mode):
    # int64 and int32 convolutions on the vector unit, exact: 1-, 2- and 3-d, plain and
    # transposed, with groups, strides, dilations, padding (also more than the transposed
    # kernel reaches: a crop), output_padding, bias and unbatched input, against the CPU.
    # int32 wraps as the CPU's; an int64 sum beyond int32 is refused, never wrapped.
    g = torch.Generator().manual_seed(11)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
    conv_t = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
    cases = [  # nd, groups, stride, padding, dilation, output_padding, kernel
        (1, 1, 1, 0, 1, 0, 3), (1, 2, 2, 1, 1, 1, 3), (1, 1, 3, 2, 2, 0, 2),
        (2, 1, 1, 1, 1, 0, 3), (2, 2, (2, 1), (0, 1), (1, 2), (1, 0), (2, 3)),
        (2, 1, 2, 3, 1, 1, 2),  # transposed padding 3 > its kernel's reach 1: a crop
        (3, 1, 1, 0, 1, 0, 2), (3, 2, 2, 1, 1, 0, (1, 2, 2)),
    ]
    for dt in (torch.int64, torch.int32):
        for nd, groups, stride, pad, dil, opad, k in cases:
            ks = [k] * nd if isinstance(k, int) else list(k)
            x = torch.randint(-9, 9, [2, 2 * groups] + [5] * nd, generator=g, dtype=dt)
            w = torch.randint(-9, 9, [3 * groups, 2] + ks, generator=g, dtype=dt)
            b = torch.randint(-9, 9, [3 * groups], generator=g, dtype=dt)
            wt = torch.randint(-9, 9, [2 * groups, 3] + ks, generator=g, dtype=dt)
            bt = torch.randint(-9, 9, [3 * groups], generator=g, dtype=dt)
            for f, args in ((conv[nd], (x, w, b, stride, pad, dil, groups)),
                            (conv_t[nd], (x, wt, bt, stride, pad, opad, groups, dil))):
                try:
                    want = f(*args)
                except NotImplementedError as e:
                    # int32 has no transposed or dilated kernel on the CPU: the same message.
                    assert dt == torch.int32
                    with no_fallback(), pytest.raises(NotImplementedError, match=str(e)[:30]):
                        f(*tpu(list(args)))
                    continue
                got = f(*tpu(list(args)))
                assert got.dtype == dt
                assert torch.equal(got.cpu(), want), (f.__name__, nd, groups, stride, pad, dil, opad)
        # Unbatched input, no bias.
        x = torch.randint(-9, 9, (3, 6, 6), generator=g, dtype=dt)
        w = torch.randint(-9, 9, (4, 3, 3, 3), generator=g, dtype=dt)
        want, got = _both(F.conv2d, x, w)
        assert torch.equal(got.cpu(), want)
    # int32 wraps as the CPU's kernel does.
    x = torch.full((1, 1, 2, 2), 2**30, dtype=torch.int32)
    w = torch.full((1, 1, 2, 2), 3, dtype=torch.int32)
    want, got = _both(F.conv2d, x, w)
    assert torch.equal(got.cpu(), want)
    # An int64 result beyond int32 raises (the CPU gives 4 * 3 * 2**30).
    x = x.long()
    with pytest.raises(RuntimeError, match="beyond int32"):
        F.conv2d(tpu(x), tpu(w.long())).cpu()
    # Mixed dtypes raise as the CPU raises; so does a zero spatial size with a batch and channels.
    want, got = _both(F.conv2d, x, w.float())
    assert isinstance(want, RuntimeError) and isinstance(got, RuntimeError)
    with pytest.raises(RuntimeError, match="bias type"):
        torch.ops.aten.convolution(tpu(x), tpu(w.long()), tpu(torch.ones(1)), [1, 1], [0, 0], [1, 1], False,
                                   [0, 0], 1)
    with pytest.raises(RuntimeError, match="Only zero batch or zero channel inputs are supported"):
        F.conv_transpose1d(tpu(torch.ones(1, 2, 0, dtype=torch.long)), tpu(torch.ones(2, 3, 3, dtype=torch.long)),
                           stride=2)
    # A product of a million elements: its checks reduce in chunks (one row did not fit VMEM).
    x = torch.randint(-9, 9, (1, 32, 32, 32), generator=g)
    w = torch.randint(-9, 9, (32, 32, 3, 3), generator=g)
    want, got = _both(F.conv2d, x, w, None, 1, 1)
    assert torch.equal(got.cpu(), want)


def test_integer_average_pooling_as_the_cpu(mode):
    # int64 average pooling divides the window's sum rounding toward zero (-5 / 2 is -2), with
    # padding, count_include_pad, ceil_mode and divisor_override (also negative), in 1-, 2- and
    # 3-d, and local_response_norm of int64 (built on it), against the CPU; int32 is refused
    # with the CPU's message; a window sum beyond int32 raises, never wraps.
    g = torch.Generator().manual_seed(3)
    x1 = torch.tensor([[[-7, 2, 5, -3, 4]]])
    for kw in ({}, {"padding": 1}, {"padding": 1, "count_include_pad": False},
               {"ceil_mode": True, "stride": 2}):
        want, got = _both(F.avg_pool1d, x1, 3 if kw else 2, **kw)
        assert torch.equal(got.cpu(), want), kw
    x2 = torch.randint(-50, 50, (2, 3, 7, 6), generator=g)
    for kw in ({}, {"stride": 1, "padding": 1}, {"padding": 1, "count_include_pad": False},
               {"ceil_mode": True, "padding": 1, "count_include_pad": False},
               {"divisor_override": 3}, {"divisor_override": -2}):
        want, got = _both(F.avg_pool2d, x2, 3, **kw)
        assert got.dtype == torch.int64
        assert torch.equal(got.cpu(), want), kw
    x3 = torch.randint(-50, 50, (1, 2, 5, 4, 6), generator=g)
    want, got = _both(F.avg_pool3d, x3, 2, 1, 1)
    assert torch.equal(got.cpu(), want)
    want, got = _both(F.local_response_norm, x2, 3)
    assert_same(got, want)
    for f, x in ((F.avg_pool1d, x1), (F.avg_pool2d, x2), (F.avg_pool3d, x3)):
        with pytest.raises(NotImplementedError) as cpu:
            f(x.int(), 2)
        with no_fallback(), pytest.raises(NotImplementedError, match=str(cpu.value).split(" not")[0]):
            f(tpu(x.int()), 2)
    big = torch.full((1, 1, 2, 2), 2**30)
    with pytest.raises(RuntimeError, match="beyond int32"):
        F.avg_pool2d(tpu(big), 2).cpu()


def test_reductions_over_views_of_many_dims_as_the_cpu(mode):
    # A reduction whose row spans four or more runs of memory that do not chain (a window of a
    # 5-d tensor, a broadcast inside the row) moves a block of rows in more DMA dimensions than
    # a descriptor holds: the row is copied in its order first. Before, `x[:, :2, :3, :3,
    # :3].sum()` faulted on the device and a sum over four of its dims was refused; fused with
    # the elementwise work before it (DeferAndFuse), the kernel faulted too.
    x = torch.randn(2, 3, 5, 5, 5, generator=torch.Generator().manual_seed(4))
    w = torch.randn(3, 2, generator=torch.Generator().manual_seed(5))
    cases = {
        "sum all": lambda x, w: x[:, :2, :3, :3, :3].sum(),
        "sum of four dims": lambda x, w: x[:, :, :3, :3, :3].sum((1, 2, 3, 4)),
        "amax, 6-d": lambda x, w: x[:, :, None, :3, :3, :3].amax((1, 3, 4, 5)),
        "broadcast product, max": lambda x, w: (x[:, None, :2, :3, :3, 0] * w[None, :, :, None, None])
        .abs().max(),
        "int64 product": lambda x, w: (x[:, None, :2, :3, :3, 0] * w[None, :, :, None, None]).long(),
    }
    for f in cases.values():
        want, got = _both(f, x, w)
        assert_same(got, want, rtol=1e-5, atol=1e-5)
    xi, wi = (x * 9).long(), (w * 9).long()
    want, got = _both(lambda a, b: (a[:, None, :2, :3, :3, 0] * b[None, :, :, None, None]).sum(), xi, wi)
    assert_same(got, want, exact=True)


def test_fractional_max_pooling_as_the_cpu(mode):
    # fractional_max_pool2d/3d with given samples: the windows' starts computed in the input's
    # dtype (bfloat16 rounding as the CPU's), the first largest value but the last NaN, the
    # flat index in the plane, unbatched input, and the gradient added at the indices; the
    # module draws its samples on the tpu; PyTorch's checks (3-d wants O + K - 1 < I).
    g = torch.Generator().manual_seed(8)
    cases = [((2, 3, 9, 7), (2, 3), (4, 3)), ((3, 8, 8), (3, 2), (6, 2)), ((1, 2, 5, 6, 7), (2, 3, 2), (3, 3, 5)),
             ((2, 6, 5, 9), (1, 1), (5, 5))]
    for dt in (torch.float32, torch.bfloat16):
        for shape, k, out in cases:
            nd = len(k)
            x = torch.randn(*shape, generator=g).to(dt)
            x.view(-1)[::7] = float("nan") if dt == torch.float32 else x.view(-1)[::7]
            planes = (shape[0], shape[1]) if len(shape) == nd + 2 else (1, shape[0])
            s = torch.rand(*planes, nd, generator=g).to(dt)
            f = getattr(torch.ops.aten, f"fractional_max_pool{nd}d")
            wv, wi = f(x, k, out, s)
            gv, gi = f(tpu(x), k, out, tpu(s))
            assert torch.equal(gi.cpu(), wi)
            assert gv.dtype == dt and torch.equal(gv.cpu().nan_to_num(9.0), wv.nan_to_num(9.0))
            if dt == torch.float32:
                go = torch.randn(wv.shape, generator=g)
                b = getattr(torch.ops.aten, f"fractional_max_pool{nd}d_backward")
                assert_same(b(tpu(go), tpu(x), k, out, gi), b(go, x, k, out, wi))
    m = torch.nn.FractionalMaxPool2d(2, output_size=(3, 3), return_indices=True)
    xd = tpu(torch.randn(2, 4, 7, 7, generator=g)).requires_grad_()
    y, i = m(xd)
    assert y.shape == (2, 4, 3, 3) and i.device.type == "tpu"
    assert torch.equal(y.detach().cpu().flatten(2), xd.detach().cpu().flatten(2).gather(2, i.cpu().flatten(2)))
    y.sum().backward()
    assert float(xd.grad.sum().cpu()) == 2 * 4 * 9
    x3 = torch.randn(1, 2, 6, 6, 6)
    for k, out, match in (((3, 2, 2), (4, 2, 2), "pool time 3 too large"), ((2, 3, 3), (2, 4, 4), "pool width 3")):
        with pytest.raises(RuntimeError, match=match):
            torch.ops.aten.fractional_max_pool3d(x3, k, out, torch.rand(1, 2, 3))
        with pytest.raises(RuntimeError, match=match):
            torch.ops.aten.fractional_max_pool3d(tpu(x3), k, out, tpu(torch.rand(1, 2, 3)))
    wi = torch.zeros(1, 2, 3, 3, dtype=torch.int32)
    for dev in (lambda t: t, tpu):
        with pytest.raises(RuntimeError, match="expected scalar type Long but found Int"):
            torch.ops.aten.fractional_max_pool2d_backward(dev(torch.ones(1, 2, 3, 3)), dev(torch.ones(1, 2, 6, 6)),
                                                          [2, 2], [3, 3], dev(wi))
    with pytest.raises(RuntimeError, match="size\\(1\\) equals to input channel size"):
        torch.ops.aten.fractional_max_pool2d(tpu(x3[0]), (2, 2), (2, 2), tpu(torch.rand(2, 3, 2)))


def test_incomplete_gamma_as_the_cpu(mode):
    # P and Q by ATen's regions (series, continued fraction, small-x series) on the vector
    # unit, against the CPU's Cephes; the special values (0, inf, negative, NaN) are ATen's.
    g = torch.Generator().manual_seed(7)
    a = torch.cat([torch.rand(300, generator=g) * 10, torch.rand(60, generator=g) * 0.1,
                   torch.rand(60, generator=g) * 150 + 20,
                   torch.tensor([0., 0., 1., 2., float("inf"), float("inf"), -1., 1.,
                                 float("nan"), 3.])])
    x = torch.cat([torch.rand(300, generator=g) * 12, torch.rand(60, generator=g) * 1.2,
                   a[360:420] * (0.7 + 0.6 * torch.rand(60, generator=g)),
                   torch.tensor([0., 2., 0., float("inf"), 1., float("inf"), 1., -1., 1.,
                                 float("nan")])])
    def close(got, want, **tol):
        assert got.device.type == "tpu" and got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tol)

    for f in (torch.igamma, torch.igammac, torch.special.gammainc, torch.special.gammaincc):
        close(f(a.to("tpu"), x.to("tpu")), f(a, x), rtol=1e-4, atol=5e-5)
    ab, xb = a.bfloat16(), x.bfloat16()
    close(torch.igamma(ab.to("tpu"), xb.to("tpu")), torch.igamma(ab, xb), rtol=1.6e-2, atol=1e-2)
    t = a.to("tpu").clone()
    t.igammac_(x.to("tpu"))
    close(t, torch.igammac(a, x), rtol=1e-4, atol=5e-5)
