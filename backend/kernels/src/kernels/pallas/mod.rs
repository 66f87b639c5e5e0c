//! User kernels written with JAX Pallas (`pl.pallas_call`), lowered to this instruction set.
//!
//! `tpuemu.pallas` traces the user's JAX function and writes each `pallas_call` as a
//! [`spec::KernelSpec`]: the grid, every operand's `BlockSpec` (block shape and index map) and
//! the kernel body's jaxpr. [`build`] lowers it the way Mosaic compiles it for a TensorCore:
//!
//! - **The grid** runs in order, last axis fastest, unrolled: each step's `program_id` is a
//!   known constant, so the index maps, `pl.when` conditions and `fori_loop` counters are
//!   evaluated while lowering ([`scalar`]).
//! - **Blocks are pipelined** as Mosaic's pipeline does: every input block is copied from HBM
//!   into one of two VMEM buffers by a strided DMA, the next step's blocks while this step
//!   computes; a block whose index does not change between consecutive steps is not copied
//!   again; an output block stays in VMEM while its index stays the same (so a kernel may
//!   accumulate into it over a reduction axis) and is written back to HBM when the index
//!   changes or the grid ends. Scratch buffers (`scratch_shapes`) live for the whole kernel.
//! - **Scalar prefetch** (`PrefetchScalarGridSpec`): those operands are copied into SMEM
//!   before the first step; the body reads them (`lengths_ref[b]`) into scalar registers, and
//!   what it computes from them (branches, loop bounds, DMA addresses and semaphores, indices
//!   of VMEM references) runs on the scalar unit ([`dynamic`], [`control`]).
//! - **Partial edge blocks**: a block reaching past the array's end copies only the part
//!   inside, both ways; the rest of its buffer is unspecified, as on a TPU.
//! - **The body** ([`body`]) becomes vector code over (8, 128) tiles and matrix-unit products
//!   ([`values`] for the layout).
//!
//! What Mosaic refuses is refused with the kernel's name ([`PallasError::Refused`]): blocks
//! that break the (8, 128) tiling, VMEM over capacity, out-of-range indices; what this
//! lowering does not handle yet is named ([`PallasError::Unsupported`]).

pub mod body;
mod control;
mod dma;
mod dynamic;
pub mod expr;
mod matmul;
mod pointwise;
mod reduce;
mod refs;
pub mod scalar;
mod schedule;
mod shape;
pub mod spec;
#[cfg(test)]
mod tests;
mod tiles;
pub mod values;

use std::cell::RefCell;
use std::rc::Rc;

use tpuemu_isa::{ArgSlot, CoreInfo, DmaShape, MemRef, Program, Sem};

use self::body::{Body, Val};
use self::spec::{Dt, KernelSpec};
use self::values::{Arr, Smem, Vmem, mem_fmt};
use crate::codegen::{Emitter, RegPool, hbm_vmem_desc};

/// Why a Pallas kernel cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PallasError {
    /// The serialised kernel is malformed (a bug in `tpuemu.pallas`).
    #[error("tpuemu.pallas: bad kernel description: {0}")]
    Spec(String),
    /// Mosaic would refuse the kernel.
    #[error("Pallas kernel `{kernel}`: {what}")]
    Refused {
        /// The kernel's name.
        kernel: String,
        /// What is wrong.
        what: String,
    },
    /// A construct this lowering does not handle.
    #[error("Pallas kernel `{kernel}`: {what} is not supported by tpuemu's Mosaic lowering")]
    Unsupported {
        /// The kernel's name.
        kernel: String,
        /// The construct.
        what: String,
    },
    /// More VMEM (or semaphores) than the core has.
    #[error("Pallas kernel `{kernel}`: {what}")]
    TooLarge {
        /// The kernel's name.
        kernel: String,
        /// What did not fit.
        what: String,
    },
    /// The generated program is malformed (a bug in this lowering).
    #[error("Pallas kernel `{kernel}`: {what}")]
    Build {
        /// The kernel's name.
        kernel: String,
        /// The builder's error.
        what: String,
    },
}

impl PallasError {
    /// Mosaic refuses `what`.
    pub fn refused(kernel: &str, what: impl Into<String>) -> Self {
        PallasError::Refused {
            kernel: kernel.to_string(),
            what: what.into(),
        }
    }

    /// `what` is not lowered.
    pub fn unsupported(kernel: &str, what: String) -> Self {
        PallasError::Unsupported {
            kernel: kernel.to_string(),
            what,
        }
    }
}

impl From<PallasError> for crate::error::TpuError {
    fn from(e: PallasError) -> Self {
        match e {
            PallasError::Unsupported { .. } => crate::error::TpuError::Unsupported(e.to_string()),
            _ => crate::error::TpuError::BadArgs(e.to_string()),
        }
    }
}

/// An operand's blocks: where a block of it sits in HBM and in VMEM.
struct Blocks {
    /// Argument slot.
    slot: ArgSlot,
    /// The two VMEM buffers (one for a scratch buffer).
    bufs: [Arr; 2],
    /// HBM byte offset of each step's block.
    offsets: Vec<i64>,
    /// Each step's DMA descriptors' SMEM addresses, each way (to VMEM, to HBM): a partial
    /// edge block copies fewer rows or columns.
    desc: Vec<[u32; 2]>,
    /// Bytes each step's block moves.
    bytes: Vec<u64>,
    /// An index map that reads scalar-prefetch values: the block is chosen while running
    /// (`offsets` is empty); the bytes each block index moves the block by, per dimension.
    chosen: Option<Vec<i64>>,
}

impl Blocks {
    /// Step `t`'s descriptors (one for every step of a block chosen while running).
    fn desc(&self, t: usize) -> [u32; 2] {
        self.desc[t.min(self.desc.len() - 1)]
    }

    /// Bytes step `t`'s block moves.
    fn bytes(&self, t: usize) -> u64 {
        self.bytes[t.min(self.bytes.len() - 1)]
    }

    /// Whether step `t`'s block is another than step `t - 1`'s (always, for blocks chosen
    /// while running: they are copied every step).
    fn changed(&self, t: usize) -> bool {
        t > 0 && (self.chosen.is_some() || self.offsets[t] != self.offsets[t - 1])
    }
}

/// Evaluates index map `map` at grid point `point` while the kernel runs (it reads the
/// scalar-prefetch arrays `prefetch`): a register holding the block's HBM byte offset, each
/// index times its `mult`.
#[allow(clippy::too_many_arguments)]
fn chosen_offset(
    e: &mut Emitter,
    vmem: &mut Vmem,
    kernel: &str,
    core: &CoreInfo,
    sregs: &Rc<RefCell<RegPool>>,
    grid: &[u32],
    point: &[i64],
    map: &spec::Jaxpr,
    prefetch: &[Val],
    mult: &[i64],
) -> Result<Rc<values::Sr>, PallasError> {
    let mut body = Body::new(e, vmem, kernel, point, grid, core, sregs.clone());
    let mut args: Vec<Val> = point
        .iter()
        .map(|&x| Val::S(scalar::Scalar::I(x as i32), Dt::I32))
        .collect();
    args.extend(prefetch.iter().cloned());
    let outs = body.run(map, args)?;
    let mut off = 0i64;
    let mut terms = Vec::new();
    for (v, m) in outs.into_iter().zip(mult) {
        match body.force(v)? {
            Val::S(s, _) => off += s.as_i64() * m,
            Val::D(r, _) => terms.push((r, *m)),
            _ => {
                return Err(PallasError::unsupported(
                    kernel,
                    "an index map returning an array".into(),
                ));
            }
        }
    }
    let dst = body.sreg()?;
    if terms.is_empty() {
        body.e.smov(dst.reg, off as i32);
    } else {
        let (r, extra) = body.scaled_sum(&terms)?;
        body.e.sadd(dst.reg, r.reg, (off + extra) as i32);
    }
    Ok(dst)
}

/// The first scalar register of the constant cache: the ones below hold scalars computed from
/// data (`s1`..`s23`).
const SCALAR_REGS_END: u8 = 24;

/// The semaphore of operand `k`'s buffer `b`.
fn sem(k: usize, b: usize) -> Sem {
    Sem::n((2 * k + b) as u8)
}

/// Copies operand `bl`'s block of step `t` between HBM and its VMEM buffer `buf`, at the HBM
/// offset in `chosen` when an index map computed it while running.
fn block_dma(
    e: &mut Emitter,
    bl: &Blocks,
    buf: usize,
    t: usize,
    to_vmem: bool,
    s: Sem,
    chosen: Option<&values::Sr>,
) {
    let h = match chosen {
        Some(r) => r.reg,
        None => e.konst(bl.offsets[t] as i32),
    };
    let v = e.konst(bl.bufs[buf].addr as i32);
    let d = e.konst(bl.desc(t)[if to_vmem { 0 } else { 1 }] as i32);
    let (hbm, vm) = (MemRef::hbm(bl.slot, h), MemRef::vmem(v));
    if to_vmem {
        e.dma(vm, hbm, DmaShape::Desc(d), s);
    } else {
        e.dma(hbm, vm, DmaShape::Desc(d), s);
    }
}

/// Whether index map `map` reads its arguments after the `ngrid` grid indices (the
/// scalar-prefetch arrays).
fn reads_prefetch(map: &spec::Jaxpr, ngrid: usize) -> bool {
    let refs: Vec<u32> = map.invars.iter().skip(ngrid).map(|v| v.id).collect();
    map.eqns.iter().any(|e| {
        e.ins
            .iter()
            .any(|a| matches!(a, spec::Atom::Var { v } if refs.contains(v)))
    })
}

/// Lowers `spec` for a core like `core`.
pub fn build(spec: &KernelSpec, core: &CoreInfo) -> Result<Program, PallasError> {
    spec.check()?;
    let kname = spec.name.as_str();
    let nops = spec.operands.len();
    if 2 * nops > 64 {
        return Err(PallasError::TooLarge {
            kernel: kname.into(),
            what: format!("{nops} operands: at most 32 are pipelined (two semaphores each)"),
        });
    }
    // Scalars computed from data get s1..s23, constants s24..s31.
    let mut e = Emitter::with_constants_from(kname, SCALAR_REGS_END);
    e.b.source_op(format!("pallas:{kname}"));
    let slots: Vec<ArgSlot> = (0..nops)
        .map(|i| {
            let name = if i < spec.num_inputs {
                format!("in{i}")
            } else {
                format!("out{}", i - spec.num_inputs)
            };
            e.b.buffer(name)
        })
        .collect();
    let steps = spec.steps();
    let points: Vec<Vec<i64>> = (0..steps).map(|t| spec.grid_point(t)).collect();
    let mut vmem = Vmem::new(kname, core.vmem_bytes);
    let mut blocks: Vec<Option<Blocks>> = Vec::with_capacity(nops);
    let mut smem: Vec<Option<Smem>> = vec![None; nops];
    let smem_room = |e: &Emitter, words: usize| -> Result<u32, PallasError> {
        if e.b.smem_used() as u64 + 4 * words as u64 > core.smem_bytes {
            return Err(PallasError::TooLarge {
                kernel: kname.into(),
                what: format!(
                    "SMEM over capacity: {words} words do not fit beside {} bytes in use ({} bytes)",
                    e.b.smem_used(),
                    core.smem_bytes
                ),
            });
        }
        Ok(words as u32)
    };
    for (k, o) in spec.operands.iter().enumerate() {
        let what = spec.operand_name(k);
        let dt = Dt::parse(&o.dtype).expect("checked");
        if o.in_smem() {
            // Scalar prefetch: the whole array into SMEM, before anything else (one word per
            // element: an int8 array comes widened to int32).
            let n: usize = o.shape.iter().product::<usize>().max(1);
            let bytes = n * 4;
            let w = smem_room(&e, bytes.div_ceil(4))?;
            let addr = e.b.smem_alloc(w as usize);
            let (a, l) = (e.konst(addr as i32), e.konst(bytes as i32));
            e.dma(
                MemRef::smem(a),
                MemRef::hbm(slots[k], tpuemu_isa::SReg::ZERO),
                DmaShape::Len(l),
                sem(k, 0),
            );
            e.wait_bytes(sem(k, 0), bytes as u64);
            smem[k] = Some(Smem {
                addr,
                shape: o.shape.clone(),
                dt,
            });
            blocks.push(None);
            continue;
        }
        if o.in_hbm() {
            // The kernel copies from and to it itself.
            blocks.push(None);
            continue;
        }
        let esz = dt.bytes() as i64;
        // The kernel sees the non-squeezed block dimensions.
        let kdims: Vec<usize> = (0..o.shape.len())
            .filter(|&d| o.block[d].is_some())
            .collect();
        let kshape: Vec<usize> = kdims.iter().map(|&d| o.block[d].unwrap_or(1)).collect();
        let (rows, cols) = values::two_d(kname, &kshape, false)?;
        let last = o.shape.len() - 1;
        if kdims.last() != Some(&last) {
            return Err(PallasError::unsupported(
                kname,
                format!("{what}: a block that squeezes the array's last dimension"),
            ));
        }
        // Strides of the whole array in its HBM buffer, in elements: row-major, or as given
        // (a broadcast input passed unexpanded: stride 0 where it repeats).
        let mut strides = vec![1i64; o.shape.len()];
        for d in (0..last).rev() {
            strides[d] = strides[d + 1] * o.shape[d + 1] as i64;
        }
        if !o.strides.is_empty() {
            strides = o.strides.clone();
        }
        // The block's rows as one DMA dimension, its columns as a contiguous run or (strided
        // along the last dimension) as a second one.
        let run = |cin: u32, rin: u32, hstride: i64, vstride: i64| {
            if strides[last] == 1 {
                (cin * esz as u32, vec![(rin, hstride, vstride)])
            } else {
                (
                    esz as u32,
                    vec![(rin, hstride, vstride), (cin, strides[last] * esz, esz)],
                )
            }
        };
        let row_dim = if kdims.len() >= 2 {
            Some(kdims[kdims.len() - 2])
        } else {
            None
        };
        let fmt = mem_fmt(dt);
        let a = vmem.array(rows, cols, fmt, dt, kshape.clone(), &what)?;
        let b = vmem.array(rows, cols, fmt, dt, kshape.clone(), &what)?;
        let hstride = row_dim.map_or(0, |d| strides[d] * esz);
        let col_dim = last;
        let mut offsets = Vec::with_capacity(points.len());
        let mut descs = Vec::with_capacity(points.len());
        let mut bytes = Vec::with_capacity(points.len());
        if reads_prefetch(&o.index_map, spec.grid.len()) {
            // Blocks chosen by data: whole blocks only, copied every step.
            if o.shape
                .iter()
                .zip(&o.block)
                .any(|(s, b)| b.is_some_and(|b| s % b != 0))
            {
                return Err(PallasError::unsupported(
                    kname,
                    format!(
                        "{what}: partial edge blocks with an index map that reads scalar-prefetch values"
                    ),
                ));
            }
            let (el, dims) = run(cols, rows, hstride, a.stride as i64);
            descs.push([
                e.descriptor(&hbm_vmem_desc(el, &dims, true)),
                e.descriptor(&hbm_vmem_desc(el, &dims, false)),
            ]);
            bytes.push(rows as u64 * cols as u64 * esz as u64);
            let mult = o
                .block
                .iter()
                .zip(&strides)
                .map(|(b, s)| b.unwrap_or(1) as i64 * s * esz)
                .collect();
            blocks.push(Some(Blocks {
                slot: slots[k],
                bufs: [a, b],
                offsets,
                desc: descs,
                bytes,
                chosen: Some(mult),
            }));
            continue;
        }
        for p in &points {
            let idx = scalar::eval(
                kname,
                &o.index_map,
                &p.iter()
                    .map(|&x| scalar::Scalar::I(x as i32))
                    .collect::<Vec<_>>(),
            )?;
            let mut off = 0i64;
            // Rows and columns inside the array (fewer at a partial edge block).
            let (mut rin, mut cin) = (rows as i64, cols as i64);
            for (d, ix) in idx.iter().enumerate() {
                let ix = ix.as_i64();
                let (bsz, start) = match o.block[d] {
                    Some(b) => (b as i64, ix * b as i64),
                    None => (1, ix),
                };
                if start < 0 || start >= o.shape[d] as i64 {
                    return Err(PallasError::refused(
                        kname,
                        format!(
                            "{what}: at grid index {p:?} the index map gives block {:?}, outside the array {:?} in dimension {d}",
                            idx.iter().map(|s| s.as_i64()).collect::<Vec<_>>(),
                            o.shape
                        ),
                    ));
                }
                let inside = bsz.min(o.shape[d] as i64 - start);
                if Some(d) == row_dim {
                    rin = inside;
                } else if d == col_dim {
                    cin = inside;
                } else if inside < bsz {
                    return Err(PallasError::unsupported(
                        kname,
                        format!("{what}: a partial block along leading dimension {d}"),
                    ));
                }
                off += start * strides[d];
            }
            offsets.push(off * esz);
            let (el, dims) = run(cin as u32, rin as u32, hstride, a.stride as i64);
            descs.push([
                e.descriptor(&hbm_vmem_desc(el, &dims, true)),
                e.descriptor(&hbm_vmem_desc(el, &dims, false)),
            ]);
            bytes.push(rin as u64 * cin as u64 * esz as u64);
        }
        blocks.push(Some(Blocks {
            slot: slots[k],
            bufs: [a, b],
            offsets,
            desc: descs,
            bytes,
            chosen: None,
        }));
    }
    // Scratch: VMEM buffers (a stack of 2-D arrays for a rank above 2) and semaphores, after
    // the pipeline's two per operand.
    let mut scratch = Vec::new();
    let mut next_sem = 2 * nops;
    for (i, s) in spec.scratch.iter().enumerate() {
        if s.is_semaphore() {
            let n: usize = s.shape.iter().product();
            if next_sem + n > 64 {
                return Err(PallasError::TooLarge {
                    kernel: kname.into(),
                    what: format!(
                        "{} semaphores: the core has 64, {next_sem} of them pipeline the operands",
                        n
                    ),
                });
            }
            scratch.push(Val::Sems(next_sem as u8, s.shape.clone()));
            next_sem += n;
            continue;
        }
        let dt = Dt::parse(&s.dtype).expect("checked");
        let what = format!("scratch buffer {i}");
        if s.space == "smem" {
            if dt.bytes() != 4 {
                return Err(PallasError::unsupported(
                    kname,
                    format!(
                        "{what}: an SMEM array of {} (int32 or float32 words)",
                        s.dtype
                    ),
                ));
            }
            let words: usize = s.shape.iter().product::<usize>().max(1);
            let w = smem_room(&e, words)?;
            let addr = e.b.smem_alloc(w as usize);
            scratch.push(Val::Smem(Smem {
                addr,
                shape: s.shape.clone(),
                dt,
            }));
            continue;
        }
        let r = s.shape.len();
        let a = if r > 2 {
            let (rows, cols) = (s.shape[r - 2] as u32, s.shape[r - 1] as u32);
            vmem.stack(
                &s.shape[..r - 2],
                rows,
                cols,
                mem_fmt(dt),
                dt,
                s.shape.clone(),
                &what,
            )?
        } else {
            let (rows, cols) = values::two_d(kname, &s.shape, false)?;
            vmem.array(rows, cols, mem_fmt(dt), dt, s.shape.clone(), &what)?
        };
        scratch.push(Val::Ref(a));
    }
    let nin = spec.num_inputs;
    let sregs = Rc::new(RefCell::new(RegPool::below(SCALAR_REGS_END)));
    let prefetch: Vec<Val> = smem
        .iter()
        .flatten()
        .map(|m| Val::Smem(m.clone()))
        .collect();
    // The HBM offset of operand k's block at step t: known, or computed by its index map
    // while running (held until the copy is emitted).
    let offset = |e: &mut Emitter,
                  vmem: &mut Vmem,
                  k: usize,
                  t: usize|
     -> Result<Option<Rc<values::Sr>>, PallasError> {
        let Some(Some(mult)) = blocks[k].as_ref().map(|b| b.chosen.as_ref()) else {
            return Ok(None);
        };
        chosen_offset(
            e,
            vmem,
            kname,
            core,
            &sregs,
            &spec.grid,
            &points[t],
            &spec.operands[k].index_map,
            &prefetch,
            mult,
        )
        .map(Some)
    };
    for bl in blocks.iter().flatten() {
        if bl.offsets.iter().any(|&o| o > i32::MAX as i64) {
            return Err(PallasError::TooLarge {
                kernel: kname.into(),
                what: "an operand above 2 GiB".into(),
            });
        }
    }
    // Which buffer each operand's block of step t is in, and which steps copy.
    let mut cur = vec![0usize; nops];
    let mut pending = vec![[0u64; 2]; nops];
    // Step 0's inputs.
    for k in 0..nin {
        let Some(bl) = &blocks[k] else { continue };
        let h = offset(&mut e, &mut vmem, k, 0)?;
        block_dma(&mut e, bl, 0, 0, true, sem(k, 0), h.as_deref());
        pending[k][0] += bl.bytes(0);
    }
    let n = points.len();
    for (t, point) in points.iter().enumerate() {
        e.b.mark_begin(&format!("step {:?}", point));
        for k in 0..nops {
            let Some(bl) = &blocks[k] else { continue };
            // An output chosen by data keeps its one buffer: it is written back every step.
            if bl.changed(t) && !(k >= nin && bl.chosen.is_some()) {
                cur[k] ^= 1;
            }
            let b = cur[k];
            // An input's block has arrived; an output's buffer has been written back.
            if pending[k][b] > 0 {
                e.wait_bytes(sem(k, b), pending[k][b]);
                pending[k][b] = 0;
            }
        }
        // The next step's input blocks, into the other buffers, while this one computes.
        if t + 1 < n {
            for k in 0..nin {
                let Some(bl) = &blocks[k] else { continue };
                if bl.changed(t + 1) {
                    let b = cur[k] ^ 1;
                    let h = offset(&mut e, &mut vmem, k, t + 1)?;
                    block_dma(&mut e, bl, b, t + 1, true, sem(k, b), h.as_deref());
                    pending[k][b] += bl.bytes(t + 1);
                }
            }
        }
        let mark = vmem.mark();
        let mut args: Vec<Val> = (0..nops)
            .map(|k| match (&blocks[k], &smem[k]) {
                (Some(bl), _) => Val::Ref(bl.bufs[cur[k]].clone()),
                (None, Some(m)) => Val::Smem(m.clone()),
                (None, None) => {
                    let o = &spec.operands[k];
                    Val::Hbm(values::Hbm {
                        slot: slots[k],
                        shape: o.shape.clone(),
                        dt: Dt::parse(&o.dtype).expect("checked"),
                    })
                }
            })
            .collect();
        args.extend(scratch.iter().cloned());
        let mut body = Body::new(
            &mut e,
            &mut vmem,
            kname,
            point,
            &spec.grid,
            core,
            sregs.clone(),
        );
        body.run(&spec.body, args)?;
        vmem.release(mark);
        for k in nin..nops {
            let Some(bl) = &blocks[k] else { continue };
            if t + 1 == n || bl.changed(t + 1) {
                let b = cur[k];
                let h = offset(&mut e, &mut vmem, k, t)?;
                block_dma(&mut e, bl, b, t, false, sem(k, b), h.as_deref());
                pending[k][b] += bl.bytes(t);
            }
        }
        e.b.mark_end();
    }
    for (k, p) in pending.iter().enumerate() {
        for (b, bytes) in p.iter().enumerate() {
            if *bytes > 0 {
                e.wait_bytes(sem(k, b), *bytes);
            }
        }
    }
    e.b.halt();
    e.finish().map_err(|err| PallasError::Build {
        kernel: kname.into(),
        what: err.to_string(),
    })
}
