//! The eigen and singular value decompositions, whose vectors are unique only up to sign:
//! checked by what defines them, in f64 on the host, in every mode — `A V = V diag(w)` with
//! `Vᵀ V = I` and `w` ascending (`eigh`, reading only the named triangle); `U diag(S) Vh = A`
//! with orthonormal columns of `U` and rows of `Vh` and `S` descending (`svd`: tall, wide,
//! `full_matrices`, rank-deficient, batched). The values alone (eigenvalues, singular values)
//! are compared with PyTorch's in `from_torch`.

use tpuemu_backend::ops::{self, Value};
use tpuemu_backend::{DType, Runtime, Tensor};

use super::harness::{SuiteMode, runtime};

/// The eager modes (a single call has no graph to compile).
const MODES: [SuiteMode; 3] = [SuiteMode::Strict, SuiteMode::Debug, SuiteMode::DeferAndFuse];

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::_linalg_eigh", eigh_defines_its_vectors),
    ("aten::_linalg_svd", svd_reconstructs),
    (
        "aten::linalg_matrix_exp",
        matrix_functions_meet_their_definitions,
    ),
    (
        "aten::linalg_matrix_sqrth",
        matrix_functions_meet_their_definitions,
    ),
    (
        "aten::linalg_polar",
        matrix_functions_meet_their_definitions,
    ),
    ("aten::linalg_lstsq", lstsq_solves_the_normal_equations),
];

/// A fixed pseudo-random matrix batch (`[b, m, n]`, entries in [-1, 1)).
fn matrix(b: usize, m: usize, n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..b * m * n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn upload(rt: &Runtime, v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_f64s(rt, v.iter().copied(), v.len(), shape, DType::F32).expect("upload")
}

fn outputs(rt: &Runtime, op: &str, args: Vec<Value>) -> Vec<(Vec<usize>, Vec<f64>)> {
    ops::call(rt, op, args)
        .unwrap_or_else(|e| panic!("{op}: {e}"))
        .into_iter()
        .map(|v| match v {
            Value::Tensor(t) => {
                let data = t
                    .to_vec::<f32>()
                    .expect("read")
                    .iter()
                    .map(|&x| x as f64)
                    .collect();
                (t.shape().to_vec(), data)
            }
            other => panic!("{op} returned {other:?}"),
        })
        .collect()
}

/// `x[i, j]` of matrix `k` of a row-major `[b, r, c]` batch.
fn at(x: &[f64], c: usize, r: usize, k: usize, i: usize, j: usize) -> f64 {
    x[k * r * c + i * c + j]
}

/// An f64 check of f32 results.
fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 2e-5 + 2e-5 * want.abs(),
        "{what}: got {got}, want {want}"
    );
}

#[test]
fn eigh_defines_its_vectors() {
    for mode in MODES {
        let rt = runtime(mode);
        for (b, n, seed, uplo) in [
            (1, 1, 1, "L"),
            (2, 4, 2, "L"),
            (1, 5, 3, "U"),
            (3, 6, 4, "L"),
        ] {
            let a = matrix(b, n, n, seed);
            // The symmetric matrix of the named triangle (the other one is ignored).
            let sym = |k: usize, i: usize, j: usize| {
                let (r, c) = if (uplo == "L") == (i >= j) {
                    (i, j)
                } else {
                    (j, i)
                };
                at(&a, n, n, k, r, c)
            };
            let out = outputs(
                &rt,
                "aten::_linalg_eigh",
                vec![
                    Value::Tensor(upload(&rt, &a, &[b, n, n])),
                    Value::Str(uplo.into()),
                    Value::Bool(true),
                ],
            );
            let ((ws, w), (vs, v)) = (&out[0], &out[1]);
            assert_eq!(
                (ws.as_slice(), vs.as_slice()),
                (&[b, n][..], &[b, n, n][..])
            );
            let what = format!("{mode:?} eigh b={b} n={n} {uplo}");
            for k in 0..b {
                for i in 1..n {
                    assert!(w[k * n + i - 1] <= w[k * n + i], "{what}: ascending");
                }
                for i in 0..n {
                    for j in 0..n {
                        // (A V)[i, j] = w[j] V[i, j];  (Vᵀ V)[i, j] = δ_ij.
                        let av: f64 = (0..n).map(|l| sym(k, i, l) * at(v, n, n, k, l, j)).sum();
                        close(
                            av,
                            w[k * n + j] * at(v, n, n, k, i, j),
                            &format!("{what}: A V"),
                        );
                        let vv: f64 = (0..n)
                            .map(|l| at(v, n, n, k, l, i) * at(v, n, n, k, l, j))
                            .sum();
                        close(vv, f64::from(u8::from(i == j)), &format!("{what}: VᵀV"));
                    }
                }
            }
        }
    }
}

#[test]
fn svd_reconstructs() {
    for mode in MODES {
        let rt = runtime(mode);
        let cases: &[(usize, usize, usize, bool, bool)] = &[
            // (batch, m, n, full_matrices, rank-deficient)
            (1, 5, 3, false, false),
            (2, 3, 5, false, false),
            (1, 5, 3, true, false),
            (1, 3, 4, true, false),
            (1, 4, 4, false, true),
            (2, 6, 3, true, true),
            (1, 24, 20, false, false),
        ];
        for (ci, &(b, m, n, full, deficient)) in cases.iter().enumerate() {
            let mut a = matrix(b, m, n, 10 + ci as u64);
            if deficient {
                // The last column repeats the first: rank n - 1, a zero singular value.
                for k in 0..b {
                    for i in 0..m {
                        a[k * m * n + i * n + n - 1] = a[k * m * n + i * n];
                    }
                }
            }
            let out = outputs(
                &rt,
                "aten::_linalg_svd",
                vec![
                    Value::Tensor(upload(&rt, &a, &[b, m, n])),
                    Value::Bool(full),
                    Value::Bool(true),
                ],
            );
            let ((us, u), (ss, s), (vs, vh)) = (&out[0], &out[1], &out[2]);
            let k = m.min(n);
            let (uc, vr) = if full { (m, n) } else { (k, k) };
            assert_eq!(us.as_slice(), &[b, m, uc][..]);
            assert_eq!(ss.as_slice(), &[b, k][..]);
            assert_eq!(vs.as_slice(), &[b, vr, n][..]);
            let what = format!("{mode:?} svd case {ci} ({b}x{m}x{n} full={full})");
            for bi in 0..b {
                for i in 1..k {
                    assert!(s[bi * k + i - 1] >= s[bi * k + i], "{what}: descending");
                }
                for i in 0..m {
                    for j in 0..n {
                        let usv: f64 = (0..k)
                            .map(|l| {
                                at(u, uc, m, bi, i, l) * s[bi * k + l] * at(vh, n, vr, bi, l, j)
                            })
                            .sum();
                        close(usv, at(&a, n, m, bi, i, j), &format!("{what}: U S Vh"));
                    }
                }
                for i in 0..uc {
                    for j in 0..uc {
                        let uu: f64 = (0..m)
                            .map(|l| at(u, uc, m, bi, l, i) * at(u, uc, m, bi, l, j))
                            .sum();
                        close(uu, f64::from(u8::from(i == j)), &format!("{what}: UᵀU"));
                    }
                }
                for i in 0..vr {
                    for j in 0..vr {
                        let vv: f64 = (0..n)
                            .map(|l| at(vh, n, vr, bi, i, l) * at(vh, n, vr, bi, j, l))
                            .sum();
                        close(vv, f64::from(u8::from(i == j)), &format!("{what}: Vh Vhᵀ"));
                    }
                }
            }
        }
    }
}

/// `C = A B` of row-major `n x n` matrices in f64.
fn mat_mul(a: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let mut c = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            c[i * n + j] = (0..n).map(|l| a[i * n + l] * b[l * n + j]).sum();
        }
    }
    c
}

/// `e^A` in f64: scaled to a norm below 1/2, 30 Taylor terms, squared back.
fn exp_ref(a: &[f64], n: usize) -> Vec<f64> {
    let norm = (0..n)
        .map(|j| (0..n).map(|i| a[i * n + j].abs()).sum::<f64>())
        .fold(0.0, f64::max);
    let s = if norm > 0.5 {
        (norm / 0.5).log2().ceil() as i32
    } else {
        0
    };
    let y: Vec<f64> = a.iter().map(|v| v * 2f64.powi(-s)).collect();
    let eye: Vec<f64> = (0..n * n)
        .map(|k| f64::from(u8::from(k / n == k % n)))
        .collect();
    let (mut sum, mut term) = (eye.clone(), eye);
    for k in 1..30 {
        term = mat_mul(&term, &y, n).iter().map(|v| v / k as f64).collect();
        sum = sum.iter().zip(&term).map(|(x, t)| x + t).collect();
    }
    for _ in 0..s {
        sum = mat_mul(&sum, &sum, n);
    }
    sum
}

#[test]
fn matrix_functions_meet_their_definitions() {
    for mode in MODES {
        let rt = runtime(mode);
        // e^A against the f64 series, at norms that need no squaring and several.
        for (n, scale, seed) in [(1, 1.0, 20), (4, 0.3, 21), (5, 2.0, 22), (6, 6.0, 23)] {
            let a: Vec<f64> = matrix(1, n, n, seed).iter().map(|v| v * scale).collect();
            let out = outputs(
                &rt,
                "aten::linalg_matrix_exp",
                vec![Value::Tensor(upload(&rt, &a, &[n, n]))],
            );
            let want = exp_ref(&a, n);
            let top = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (g, w) in out[0].1.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 2e-6 * top,
                    "{mode:?} matrix_exp n={n} x{scale}: got {g}, want {w}"
                );
            }
        }
        // The principal square root of a symmetric positive-definite matrix: X X = A, X = Xᵀ.
        let n = 5;
        let m = matrix(2, n, n, 30);
        let mut spd = vec![0.0; 2 * n * n];
        for k in 0..2 {
            for i in 0..n {
                for j in 0..n {
                    let mm: f64 = (0..n)
                        .map(|l| at(&m, n, n, k, i, l) * at(&m, n, n, k, j, l))
                        .sum();
                    spd[k * n * n + i * n + j] = mm + f64::from(u8::from(i == j));
                }
            }
        }
        let out = outputs(
            &rt,
            "aten::linalg_matrix_sqrth",
            vec![Value::Tensor(upload(&rt, &spd, &[2, n, n]))],
        );
        let x = &out[0].1;
        for k in 0..2 {
            for i in 0..n {
                for j in 0..n {
                    let xx: f64 = (0..n)
                        .map(|l| at(x, n, n, k, i, l) * at(x, n, n, k, l, j))
                        .sum();
                    close(xx, at(&spd, n, n, k, i, j), &format!("{mode:?} sqrth: X X"));
                    close(
                        at(x, n, n, k, i, j),
                        at(x, n, n, k, j, i),
                        &format!("{mode:?} sqrth: Xᵀ"),
                    );
                }
            }
        }
        // The polar decomposition of a tall matrix: U H = A, UᵀU = I, H = Hᵀ.
        let (r, c) = (6, 4);
        let a = matrix(1, r, c, 31);
        let out = outputs(
            &rt,
            "aten::linalg_polar",
            vec![Value::Tensor(upload(&rt, &a, &[r, c]))],
        );
        let ((us, u), (hs, h)) = (&out[0], &out[1]);
        assert_eq!((us.as_slice(), hs.as_slice()), (&[r, c][..], &[c, c][..]));
        for i in 0..r {
            for j in 0..c {
                let uh: f64 = (0..c).map(|l| u[i * c + l] * h[l * c + j]).sum();
                close(uh, a[i * c + j], &format!("{mode:?} polar: U H"));
            }
        }
        for i in 0..c {
            for j in 0..c {
                let uu: f64 = (0..r).map(|l| u[l * c + i] * u[l * c + j]).sum();
                close(
                    uu,
                    f64::from(u8::from(i == j)),
                    &format!("{mode:?} polar: UᵀU"),
                );
                close(h[i * c + j], h[j * c + i], &format!("{mode:?} polar: Hᵀ"));
            }
        }
    }
}

#[test]
fn lstsq_solves_the_normal_equations() {
    for mode in MODES {
        let rt = runtime(mode);
        // A tall system (least squares: Aᵀ (A X - B) = 0, the residuals |A X - B|^2) and a
        // wide one (A X = B exactly).
        for (m, n, seed) in [(6, 3, 40), (3, 5, 41)] {
            let (a, b) = (matrix(1, m, n, seed), matrix(1, m, 2, seed + 100));
            let out = outputs(
                &rt,
                "aten::linalg_lstsq",
                vec![
                    Value::Tensor(upload(&rt, &a, &[m, n])),
                    Value::Tensor(upload(&rt, &b, &[m, 2])),
                    Value::None,
                    Value::Str("gelsd".into()),
                ],
            );
            let ((xs, x), (_, res)) = (&out[0], &out[1]);
            assert_eq!(xs.as_slice(), &[n, 2][..]);
            let what = format!("{mode:?} lstsq {m}x{n}");
            let r: Vec<f64> = (0..m * 2)
                .map(|q| {
                    let (i, j) = (q / 2, q % 2);
                    (0..n).map(|l| a[i * n + l] * x[l * 2 + j]).sum::<f64>() - b[q]
                })
                .collect();
            if m > n {
                for i in 0..n {
                    for j in 0..2 {
                        let g: f64 = (0..m).map(|l| a[l * n + i] * r[l * 2 + j]).sum();
                        close(g, 0.0, &format!("{what}: Aᵀ(AX - B)"));
                    }
                }
                for j in 0..2 {
                    let sq: f64 = (0..m).map(|l| r[l * 2 + j] * r[l * 2 + j]).sum();
                    close(res[j], sq, &format!("{what}: residuals"));
                }
            } else {
                for v in &r {
                    close(*v, 0.0, &format!("{what}: AX = B"));
                }
                assert!(res.is_empty(), "{what}: no residuals for a wide system");
            }
            let (rank, sv) = (&out[2].1, &out[3].1);
            assert_eq!(rank, &vec![m.min(n) as f64], "{what}: rank");
            assert_eq!(sv.len(), m.min(n), "{what}: singular values");
        }
    }
}
