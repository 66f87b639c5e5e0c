//! How a kernel's arrays live in VMEM while it is lowered.
//!
//! Every array, a block of an operand, a scratch buffer or a value the body computes, is seen
//! as two-dimensional: its last two dimensions (leading dimensions must be 1), a 1-D array
//! either as a row (`[1, n]`, lanes) or a column (`[n, 1]`, sublanes), a scalar as `[1, 1]`.
//! It is stored row-major with rows padded to a multiple of 128 elements, so its (8, 128)
//! tile `(i, j)` is one strided vector load. A stored extent of 1 along an axis whose
//! logical extent is larger is a broadcast: the load repeats the row (sublane stride 0) or the
//! element (lane stride 0), so `broadcast_in_dim` costs nothing and elementwise operations
//! broadcast tile by tile. Values are kept in 32-bit lanes (`w32`); bf16 values are f32 lanes
//! rounded to bf16; bools are 0 or 1 in i32 lanes.

use std::cell::RefCell;
use std::rc::Rc;

use tpuemu_isa::builder::VAccess;
use tpuemu_isa::ops::{MemFmt, VType};
use tpuemu_isa::{Addr, SReg, VReg};

use super::PallasError;
use super::spec::Dt;
use crate::codegen::{Emitter, RegPool};

/// A scalar register holding a value computed while the kernel runs (read from SMEM, a loop
/// counter, ...). It returns to the pool when the last holder lets go: every value, array
/// address or tree that reads it keeps it alive, so nothing else is written into it meanwhile.
#[derive(Debug)]
pub struct Sr {
    /// The register.
    pub reg: SReg,
    /// When the value is another register's plus a constant (`offset + i`): that register and
    /// the constant, so that an address computed from it can use the other register and fold
    /// the constant (many page indices read from one offset share its register).
    pub origin: Option<(Rc<Sr>, i64)>,
    pool: Rc<RefCell<RegPool>>,
}

impl Sr {
    /// A register from `pool`, or `None` when all are live.
    pub fn take(pool: &Rc<RefCell<RegPool>>) -> Option<Rc<Sr>> {
        Self::take_with(pool, None)
    }

    /// A register from `pool` for a value that is `origin.0 + origin.1`.
    pub fn take_with(pool: &Rc<RefCell<RegPool>>, origin: Option<(Rc<Sr>, i64)>) -> Option<Rc<Sr>> {
        let reg = pool.borrow_mut().take()?;
        // Chains collapse to their first register.
        let origin = origin.map(|(o, k)| match &o.origin {
            Some((oo, kk)) => (oo.clone(), kk + k),
            None => (o, k),
        });
        Some(Rc::new(Sr {
            reg,
            origin,
            pool: pool.clone(),
        }))
    }
}

impl Drop for Sr {
    fn drop(&mut self) {
        self.pool.borrow_mut().give(self.reg);
    }
}

impl PartialEq for Sr {
    fn eq(&self, other: &Sr) -> bool {
        self.reg == other.reg
    }
}

/// A scalar read from SMEM, loaded into a register when first used: reads whose value only
/// a DMA's wait or nothing uses cost no register (a kernel that builds descriptors for many
/// pages reads every page index up front). The lowering loads every pending read before it
/// stores into SMEM and before branches and loops, so a load never sees a later value.
#[derive(Debug)]
pub struct Lazy {
    /// The SMEM address.
    pub addr: Addr,
    /// The register the address is computed in, held until the load.
    pub base: Option<Rc<Sr>>,
    /// Its dtype.
    pub dt: Dt,
    /// Its register once loaded.
    pub loaded: RefCell<Option<Rc<Sr>>>,
}

/// An array in SMEM: a scalar-prefetch operand (`PrefetchScalarGridSpec`) or an SMEM scratch
/// buffer (`pltpu.SMEM`), one 32-bit word per element, row-major (an int8 prefetch array is
/// passed widened to int32: its values, one per word).
#[derive(Clone, Debug, PartialEq)]
pub struct Smem {
    /// SMEM byte address of element 0.
    pub addr: u32,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dt: Dt,
}

/// Sublanes and lanes of a tile.
pub const SUB: u32 = 8;
/// Lanes of a tile.
pub const LANES: u32 = 128;

/// An array in VMEM.
#[derive(Clone, Debug, PartialEq)]
pub struct Arr {
    /// VMEM byte address of element (0, 0).
    pub addr: u32,
    /// Byte stride between rows.
    pub stride: u32,
    /// Rows and columns stored (1 along a broadcast axis).
    pub prow: u32,
    /// Columns stored.
    pub pcol: u32,
    /// Logical rows (the second-to-last dimension).
    pub rows: u32,
    /// Logical columns (the last dimension).
    pub cols: u32,
    /// The element format in memory.
    pub fmt: MemFmt,
    /// The logical dtype.
    pub dt: Dt,
    /// The logical shape.
    pub shape: Vec<usize>,
    /// With one column stored (`pcol == 1`): whether its value fills all 128 lanes of each
    /// row in memory (a column computed here), so tiles load densely rather than
    /// broadcasting lane 0.
    pub rep: bool,
    /// For a reference with leading dimensions (a stack of 2-D arrays, `VMEM((2, 8, 128))`):
    /// bytes from one 2-D array to the next; 0 otherwise.
    pub slab: u32,
    /// A byte offset computed while the kernel runs, added to `addr` (a region at a position
    /// read from data: `buf.at[slot]`, `pl.ds(i * 8, 8)` with `i` a loop counter).
    pub base: Option<Rc<Sr>>,
    /// With a `base`: how many bytes past `addr` the region may start (where it may be, for
    /// the hazard checks).
    pub span: u32,
}

/// An array in HBM that the kernel copies from or to itself (`memory_space=pl.ANY`).
#[derive(Clone, Debug, PartialEq)]
pub struct Hbm {
    /// Its argument slot.
    pub slot: tpuemu_isa::ArgSlot,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dt: Dt,
}

impl Arr {
    /// Whether every element is stored (no broadcast axis).
    pub fn dense(&self) -> bool {
        self.prow == self.rows && self.pcol == self.cols
    }
    /// Row tiles.
    pub fn ti(&self) -> u32 {
        self.rows.div_ceil(SUB)
    }

    /// Column tiles.
    pub fn tj(&self) -> u32 {
        self.cols.div_ceil(LANES)
    }

    /// The base register of its address (`s0` unless computed while running).
    pub fn base_reg(&self) -> SReg {
        self.base.as_ref().map_or(SReg::ZERO, |b| b.reg)
    }

    /// The address of tile (i, j) as an instruction operand.
    pub fn tile_at(&self, i: u32, j: u32) -> Addr {
        Addr {
            base: self.base_reg(),
            offset: self.tile_addr(i, j) as i32,
        }
    }

    /// The address of byte `off` of the array as an instruction operand.
    pub fn at(&self, off: u32) -> Addr {
        Addr {
            base: self.base_reg(),
            offset: (self.addr + off) as i32,
        }
    }

    /// VMEM bytes [lo, hi) the array may occupy, wherever its computed base puts it.
    pub fn extent(&self) -> (u32, u32) {
        let end = self.addr + self.prow.max(1).div_ceil(SUB) * SUB * self.stride.max(4);
        (self.addr, end + self.span)
    }

    /// VMEM address of tile (i, j) as loaded (a broadcast axis stays at 0), before the base.
    pub fn tile_addr(&self, i: u32, j: u32) -> u32 {
        let i = if self.prow == 1 { 0 } else { i };
        let j = if self.pcol == 1 { 0 } else { j };
        self.addr + i * SUB * self.stride + j * LANES * self.fmt.bytes()
    }
}

/// The vector type of a dtype's lanes.
pub fn vtype(dt: Dt) -> VType {
    if dt.is_float() {
        VType::F32
    } else {
        VType::I32
    }
}

/// The memory format of a dtype in an operand's or scratch buffer.
pub fn mem_fmt(dt: Dt) -> MemFmt {
    match dt {
        Dt::F32 | Dt::I32 => MemFmt::W32,
        Dt::Bf16 => MemFmt::Bf16,
        // int8 arrays are refused before they reach memory ([`super::spec::KernelSpec::check`]).
        Dt::Bool | Dt::I8 => MemFmt::U8,
    }
}

/// (rows, cols) of a logical shape seen in two dimensions; a 1-D array of `n` is a row unless
/// `column`. Leading dimensions other than 1 are refused.
pub fn two_d(kernel: &str, shape: &[usize], column: bool) -> Result<(u32, u32), PallasError> {
    let n = shape.len();
    if n > 2 && shape[..n - 2].iter().any(|&d| d != 1) {
        return Err(PallasError::unsupported(
            kernel,
            format!(
                "a value of shape {shape:?} (only the last two dimensions may exceed 1; squeeze \
                 leading block dimensions with `None` in the BlockSpec)"
            ),
        ));
    }
    let u = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
    Ok(match n {
        0 => (1, 1),
        1 if column => (u(shape[0]), 1),
        1 => (1, u(shape[0])),
        _ => (u(shape[n - 2]), u(shape[n - 1])),
    })
}

/// As [`two_d`], but leading dimensions other than 1 are folded into the rows (a value read
/// from several arrays of a stack, `buf[...]` of a `(pages, rows, cols)` scratch): elementwise
/// work and reshapes that keep the last dimension see it as one taller array; operations that
/// need the leading dimensions apart refuse it through [`two_d`].
pub fn two_d_merged(
    kernel: &str,
    shape: &[usize],
    column: bool,
) -> Result<(u32, u32), PallasError> {
    let n = shape.len();
    if n <= 2 {
        return two_d(kernel, shape, column);
    }
    let rows: usize = shape[..n - 1].iter().product();
    let u = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
    Ok((u(rows), u(shape[n - 1])))
}

/// A bump allocator over VMEM: buffers that live for the whole kernel first, then the values
/// of one grid step, released at the step's end.
#[derive(Debug)]
pub struct Vmem {
    /// The kernel's name, for errors.
    kernel: String,
    next: u64,
    limit: u64,
}

/// Alignment of VMEM allocations (bytes).
const ALIGN: u64 = 512;

impl Vmem {
    /// An allocator over `limit` bytes for kernel `kernel`.
    pub fn new(kernel: &str, limit: u64) -> Vmem {
        Vmem {
            kernel: kernel.to_string(),
            next: 0,
            limit,
        }
    }

    /// The current top, to release to later.
    pub fn mark(&self) -> u64 {
        self.next
    }

    /// Releases everything allocated after `mark`.
    pub fn release(&mut self, mark: u64) {
        self.next = mark;
    }

    /// `bytes` of VMEM for `what`, or the kernel's VMEM error.
    pub fn alloc(&mut self, bytes: u64, what: &str) -> Result<u32, PallasError> {
        let at = self.next.div_ceil(ALIGN) * ALIGN;
        let end = at + bytes.max(1);
        if end > self.limit {
            return Err(PallasError::TooLarge {
                kernel: self.kernel.clone(),
                what: format!(
                    "VMEM over capacity: {what} needs {bytes} bytes at offset {at}, the core has {} \
                     bytes of VMEM (blocks are double-buffered; use smaller blocks)",
                    self.limit
                ),
            });
        }
        self.next = end;
        Ok(at as u32)
    }

    /// A buffer for a `rows` x `cols` array of `fmt`, padded to whole tiles.
    pub fn array(
        &mut self,
        rows: u32,
        cols: u32,
        fmt: MemFmt,
        dt: Dt,
        shape: Vec<usize>,
        what: &str,
    ) -> Result<Arr, PallasError> {
        let mut a = self.stack(&[], rows, cols, fmt, dt, shape, what)?;
        a.slab = 0;
        Ok(a)
    }

    /// A buffer for `lead` stacked `rows` x `cols` arrays (a scratch reference of rank 3 or
    /// more).
    #[allow(clippy::too_many_arguments)]
    pub fn stack(
        &mut self,
        lead: &[usize],
        rows: u32,
        cols: u32,
        fmt: MemFmt,
        dt: Dt,
        shape: Vec<usize>,
        what: &str,
    ) -> Result<Arr, PallasError> {
        let stride = cols.div_ceil(LANES) * LANES * fmt.bytes();
        let slab = rows.div_ceil(SUB) * SUB * stride;
        let n: u64 = lead.iter().map(|&d| d as u64).product();
        let addr = self.alloc(n * slab as u64, what)?;
        Ok(Arr {
            addr,
            stride,
            prow: rows,
            pcol: cols,
            rows,
            cols,
            fmt,
            dt,
            shape,
            rep: false,
            slab,
            base: None,
            span: 0,
        })
    }
}

/// The access of a tile load of `a`: its row stride, or 0 along a broadcast axis.
fn access(e: &mut Emitter, a: &Arr) -> VAccess {
    let sub = if a.prow == 1 { 0 } else { a.stride as i32 };
    let sub = e.konst(sub);
    let lane = if a.pcol == 1 && !a.rep {
        SReg::ZERO
    } else {
        e.konst(a.fmt.bytes() as i32)
    };
    VAccess {
        sub_stride: Some(sub),
        lane_stride: Some(lane),
        mask: None,
    }
}

/// Loads tile (i, j) of `a` into `v` (widened to 32-bit lanes).
pub fn load(e: &mut Emitter, v: VReg, a: &Arr, i: u32, j: u32) {
    let acc = access(e, a);
    e.vld(a.fmt, v, a.tile_at(i, j), acc);
}

/// Stores `v` as tile (i, j) of the dense array `a`, under `mask` (every element when None).
pub fn store(e: &mut Emitter, v: VReg, a: &Arr, i: u32, j: u32, mask: Option<tpuemu_isa::MReg>) {
    let mut acc = access(e, a);
    acc.mask = mask;
    e.vst(a.fmt, v, a.tile_at(i, j), acc);
}
