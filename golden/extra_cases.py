"""Golden cases that OpInfo does not give: backward ops, explicit calls of CompositeImplicit
overloads, and small models. Imported by ``generate.py`` (run that, not this).

* ``explicit/backward.*``: forward + backward of one op each, recorded under the dispatch mode, so
  the autograd formulas' ATen calls (``threshold_backward``, ``gelu_backward``, ...) get cases.
* ``explicit/composite.*``: overloads that are CompositeImplicitAutograd (they decompose before
  reaching the dispatcher's Python key, so the dispatch mode never sees them): ``rms_norm``,
  ``scaled_dot_product_attention``, ``reshape``, ``contiguous``, ... each called directly through
  ``torch.ops.aten`` and recorded as one call.
* ``explicit/ops.*``: plain calls of listed overloads that no OpInfo sample reaches.
* ``models/*``: an MLP, an attention block and a cross-entropy loss, forward and backward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from files import FileWriter
from record import Recorder, Unsupported, make_mode, record_explicit
from settings import seed_for
from tolerance import bf16_matmul_mode, propagate_tolerances

FLOATS = ("float32", "bfloat16")


def _rand(*shape: int, dtype: torch.dtype = torch.float32, grad: bool = False) -> torch.Tensor:
    t = torch.randn(*shape).to(dtype)
    return t.requires_grad_(grad)


def _case(writer: FileWriter, case_id: str, dtype: str, description: str, body: Callable[[Recorder], None],
          kind: str = "explicit", mode: bool = True, max_calls: int = 24) -> None:
    """Runs ``body`` (under the recording mode when ``mode``) and adds its calls as one case.

    The callers seed torch before making the inputs; the body itself draws no random numbers.
    """
    recorder = Recorder(max_calls=max_calls)
    if mode:
        with make_mode(recorder):
            body(recorder)
    else:
        body(recorder)
    meta = {"source": {"kind": kind, "name": case_id.split("/")[1]}, "dtype": dtype, "description": description}
    writer.add_case(case_id, meta, recorder.calls)


# ---------------------------------------------------------------------------------------------
# Backward ops
# ---------------------------------------------------------------------------------------------


def _backward_unary(fn: Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype) -> Callable[[Recorder], None]:
    x = _rand(4, 8, dtype=dtype, grad=True)
    g = _rand(4, 8, dtype=dtype)

    def body(_r: Recorder) -> None:
        fn(x).backward(g)

    return body


def backward_cases(writer: FileWriter) -> None:
    unary = {
        "relu": F.relu,
        "gelu": F.gelu,
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "silu": F.silu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "softmax": lambda x: torch.softmax(x, dim=-1),
        "log_softmax": lambda x: torch.log_softmax(x, dim=-1),
    }
    for dt in FLOATS:
        dtype = getattr(torch, dt)
        for name, fn in unary.items():
            torch.manual_seed(seed_for("backward", name, dt))
            _case(writer, f"backward/{name}/{dt}", dt, f"{name}(x[4,8]).backward(g)", _backward_unary(fn, dtype))

        torch.manual_seed(seed_for("backward", "layer_norm", dt))
        x, w, b = _rand(4, 16, dtype=dtype, grad=True), _rand(16, dtype=dtype, grad=True), _rand(16, dtype=dtype, grad=True)
        g = _rand(4, 16, dtype=dtype)
        _case(writer, f"backward/layer_norm/{dt}", dt, "layer_norm(x[4,16], (16,), w, b).backward(g)",
              lambda _r: F.layer_norm(x, (16,), w, b).backward(g))

        torch.manual_seed(seed_for("backward", "nll_loss", dt))
        logp = torch.log_softmax(_rand(6, 5, dtype=dtype), -1).detach().requires_grad_(True)
        target = torch.tensor([0, 4, 2, 1, 3, 2])
        _case(writer, f"backward/nll_loss/{dt}", dt, "nll_loss(logp[6,5], target).backward()",
              lambda _r: F.nll_loss(logp, target).backward())

        torch.manual_seed(seed_for("backward", "embedding", dt))
        weight = _rand(10, 8, dtype=dtype, grad=True)
        idx = torch.tensor([[1, 3, 3], [0, 9, 1]])
        ge = _rand(2, 3, 8, dtype=dtype)
        _case(writer, f"backward/embedding/{dt}", dt, "embedding(idx[2,3], weight[10,8]).backward(g)",
              lambda _r: F.embedding(idx, weight).backward(ge))


# ---------------------------------------------------------------------------------------------
# CompositeImplicit overloads called explicitly, and plain calls OpInfo does not reach
# ---------------------------------------------------------------------------------------------


def composite_cases(writer: FileWriter) -> None:
    aten = torch.ops.aten
    for dt in FLOATS:
        dtype = getattr(torch, dt)

        def add(name: str, desc: str, fn: Callable[[Recorder], None]) -> None:
            torch.manual_seed(seed_for("composite", name, dt))
            _case(writer, f"composite/{name}/{dt}", dt, desc, fn, mode=False)

        x = _rand(4, 16, dtype=dtype)
        w = _rand(16, dtype=dtype)
        add("rms_norm", "aten::rms_norm(x[4,16], [16], w, 1e-6)",
            lambda r: record_explicit(r, aten.rms_norm.default, x, [16], w, 1e-6))
        add("rms_norm_noweight", "aten::rms_norm(x[4,16], [16])",
            lambda r: record_explicit(r, aten.rms_norm.default, x, [16]))
        q, k, v = _rand(1, 2, 8, 16, dtype=dtype), _rand(1, 2, 8, 16, dtype=dtype), _rand(1, 2, 8, 16, dtype=dtype)
        add("sdpa", "aten::scaled_dot_product_attention(q, k, v [1,2,8,16])",
            lambda r: record_explicit(r, aten.scaled_dot_product_attention.default, q, k, v))
        add("sdpa_causal", "aten::scaled_dot_product_attention(q, k, v, is_causal=True)",
            lambda r: record_explicit(r, aten.scaled_dot_product_attention.default, q, k, v, None, 0.0, True))
        mask = torch.rand(8, 8) > 0.3
        mask |= torch.eye(8, dtype=torch.bool)
        add("sdpa_mask", "aten::scaled_dot_product_attention(q, k, v, attn_mask=bool[8,8], scale=0.5)",
            lambda r: record_explicit(r, aten.scaled_dot_product_attention.default, q, k, v, mask, 0.0, False,
                                      scale=0.5))
        y = _rand(4, 6, dtype=dtype)
        add("reshape", "aten::reshape(x[4,6], [3,8])", lambda r: record_explicit(r, aten.reshape.default, y, [3, 8]))
        add("reshape_strided", "aten::reshape(x[4,6].t(), [24])",
            lambda r: record_explicit(r, aten.reshape.default, y.t(), [24]))
        add("contiguous", "aten::contiguous(x[4,6].t())",
            lambda r: record_explicit(r, aten.contiguous.default, y.t()))
        z = _rand(3, 5, dtype=dtype)
        add("copy_", "aten::copy_(dst[3,5], src[3,5])",
            lambda r: record_explicit(r, aten.copy_.default, torch.zeros(3, 5, dtype=dtype), z))
        add("copy_broadcast", "aten::copy_(dst[3,5], src[5])",
            lambda r: record_explicit(r, aten.copy_.default, torch.zeros(3, 5, dtype=dtype), z[0]))
        add("fill_", "aten::fill_.Scalar(x[3,5], 2.5)",
            lambda r: record_explicit(r, aten.fill_.Scalar, torch.zeros(3, 5, dtype=dtype), 2.5))
        add("_unsafe_view", "aten::_unsafe_view(x[4,6], [2,12])",
            lambda r: record_explicit(r, aten._unsafe_view.default, y, [2, 12]))
        add("_to_copy", "aten::_to_copy(x[4,6], dtype=float32 or bfloat16)",
            lambda r: record_explicit(r, aten._to_copy.default, y,
                                      dtype=torch.bfloat16 if dtype == torch.float32 else torch.float32))
        add("empty", "aten::empty.memory_format([3,4])",
            lambda r: record_explicit(r, aten.empty.memory_format, [3, 4], dtype=dtype))
        add("zeros", "aten::zeros([3,4])", lambda r: record_explicit(r, aten.zeros.default, [3, 4], dtype=dtype))
        add("ones", "aten::ones([3,4])", lambda r: record_explicit(r, aten.ones.default, [3, 4], dtype=dtype))
        add("full", "aten::full([3,4], -1.5)",
            lambda r: record_explicit(r, aten.full.default, [3, 4], -1.5, dtype=dtype))
        add("arange", "aten::arange.start_step(0, 3, 0.25)",
            lambda r: record_explicit(r, aten.arange.start_step, 0, 3, 0.25, dtype=dtype))
        add("t", "aten::t(x[4,6])", lambda r: record_explicit(r, aten.t.default, y))
        add("squeeze_dim", "aten::squeeze.dim(x[4,1,6], 1)",
            lambda r: record_explicit(r, aten.squeeze.dim, y.unsqueeze(1), 1))
        add("stack", "aten::stack([x[4,6], y[4,6]], 1)",
            lambda r: record_explicit(r, aten.stack.default, [y, y * 2], 1))
        add("split", "aten::split.Tensor(x[4,6], 4, 1)",
            lambda r: record_explicit(r, aten.split.Tensor, y, 4, 1))
        add("gelu_tanh", "aten::gelu(x[4,6], approximate='tanh')",
            lambda r: record_explicit(r, aten.gelu.default, y, approximate="tanh"))
        add("embedding", "aten::embedding(weight[10,6], idx[2,3])",
            lambda r: record_explicit(r, aten.embedding.default, _rand(10, 6, dtype=dtype),
                                      torch.tensor([[1, 3, 3], [0, 9, 1]])))
        add("gt_scalar", "aten::gt.Scalar(x[4,6], 0.25)",
            lambda r: record_explicit(r, aten.gt.Scalar, y, 0.25))
        add("ge_scalar", "aten::ge.Scalar(x[4,6], -0.5)",
            lambda r: record_explicit(r, aten.ge.Scalar, y, -0.5))
        add("clamp", "aten::clamp(x[4,6], -0.5, 0.75)",
            lambda r: record_explicit(r, aten.clamp.default, y, -0.5, 0.75))
        add("as_strided", "aten::as_strided(x[4,6], [3,3], [6,2], 1)",
            lambda r: record_explicit(r, aten.as_strided.default, y, [3, 3], [6, 2], 1))
    # Integer arange (the common case: positions, indices).
    torch.manual_seed(seed_for("composite", "arange", "int64"))
    _case(writer, "composite/arange/int64", "int64", "aten::arange(10)",
          lambda r: record_explicit(r, torch.ops.aten.arange.default, 10, dtype=torch.int64), mode=False)
    _case(writer, "composite/arange_start_step/int64", "int64", "aten::arange.start_step(2, 20, 3)",
          lambda r: record_explicit(r, torch.ops.aten.arange.start_step, 2, 20, 3, dtype=torch.int64), mode=False)


def generate_explicit(out_dir: Path, log: Callable[[str], None]) -> None:
    for stem, fill in (("backward", backward_cases), ("composite", composite_cases)):
        writer = FileWriter(stem)
        fill(writer)
        size = writer.write(out_dir, {"source": {"kind": "explicit", "name": stem}})
        log(f"explicit/{stem}: {len(writer.cases)} cases, {size} bytes")


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def _model_case(writer: FileWriter, case_id: str, dt: str, description: str,
                make: Callable[[], Callable[[Recorder], None]]) -> None:
    """A model case: ``make()`` seeds torch, builds the model and its inputs and returns the body.

    The body runs twice under the recording mode: as PyTorch computes it (the case), and with the
    matrix-unit operators' float32/float16 operands rounded to bf16 first (what the TPU's DEFAULT
    precision does, see ``mxu_tolerance``). A model case runs as one sequence on the device, each
    call reading the outputs of the calls before it, so an MXU product's rounding reaches every
    later call: each later call whose outputs the rounding moved gets a tolerance of twice that
    movement plus the dtype's default atol (``propagate_tolerances``). bf16 cases are unchanged.
    """
    exact, body = Recorder(max_calls=200), make()
    with make_mode(exact):
        body(exact)
    rounded, body = Recorder(max_calls=200), make()
    with bf16_matmul_mode(), make_mode(rounded):
        body(rounded)
    propagate_tolerances(exact.calls, rounded.calls)
    meta = {"source": {"kind": "model", "name": case_id.split("/")[1]}, "dtype": dt, "description": description}
    writer.add_case(case_id, meta, exact.calls)


def mlp_case(writer: FileWriter, dt: str) -> None:
    dtype = getattr(torch, dt)

    def make() -> Callable[[Recorder], None]:
        torch.manual_seed(seed_for("models", "mlp", dt))
        fc1, fc2 = torch.nn.Linear(16, 32).to(dtype), torch.nn.Linear(32, 8).to(dtype)
        x, target = _rand(8, 16, dtype=dtype), _rand(8, 8, dtype=dtype)

        def body(_r: Recorder) -> None:
            h = F.gelu(fc1(x), approximate="tanh")
            out = fc2(h)
            loss = F.mse_loss(out, target)
            loss.backward()

        return body

    _model_case(writer, f"models/mlp/{dt}", dt,
                "Linear(16,32) -> gelu(tanh) -> Linear(32,8) -> mse_loss; backward", make)


def attention_case(writer: FileWriter, dt: str) -> None:
    dtype = getattr(torch, dt)

    def make() -> Callable[[Recorder], None]:
        torch.manual_seed(seed_for("models", "attention", dt))
        dim, heads, seq, batch = 16, 2, 8, 2
        norm = torch.nn.LayerNorm(dim).to(dtype)
        qkv = torch.nn.Linear(dim, 3 * dim).to(dtype)
        proj = torch.nn.Linear(dim, dim).to(dtype)
        x = _rand(batch, seq, dim, dtype=dtype, grad=True)

        def body(_r: Recorder) -> None:
            h = norm(x)
            q, k, v = qkv(h).split(dim, dim=-1)
            q, k, v = (t.view(batch, seq, heads, dim // heads).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a.transpose(1, 2).reshape(batch, seq, dim)
            out = x + proj(a)
            out.pow(2).mean().backward()

        return body

    _model_case(writer, f"models/attention/{dt}", dt,
                "x + Linear(sdpa(causal, 2 heads)(Linear(LayerNorm(x)))), x[2,8,16]; backward of mean(out^2)",
                make)


def cross_entropy_case(writer: FileWriter, dt: str) -> None:
    dtype = getattr(torch, dt)

    def make() -> Callable[[Recorder], None]:
        torch.manual_seed(seed_for("models", "cross_entropy", dt))
        logits = _rand(8, 10, dtype=dtype, grad=True)
        target = torch.randint(0, 10, (8,))

        def body(_r: Recorder) -> None:
            F.cross_entropy(logits, target).backward()

        return body

    _model_case(writer, f"models/cross_entropy/{dt}", dt, "cross_entropy(logits[8,10], target[8]); backward",
                make)


def generate_models(out_dir: Path, log: Callable[[str], None]) -> None:
    for stem, fill in (("mlp", mlp_case), ("attention", attention_case), ("cross_entropy", cross_entropy_case)):
        writer = FileWriter(stem)
        for dt in FLOATS:
            try:
                fill(writer, dt)
            except Unsupported as e:
                raise SystemExit(f"model {stem}/{dt} could not be recorded: {e}") from e
        size = writer.write(out_dir, {"source": {"kind": "model", "name": stem}})
        log(f"models/{stem}: {len(writer.cases)} cases, {size} bytes")


__all__ = ["generate_explicit", "generate_models"]
