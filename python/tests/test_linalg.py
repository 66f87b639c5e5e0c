"""Linear algebra on the tpu (backend ops/linalg): LU, Cholesky, QR, triangular solves, eigh,
the SVD, least squares and the matrix functions (exponential, symmetric square root, polar), in
every eager mode and under compile, against PyTorch's CPU (LAPACK) results, gradients included;
and the errors PyTorch raises from LAPACK's `info`, raised the same way (`LinAlgError` with
PyTorch's message, batch element included). The CPU fallback never runs here (the suite's
fallback check fails a test during which it did)."""

import pytest
import torch

from conftest import assert_same, tpu

torch.manual_seed(0)


def _shuffled(*shape):
    """Diagonally dominant matrices with their rows shuffled: well conditioned, and partial
    pivoting swaps rows."""
    n = shape[-1]
    a = torch.rand(*shape) - 0.5 + n * torch.eye(n)
    return a[..., torch.randperm(shape[-2]), :].contiguous()


def _spd(*shape):
    m = torch.rand(*shape) - 0.5
    return m @ m.mT + shape[-1] * torch.eye(shape[-1])


A = _shuffled(2, 5, 5)
B = torch.randn(2, 5, 3)
S = _spd(2, 4, 4)

CASES = {
    "solve": lambda a, b, s: torch.linalg.solve(a, b),
    "inv": lambda a, b, s: torch.linalg.inv(a),
    "det": lambda a, b, s: torch.linalg.det(a),
    "slogdet": lambda a, b, s: torch.linalg.slogdet(a),
    "lu": lambda a, b, s: torch.linalg.lu(a),
    "lu_factor_solve": lambda a, b, s: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
    "cholesky": lambda a, b, s: torch.linalg.cholesky(s),
    "cholesky_solve": lambda a, b, s: torch.cholesky_solve(b[:, :4], torch.linalg.cholesky(s)),
    "qr": lambda a, b, s: torch.linalg.qr(b),
    "qr_complete": lambda a, b, s: torch.linalg.qr(b, mode="complete"),
    "solve_triangular": lambda a, b, s: torch.linalg.solve_triangular(a.triu(), b, upper=True),
    # Eigenvectors and singular vectors are unique up to sign: compared as PyTorch's own tests
    # compare them (op_db's output_process_fn_grad), by sign-invariant functions.
    "eigh": lambda a, b, s: (lambda w, v: (w, v.abs()))(*torch.linalg.eigh(s)),
    "eigvalsh_upper": lambda a, b, s: torch.linalg.eigvalsh(s.triu(), UPLO="U"),
    "svd": lambda a, b, s: (lambda u, sv, vh: (u @ vh, sv))(*torch.linalg.svd(b, full_matrices=False)),
    "svdvals_wide": lambda a, b, s: torch.linalg.svdvals(b.mT),
    "matrix_norm_2": lambda a, b, s: torch.linalg.matrix_norm(a, ord=2),
    "matrix_exp": lambda a, b, s: torch.linalg.matrix_exp(a * 0.5),
    "matrix_sqrth": lambda a, b, s: torch.linalg.matrix_sqrth(s),
    "polar": lambda a, b, s: torch.linalg.polar(b),
    # Least squares: every LAPACK driver's outputs (residuals, rank, singular values) as the
    # CPU returns them, tall, square and wide, a vector right-hand side.
    "lstsq_gelsy_tall": lambda a, b, s: tuple(torch.linalg.lstsq(b, a[:, :, :2])),
    "lstsq_gels_tall": lambda a, b, s: tuple(torch.linalg.lstsq(b, a[:, :, :2], driver="gels")),
    "lstsq_gelsd_tall": lambda a, b, s: tuple(torch.linalg.lstsq(b, a[:, :, 0], driver="gelsd")),
    "lstsq_gelss_wide": lambda a, b, s: tuple(torch.linalg.lstsq(b.mT, s[:, :3, :2],
                                                                driver="gelss")),
    "lstsq_square": lambda a, b, s: tuple(torch.linalg.lstsq(a, b)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_match_the_cpu_in_every_mode(case, mode):
    f = CASES[case]
    want = f(A, B, S)
    got = f(tpu(A), tpu(B), tpu(S))
    assert_same(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["solve", "inv", "det", "cholesky", "qr", "eigh", "svd",
                                  "matrix_exp", "matrix_sqrth", "polar"])
def test_gradients_match_the_cpu(case):
    f = CASES[case]

    def grads(a, b, s):
        a, b, s = (x.detach().requires_grad_() for x in (a, b, s))
        out = f(a, b, s)
        outs = out if isinstance(out, tuple) else (out,)
        loss = sum((o * torch.linspace(-1, 1, o.numel()).reshape(o.shape).to(o.device)).sum()
                   for o in outs if o.is_floating_point())
        return torch.autograd.grad(loss, (a, b, s), allow_unused=True, materialize_grads=True)

    want = grads(A, B, S)
    got = grads(tpu(A), tpu(B), tpu(S))
    assert_same(list(got), list(want), rtol=1e-3, atol=1e-4)


@pytest.mark.filterwarnings("error::UserWarning")
def test_a_compiled_solve_matches_the_cpu():
    # solve_ex: no check of `info` in the graph (PyTorch's `_linalg_check_errors` is an
    # effectful operator, which tpuemu's compiler does not take: such a graph runs eagerly on
    # the tpu, with a warning).
    f = torch.compile(lambda a, b: torch.linalg.solve_ex(a, b).result + 1, backend="tpu")
    assert_same(f(tpu(A), tpu(B)), torch.linalg.solve(A, B) + 1, rtol=1e-4, atol=1e-5)


def _error(f, *args):
    with pytest.raises(Exception) as e:
        f(*args)
    return e.value


ERRORS = {
    # PyTorch's own check of `info` (it reads it back), as on the CPU.
    "inv_singular": (lambda x: torch.linalg.inv(x), torch.ones(2, 3, 3)),
    "cholesky_indefinite": (lambda x: torch.linalg.cholesky(x), -torch.eye(3)),
    "solve_singular": (lambda x: torch.linalg.solve(x, torch.ones(3, 1, device=x.device)),
                       torch.zeros(3, 3)),
    # The kernels' own check (`check_errors=True`).
    "cholesky_ex_checked": (lambda x: torch.linalg.cholesky_ex(x, check_errors=True),
                            torch.stack([torch.eye(3), -torch.eye(3)])),
    "inv_ex_checked": (lambda x: torch.linalg.inv_ex(x, check_errors=True), torch.zeros(3, 3)),
    "lu_factor_ex_checked": (lambda x: torch.linalg.lu_factor_ex(x, check_errors=True),
                             torch.stack([torch.eye(3), torch.zeros(3, 3)])),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_are_raised_as_on_the_cpu(case):
    f, x = ERRORS[case]
    want = _error(f, x)
    got = _error(f, tpu(x))
    assert type(got) is type(want), (type(got), got)
    assert str(got) == str(want)


def test_low_precision_and_integer_inputs_are_refused_as_on_the_cpu():
    # PyTorch's CPU raises NotImplementedError for both (no bfloat16 kernel; its
    # checkFloatingOrComplex for integers), and so does the tpu, saying PyTorch's reason.
    for x in (S.bfloat16(), S.to(torch.int64)):
        want = _error(torch.linalg.cholesky_ex, x)
        got = _error(torch.linalg.cholesky_ex, tpu(x))
        assert type(got) is type(want) is NotImplementedError, (got, want)
    assert "Expected a floating point or complex tensor as input. Got Long" in str(got), got
