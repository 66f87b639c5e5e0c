//! Reductions with their prologue and epilogue: a tile node joins a tile group over the same
//! iteration space when one of them reduces along the row (softmax, norms, losses and their
//! backward), reading the group's full values element for element and its per-row values
//! broadcast along the row. `x * rsqrt(mean(x^2) + eps) * g` is one row kernel.

use super::super::group::{Graph, Group};
use super::tile::{self, Fit};
use crate::ir::{Node, NodeKind};

/// Joins `n` to `g` over the same space when either reduces.
pub(super) fn join(g: &mut Group, n: &Node, _graph: &Graph) -> bool {
    let reduces = |k: &NodeKind| matches!(k, NodeKind::Tile { row_dims, .. } if *row_dims > 0);
    (reduces(&g.node.kind) || reduces(&n.kind))
        && tile::fit(g, n) == Some(Fit::Same)
        && tile::merge(g, n, Fit::Same)
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::{data, run_both};
    use crate::Tensor;

    #[test]
    fn rms_norm_by_hand_is_one_row_kernel() {
        let (rows, d) = (64, 512);
        let (x0, g0) = (data(rows * d, 2), data(d, 3));
        let r = run_both(
            |rt| {
                vec![
                    Tensor::from_slice(rt, &x0, &[rows, d]).unwrap(),
                    Tensor::from_slice(rt, &g0, &[d]).unwrap(),
                ]
            },
            |t| {
                let (x, g) = (&t[0], &t[1]);
                let ms = x.mul(x).unwrap().mean(&[-1], true).unwrap();
                let rstd = ms.add_scalar(1e-6).unwrap().rsqrt().unwrap();
                vec![x.mul(&rstd).unwrap().mul(g).unwrap()]
            },
        );
        assert_eq!(r.strict, r.fused);
        // By hand: x*x starts a group over [rows, d] (reading x once); the mean over the row
        // joins it (the reduction rule); + eps and rsqrt run on [rows, 1], per row; x * rstd
        // and * g are over [rows, d] again and join the reducing group (the reduction rule).
        // One kernel that reads x once, g once and writes the result once; nothing else.
        assert_eq!(r.kernels, 1);
        assert_eq!(r.joins(), [("per-row", 2), ("reduction", 3)]);
        assert_eq!(r.hbm_bytes, 4 * (2 * rows * d + d) as u64);
    }
}
