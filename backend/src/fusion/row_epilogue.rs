//! After planning: a product whose only reader is a group reducing along the product's rows
//! (the language-model head's logits and the cross-entropy that reads them) becomes one
//! kernel, the reduction run on each finished output tile in VMEM
//! ([`crate::ir::RowEpilogue`]): the product never crosses HBM (written once and read once
//! apart: 16 MiB of the demo block's step). XLA fuses a reduction into its producer the same
//! way when the producer's output tile holds whole rows.
//!
//! The merged kernel runs where the reduction's group ran, so the product moves later, past
//! the groups between, which must not write what it reads. A chip whose VMEM cannot hold
//! tiles of whole rows runs the two parts apart (`Node::split_rows`).

use super::group::{Graph, Group, read_each_operand_once, storages};
use super::views::same_elements;
use crate::ir::{NodeKind, RowEpilogue};

/// How many groups back a reduction looks for the product it reads.
const WINDOW: usize = 16;

/// The joins metric's name for the merge.
pub(super) const RULE: &str = "row epilogue";

/// Merges each product into the later row-reduction group that alone reads it.
pub(super) fn merge(groups: &mut Vec<Group>, graph: &Graph) {
    let mut j = 0;
    while j < groups.len() {
        match producer(groups, j, graph) {
            Some((i, input)) => {
                let product = groups.remove(i);
                merge_into(product, &mut groups[j - 1], input);
                // `j - 1` now holds the merged group; look at the next one.
            }
            None => j += 1,
        }
    }
}

/// The group before `j` whose product group `j` reduces along its rows and alone reads, and
/// which may move to `j`; with the index of the input of `j` that reads it. Group `j`'s node
/// first reads each operand once (as `finish` would make it), so that input is unique.
fn producer(groups: &mut [Group], j: usize, graph: &Graph) -> Option<(usize, usize)> {
    let NodeKind::Tile {
        shape, row_dims: 1, ..
    } = &groups[j].node.kind
    else {
        return None;
    };
    let shape = shape.clone();
    read_each_operand_once(&mut groups[j].node);
    for i in (j.saturating_sub(WINDOW)..j).rev() {
        let g = &groups[i];
        let NodeKind::Matmul(mm) = &g.node.kind else {
            continue;
        };
        let [p] = &g.node.outputs[..] else {
            continue;
        };
        let reads: Vec<usize> = groups[j]
            .node
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, v)| v.storage.id() == p.storage.id())
            .map(|(k, _)| k)
            .collect();
        let [k] = reads[..] else {
            if reads.is_empty() {
                continue;
            }
            return None;
        };
        let v = &groups[j].node.inputs[k];
        let own = groups[j]
            .members
            .iter()
            .filter(|m| m.inputs.iter().any(|x| x.storage.id() == p.storage.id()))
            .count();
        let fits = mm.twin.is_none()
            && mm.rows.is_none()
            && mm.batch == 1
            && mm.epilogue.outputs.len() == 1
            && !graph.live(p)
            && graph.readers(p.storage.id()) == own
            && v.dtype == p.dtype
            && same_elements(&v.layout, &p.layout)
            && shape.iter().product::<usize>() == mm.m * mm.n
            && shape.last() == Some(&mm.n);
        // The product moves past the groups between and joins the reduction's: none of them
        // may write what it reads (the reduction's outputs are stored tile by tile while later
        // tiles still load the product's operands).
        let read = storages(&g.node);
        let free = groups[i + 1..=j].iter().all(|h| {
            h.node
                .outputs
                .iter()
                .all(|o| !read.contains(&o.storage.id()))
        });
        return (fits && free).then_some((i, k));
    }
    None
}

/// Makes `rows` (a tile group reducing along rows) the product group `product` with `rows`'
/// program as its row epilogue; `input` is the input of `rows` that reads the product.
fn merge_into(product: Group, rows: &mut Group, input: usize) {
    let NodeKind::Tile { shape, prog, .. } = &rows.node.kind else {
        unreachable!("checked by `producer`");
    };
    let NodeKind::Matmul(mut mm) = product.node.kind.clone() else {
        unreachable!("checked by `producer`");
    };
    let mut inputs = rows.node.inputs.clone();
    let product_view = inputs.remove(input);
    mm.rows = Some(Box::new(RowEpilogue {
        prog: prog.clone(),
        product: input as u32,
        inputs: rows.node.inputs.len(),
        product_view,
        product_out: product.node.outputs[0].clone(),
        shape: shape.clone(),
    }));
    let mut node = product.node.clone();
    node.kind = NodeKind::Matmul(mm);
    node.inputs.extend(inputs);
    node.outputs = rows.node.outputs.clone();
    rows.node = node;
    // The product's operators come first, then the merge, then the reduction's.
    let mut joins = product.joins;
    joins.push(RULE);
    prepend(joins, &mut rows.joins);
    prepend(product.ops, &mut rows.ops);
    prepend(product.op_ids, &mut rows.op_ids);
    prepend(product.members, &mut rows.members);
    prepend(product.read_ids, &mut rows.read_ids);
    rows.out_refs.clear();
}

/// `to` with `front` before its own items.
fn prepend<T>(mut front: Vec<T>, to: &mut Vec<T>) {
    front.append(to);
    *to = front;
}

#[cfg(test)]
mod tests {
    use super::super::testing::{data, run_both, run_both_on};
    use crate::Tensor;
    use crate::dtype::DType;

    /// `x [m, k]`, `w [k, n]` in bf16.
    fn operands(rt: &crate::Runtime, m: usize, k: usize, n: usize) -> Vec<Tensor> {
        let t = |len: usize, seed: u32, shape: &[usize]| {
            Tensor::from_slice(rt, &data(len, seed), shape)
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap()
        };
        vec![t(m * k, 41, &[m, k]), t(k * n, 42, &[k, n])]
    }

    /// Logits and the log-softmax and row maximum of them, as a language-model head's loss
    /// reads them; the logits are not kept.
    fn head(t: &[Tensor]) -> Vec<Tensor> {
        let logits = t[0].mm(&t[1]).unwrap();
        vec![
            logits.log_softmax(-1).unwrap(),
            logits.amax(&[-1], false).unwrap(),
        ]
    }

    #[test]
    fn a_head_and_its_softmax_never_write_the_logits() {
        // Rows of 1,000 (not a multiple of 128: the last vector chunk masked), 200 rows (the
        // last group of 8 partial).
        let (m, k, n) = (200usize, 256usize, 1000usize);
        let r = run_both(|rt| operands(rt, m, k, n), head);
        // The same product, the same row program on the same values: the same bits.
        assert_eq!(r.strict, r.fused);
        // By hand: one kernel reading x and w once and writing the log-softmax (bf16) and
        // one maximum a row (bf16); Strict also writes the logits and reads them back.
        assert_eq!(r.kernels, 1);
        assert_eq!(r.joins.get(super::RULE), Some(&1));
        let min = 2 * (m * k + k * n + m * n + m) as u64;
        assert!(
            r.hbm_bytes >= min && r.hbm_bytes <= min + min / 16,
            "{} bytes for a minimum of {min}",
            r.hbm_bytes
        );
        assert!(r.strict_hbm_bytes >= min + 2 * 2 * (m * n) as u64);
    }

    #[test]
    fn a_chip_without_room_for_whole_rows_runs_the_two_apart() {
        // 2 MiB of VMEM holds the row program's tiles but not the matmul's tiles of whole
        // rows 8,192 wide (W's slices alone are 4 MiB): the product and the row program run
        // as two kernels, with the same bits.
        let (m, k, n) = (64usize, 128usize, 8192usize);
        let mut small = tpuemu_emulator::builtin("v5e").unwrap();
        small.vmem_bytes = 2 << 20;
        let r = run_both_on(small, |rt| operands(rt, m, k, n), head);
        assert_eq!(r.strict, r.fused);
        assert_eq!(r.kernels, 2);
    }

    /// `t(rt, shape, seed, dtype)`: deterministic values.
    fn t(rt: &crate::Runtime, shape: &[usize], seed: u32, dtype: DType) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_slice(rt, &data(n, seed), shape)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    }

    #[test]
    fn a_reduction_writing_what_the_product_reads_stays_apart() {
        // The row maximum copied over the bias the product's epilogue adds (found by review:
        // merged, tile 0's row outputs were stored while later tiles still loaded the bias).
        let (m, k, n) = (512usize, 128usize, 512usize);
        let mut chip = tpuemu_emulator::builtin("v5e").unwrap();
        chip.vmem_bytes = 1 << 20;
        let r = run_both_on(
            chip,
            |rt| {
                vec![
                    t(rt, &[m, k], 1, DType::F32),
                    t(rt, &[k, n], 2, DType::F32),
                    t(rt, &[n], 3, DType::F32),
                ]
            },
            |t| {
                let logits = t[0].mm(&t[1]).unwrap().add(&t[2]).unwrap();
                let mx = logits.amax(&[-1], false).unwrap();
                crate::ops::creation::copy_(&t[2], &mx).unwrap();
                vec![t[2].clone()]
            },
        );
        assert_eq!(r.strict, r.fused);
        assert!(!r.joins.contains_key(super::RULE));
    }

    #[test]
    fn a_product_without_a_kernel_still_runs_its_operators() {
        // `tril` in the product's epilogue has no kernel there (found by review: merged, the
        // group's fallback ran the product part alone and failed again).
        let (m, k, n) = (256usize, 128usize, 256usize);
        let r = run_both(
            |rt| {
                vec![
                    t(rt, &[m, k], 1, DType::BF16),
                    t(rt, &[k, n], 2, DType::BF16),
                ]
            },
            |t| {
                let logits = t[0].mm(&t[1]).unwrap().tril(0).unwrap();
                vec![logits.log_softmax(-1).unwrap()]
            },
        );
        assert_eq!(r.strict, r.fused);
    }

    #[test]
    fn logits_kept_for_later_are_written_as_before() {
        // The logits themselves are a result: they stay the product's output, written, and
        // the softmax reads them in a kernel of its own.
        let (m, k, n) = (64usize, 128usize, 512usize);
        let r = run_both(
            |rt| operands(rt, m, k, n),
            |t| {
                let logits = t[0].mm(&t[1]).unwrap();
                vec![logits.log_softmax(-1).unwrap(), logits]
            },
        );
        assert_eq!(r.strict, r.fused);
        assert_eq!(r.kernels, 2);
        assert!(!r.joins.contains_key(super::RULE));
    }
}
