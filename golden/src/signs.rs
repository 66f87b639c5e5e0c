//! Vector outputs that PyTorch defines only up to sign. `torch.linalg.eigh`'s eigenvectors and
//! `torch.linalg.svd`'s singular vectors are unique up to a sign per vector (their
//! documentation; PyTorch's own tests compare them through sign-invariant functions), and a
//! device's algorithm (Jacobi rotations here, LAPACK's divide and conquer on the CPU) may pick
//! the other one. Such a call passes when, after flipping each vector of the device's result to
//! the sign of PyTorch's — eigenvector `j`, or the singular pair `U[:, j]`, `Vh[j, :]` with one
//! sign — every output matches.

use crate::executor::OpCall;
use crate::tensor::HostTensor;
use crate::value::Value;

/// The operators with sign-ambiguous vector outputs, and which outputs are columns (`U`,
/// eigenvectors) and rows (`Vh`) of one sign each.
pub const SIGNED_VECTOR_OPS: &[(&str, &[usize], &[usize])] = &[
    ("aten::_linalg_eigh", &[1], &[]),
    ("aten::_linalg_svd", &[0], &[2]),
];

/// `actual` with each vector flipped to the sign of `expected`'s (the sign of their dot
/// product; the first column output decides, the row output takes the same signs), or `None`
/// when the call has no such outputs or the shapes do not line up.
pub fn aligned_to_expected(
    call: &OpCall,
    expected: &[Value],
    actual: &[Value],
) -> Option<Vec<Value>> {
    let &(_, cols, rows) = SIGNED_VECTOR_OPS.iter().find(|(op, _, _)| *op == call.op)?;
    let lead = *cols.first()?;
    let (e, a) = (
        expected.get(lead)?.as_tensor()?,
        actual.get(lead)?.as_tensor()?,
    );
    if e.shape() != a.shape() || e.shape().len() < 2 || e.numel() == 0 {
        return None;
    }
    let signs = column_signs(e, a);
    let mut out = actual.to_vec();
    for &i in cols {
        out[i] = Value::Tensor(flip(actual.get(i)?.as_tensor()?, &signs, false)?);
    }
    for &i in rows {
        out[i] = Value::Tensor(flip(actual.get(i)?.as_tensor()?, &signs, true)?);
    }
    Some(out)
}

/// Per matrix of the batch and column `j`: -1 where `a[:, j]` points against `e[:, j]`.
fn column_signs(e: &HostTensor, a: &HostTensor) -> Vec<f64> {
    let s = e.shape();
    let (m, k) = (s[s.len() - 2], s[s.len() - 1]);
    let (ev, av) = (e.contiguous().to_f64_vec(), a.contiguous().to_f64_vec());
    let batch = ev.len() / (m * k);
    let mut signs = Vec::with_capacity(batch * k);
    for b in 0..batch {
        for j in 0..k {
            let dot: f64 = (0..m)
                .map(|i| ev[b * m * k + i * k + j] * av[b * m * k + i * k + j])
                .sum();
            signs.push(if dot < 0.0 { -1.0 } else { 1.0 });
        }
    }
    signs
}

/// `t` with its columns (or, `rows`, its rows) multiplied by `signs` (per matrix, per vector).
fn flip(t: &HostTensor, signs: &[f64], rows: bool) -> Option<HostTensor> {
    let s = t.shape();
    if s.len() < 2 {
        return None;
    }
    let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
    let mut v = t.contiguous().to_f64_vec();
    if r * c == 0 {
        return Some(t.clone());
    }
    let batch = v.len() / (r * c);
    let k = signs.len() / batch.max(1);
    for b in 0..batch {
        for i in 0..r {
            for j in 0..c {
                let vec = if rows { i } else { j };
                if vec < k {
                    v[b * r * c + i * c + j] *= signs[b * k + vec];
                }
            }
        }
    }
    HostTensor::from_f64s(t.dtype(), s.to_vec(), &v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    fn t(shape: &[usize], v: &[f64]) -> HostTensor {
        HostTensor::from_f64s(DType::F32, shape.to_vec(), v).unwrap()
    }

    #[test]
    fn a_flipped_vector_is_flipped_back_and_nothing_else_changes() {
        // U's second column and Vh's second row flipped; a batch of two matrices.
        let e = t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 2.0, 1.0]);
        let a = t(&[2, 2, 2], &[1.0, -2.0, 3.0, -4.0, 1.0, 0.5, -2.0, 1.0]);
        let signs = column_signs(&e, &a);
        assert_eq!(signs, vec![1.0, -1.0, -1.0, 1.0]);
        assert_eq!(
            flip(&a, &signs, false).unwrap().to_f64_vec(),
            e.to_f64_vec()
        );
        let vh = t(&[2, 2, 2], &[5.0, 6.0, 7.0, 8.0, 1.0, 2.0, 3.0, 4.0]);
        assert_eq!(
            flip(&vh, &signs, true).unwrap().to_f64_vec(),
            vec![5.0, 6.0, -7.0, -8.0, -1.0, -2.0, 3.0, 4.0]
        );
        // A vector that differs by more than its sign stays different.
        let b = t(&[2, 2, 2], &[1.0, -2.0, 3.0, 4.0, 1.0, 0.5, -2.0, 1.0]);
        let fixed = flip(&b, &column_signs(&e, &b), false).unwrap().to_f64_vec();
        assert_ne!(fixed, e.to_f64_vec());
    }
}
