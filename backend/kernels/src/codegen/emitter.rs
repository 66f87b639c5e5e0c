//! The emitter: a program builder with a constant-register cache and interned DMA descriptors,
//! and the small scalar and mask idioms kernels repeat.
//!
//! An [`Emitter`] dereferences to its [`ProgramBuilder`], so every instruction method of the
//! builder (`e.sadd(..)`, `e.vld(..)`, `e.dma(..)`) is an emitter method too.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};

use tpuemu_isa::dma::DmaDescriptor;
use tpuemu_isa::ops::{CmpOp, IotaKind, VType};
use tpuemu_isa::{BuildError, Instr, MReg, Program, ProgramBuilder, SReg, VReg};

/// Scalar registers the constant cache may use (`s16`..`s31`); kernels use `s1`..`s15` for
/// their own values.
const CACHE_REGS: std::ops::Range<u8> = 16..32;

/// A pool of scalar registers handed out to kernel code (`s1`..`s15`).
#[derive(Debug, Clone)]
pub struct RegPool {
    free: Vec<u8>,
}

impl Default for RegPool {
    fn default() -> Self {
        RegPool {
            free: (1..16).rev().collect(),
        }
    }
}

impl RegPool {
    /// A pool of `s1` up to (not including) `s{end}`, for an emitter made with
    /// [`Emitter::with_constants_from`]`(end)`.
    pub fn below(end: u8) -> Self {
        RegPool {
            free: (1..end.min(32)).rev().collect(),
        }
    }

    /// Takes a register; `None` when all fifteen are in use.
    pub fn take(&mut self) -> Option<SReg> {
        self.free.pop().map(SReg::n)
    }

    /// Takes a particular register out of the pool (for fixed roles); false if already taken.
    pub fn take_specific(&mut self, r: SReg) -> bool {
        match self.free.iter().position(|x| *x == r.index()) {
            Some(i) => {
                self.free.remove(i);
                true
            }
            None => false,
        }
    }

    /// How many registers are free.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Returns a register to the pool.
    pub fn give(&mut self, r: SReg) {
        debug_assert!(!self.free.contains(&r.index()));
        self.free.push(r.index());
    }

    /// Returns a register to the pool, if there is one.
    pub fn give_opt(&mut self, r: Option<SReg>) {
        if let Some(r) = r {
            self.give(r);
        }
    }
}

/// A program under construction.
#[derive(Clone)]
pub struct Emitter {
    /// The underlying builder.
    pub b: ProgramBuilder,
    /// Value held by each cache register, and when it was last used.
    cache: HashMap<u8, (i32, u64)>,
    cache_regs: std::ops::Range<u8>,
    tick: u64,
    descs: HashMap<Vec<u32>, u32>,
}

impl Emitter {
    /// An emitter for a program called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Emitter {
            b: ProgramBuilder::new(name),
            cache: HashMap::new(),
            cache_regs: CACHE_REGS,
            tick: 0,
            descs: HashMap::new(),
        }
    }

    /// An emitter whose constant cache uses `s{first}`..`s31` (at least four), leaving the
    /// registers below to the kernel ([`RegPool::below`]).
    pub fn with_constants_from(name: impl Into<String>, first: u8) -> Self {
        let mut e = Emitter::new(name);
        e.cache_regs = first.clamp(1, 28)..32;
        e
    }

    /// Appends an instruction.
    pub fn push(&mut self, i: Instr) {
        self.b.push(i);
    }

    /// A register holding `value`, loading it (evicting the least recently used constant) if no
    /// cache register holds it. `s0` for zero. The register stays valid until the next call that
    /// may evict (keep at most 16 constants live at once).
    pub fn konst(&mut self, value: i32) -> SReg {
        if value == 0 {
            return SReg::ZERO;
        }
        self.tick += 1;
        if let Some((r, slot)) = self.cache.iter_mut().find(|(_, (v, _))| *v == value) {
            slot.1 = self.tick;
            return SReg::n(*r);
        }
        let r = self
            .cache_regs
            .clone()
            .find(|r| !self.cache.contains_key(r))
            .unwrap_or_else(|| {
                *self
                    .cache
                    .iter()
                    .min_by_key(|(_, (_, t))| *t)
                    .expect("cache is full")
                    .0
            });
        self.cache.insert(r, (value, self.tick));
        let reg = SReg::n(r);
        self.b.smov(reg, value);
        reg
    }

    /// Forgets every cached constant (call at a label that other paths jump to).
    pub fn forget_constants(&mut self) {
        self.cache.clear();
    }

    /// SMEM byte address of `desc`, preloading it once per program.
    pub fn descriptor(&mut self, desc: &DmaDescriptor) -> u32 {
        let words = desc.to_words();
        if let Some(a) = self.descs.get(&words) {
            return *a;
        }
        let a = self.b.smem_data(&words);
        self.descs.insert(words, a);
        a
    }

    /// Binds `label` to the next instruction and forgets the cached constants (other paths jump
    /// there with whatever the cache registers held on their way).
    pub fn bind_join(&mut self, label: tpuemu_isa::Label) {
        self.b.bind(label);
        self.forget_constants();
    }

    /// `dst += x * k`, through `scratch` (which may be `x`).
    pub fn add_scaled(&mut self, dst: SReg, x: SReg, k: i32, scratch: SReg) {
        self.b.smul(scratch, x, k);
        self.b.sadd(dst, dst, scratch);
    }

    /// `dst` = the mask of the elements whose `kind` index (lane, sublane or flat) is below
    /// `n`; `tmp` is overwritten.
    pub fn mask_below(&mut self, dst: MReg, tmp: VReg, kind: IotaKind, n: u32) {
        self.b.viota(kind, tmp);
        self.b.vcmp(CmpOp::Lt, VType::I32, dst, tmp, n);
    }

    /// The finished program.
    pub fn finish(self) -> Result<Program, BuildError> {
        self.b.finish()
    }
}

impl Deref for Emitter {
    type Target = ProgramBuilder;

    fn deref(&self) -> &ProgramBuilder {
        &self.b
    }
}

impl DerefMut for Emitter {
    fn deref_mut(&mut self) -> &mut ProgramBuilder {
        &mut self.b
    }
}
