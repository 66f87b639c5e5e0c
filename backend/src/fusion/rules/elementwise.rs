//! Elementwise chains: an elementwise tile node joins an elementwise tile group over the same
//! iteration space, reading the group's values element for element. `exp(x * 3 + 1) - x`
//! becomes one kernel that reads `x` once and writes the result once.

use super::super::group::{Graph, Group};
use super::tile::{self, Fit};
use crate::ir::{Node, NodeKind};

/// Joins `n` to `g` when both are elementwise over the same space.
pub(super) fn join(g: &mut Group, n: &Node, _graph: &Graph) -> bool {
    let both_elementwise = matches!(
        (&g.node.kind, &n.kind),
        (NodeKind::Tile { row_dims: 0, .. }, NodeKind::Tile { row_dims: 0, .. })
    );
    both_elementwise && tile::fit(g, n) == Some(Fit::Same) && tile::merge(g, n, Fit::Same)
}

#[cfg(test)]
mod tests {
    use super::super::super::testing::{data, run_both};

    #[test]
    fn a_chain_reads_its_input_once_and_writes_once() {
        let n = 1 << 16;
        let x0 = data(n, 1);
        let r = run_both(
            |rt| vec![crate::Tensor::from_slice(rt, &x0, &[n]).unwrap()],
            |x| {
                let x = &x[0];
                let y = x.mul_scalar(3.0).unwrap().add_scalar(1.0).unwrap();
                vec![y.exp().unwrap().sub(x).unwrap()]
            },
        );
        assert_eq!(r.strict, r.fused);
        // Hand minimum: one kernel, x read once (4n bytes), the result written once (4n).
        assert_eq!(r.kernels, 1);
        assert_eq!(r.hbm_bytes, 8 * n as u64);
        assert_eq!(r.strict_kernels, 4);
    }
}
