//! The planner: checks a collective's spec against the topology and fills a [`Plan`] (the
//! ring rounds from [`super::rounds`], or one all-to-all stage). The plan's types are
//! [`super::plan`]'s; the code generators only walk what this returns.

use tpuemu_isa::Topology;

use super::plan::{A2aStage, AxisInfo, MAX_BYTES, Plan, SLOTS, Stage};
use super::{CollectiveOp, CollectiveSpec, RingChoice};
use crate::kernels::KernelError;

fn unsupported(msg: String) -> KernelError {
    KernelError::Unsupported(msg)
}

/// Checks the spec against the topology and plans the stages.
pub fn plan(spec: &CollectiveSpec, topo: &Topology) -> Result<Plan, KernelError> {
    let name = spec.op.name();
    if spec.axes.is_empty() {
        return Err(unsupported(format!("{name}: no mesh axes given")));
    }
    let mut axes = Vec::new();
    for (i, &a) in spec.axes.iter().enumerate() {
        if a >= topo.mesh.len() {
            return Err(unsupported(format!(
                "{name}: axis {a} does not exist (the mesh {:?} has {} axes)",
                topo.mesh,
                topo.mesh.len()
            )));
        }
        if spec.axes[..i].contains(&a) {
            return Err(unsupported(format!("{name}: axis {a} is listed twice")));
        }
        let n = topo.mesh[a];
        let wrap = topo.wraparound.get(a).copied().unwrap_or(false);
        let dcn = topo.dcn_axis == Some(a);
        // The DCN's rings are one-way by default: both ways would share each chip's interface.
        let bidir = n > 2
            && match spec.ring {
                RingChoice::Auto => wrap && !dcn,
                RingChoice::Unidirectional => false,
                RingChoice::Bidirectional => true,
            };
        axes.push(AxisInfo {
            axis: a,
            n,
            bidir,
            dcn,
        });
    }
    let group: u64 = axes.iter().map(|a| a.n as u64).product();
    if spec.op == CollectiveOp::AllToAll || spec.axes.len() > 1 {
        check_numbering(topo)?;
    }
    let esz = spec.dtype.size() as u64;
    if spec.op.reduces()
        && !matches!(
            spec.dtype.name(),
            "float32" | "bfloat16" | "float16" | "int32"
        )
    {
        return Err(unsupported(format!(
            "{name}: sums of {} are not supported (float32, bfloat16, float16 and int32 are)",
            spec.dtype.name()
        )));
    }
    if spec.elements == 0 || !spec.elements.is_multiple_of(group) {
        return Err(unsupported(format!(
            "{name}: {} elements do not split into {group} equal shards (the group of axes {:?}); pad the array to a multiple of {group}",
            spec.elements, spec.axes
        )));
    }
    let total = spec.elements * esz;
    if total > MAX_BYTES {
        return Err(KernelError::TooLarge(format!(
            "{name}: {total} bytes per chip; collectives address at most {MAX_BYTES} bytes per buffer"
        )));
    }
    let shard = total / group;
    let (in_bytes, out_bytes) = match spec.op {
        CollectiveOp::AllGather => (shard, total),
        CollectiveOp::ReduceScatter => (total, shard),
        CollectiveOp::AllReduce | CollectiveOp::AllToAll => (total, total),
    };
    let chunk_cap = chunk_cap(spec, topo, esz)?;
    let mut p = Plan {
        esz,
        group: group as u32,
        axes,
        parts: Vec::new(),
        take_turns: false,
        stages: Vec::new(),
        in_bytes,
        out_bytes,
        scratch_bytes: 0,
        chunk_bytes: spec.chunk_bytes.map(u64::from),
        chunk_cap,
    };
    if group == 1 {
        p.stages.push(Stage::Copy { bytes: in_bytes });
        return Ok(p);
    }
    if spec.op == CollectiveOp::AllToAll {
        plan_a2a(&mut p, topo, total);
    } else {
        super::rounds::plan_rings(&mut p, spec.op, shard / esz);
    }
    Ok(p)
}

/// Chip ids must be `x + dimx * (y + dimy * z)` for the in-program peer arithmetic.
fn check_numbering(topo: &Topology) -> Result<(), KernelError> {
    for c in &topo.chips {
        let mut id = 0u64;
        for (k, &x) in c.coords.iter().enumerate().rev() {
            id = id * topo.mesh[k] as u64 + x as u64;
        }
        if id != c.id as u64 {
            return Err(unsupported(format!(
                "chip {} at {:?}: collectives need chips numbered x-fastest over the mesh {:?}",
                c.id, c.coords, topo.mesh
            )));
        }
    }
    Ok(())
}

/// The largest chunk VMEM allows (reduce-scatter stages stage [`SLOTS`] x 3 chunks in half of
/// VMEM), checked against the spec's chunk size.
fn chunk_cap(spec: &CollectiveSpec, topo: &Topology, esz: u64) -> Result<u64, KernelError> {
    let vmem = topo.chips.first().map_or(0, |c| c.core.vmem_bytes);
    let cap = vmem / 2 / (3 * SLOTS as u64);
    if let Some(b) = spec.chunk_bytes {
        let bytes = (b as u64 / esz / 1024).max(1) * 1024 * esz;
        if spec.op.reduces() && bytes > cap {
            return Err(KernelError::TooLarge(format!(
                "{}: chunks of {bytes} bytes; the staging buffers allow at most {cap} bytes of VMEM per chunk",
                spec.op.name()
            )));
        }
    }
    Ok(cap)
}

fn plan_a2a(p: &mut Plan, topo: &Topology, total: u64) {
    // Chip index strides of the mesh axes.
    let mut stride = vec![1u32; topo.mesh.len()];
    for k in 1..topo.mesh.len() {
        stride[k] = stride[k - 1] * topo.mesh[k - 1];
    }
    let n = p.group;
    let chip_offsets = (0..n)
        .map(|rank| {
            // First axis outermost.
            let mut rest = rank;
            let mut off = 0;
            for ax in p.axes.iter().rev() {
                off += (rest % ax.n) * stride[ax.axis];
                rest /= ax.n;
            }
            off
        })
        .collect();
    p.stages.push(Stage::AllToAll(A2aStage {
        n,
        block: total / n as u64,
        chip_offsets,
        recv_sem: 0,
    }));
}
