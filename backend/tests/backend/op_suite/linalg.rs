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
