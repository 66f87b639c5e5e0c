//! The vector unit's memory instructions: VMEM loads, stores and gathers.
//!
//! A register is 8 sublanes of 128 lanes. With a dense lane stride each sublane is one
//! contiguous row of VMEM, which is converted as a whole ([`crate::numerics::lanes`]); other
//! strides, rows that leave VMEM under a mask, and the rarer formats go element by element.

use tpuemu_isa::ops::MemFmt;
use tpuemu_isa::reg::{LANES, SUBLANES};
use tpuemu_isa::{Addr, Instr, SReg};

use super::state::{MaskData, VregData};
use super::timing::{MemKey, Range, Reg, SyncUnit};
use super::{Core, Env, Flow};
use crate::fault::FaultKind;
use crate::numerics::float::{
    bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits,
};
use crate::numerics::lanes;
use crate::recorder::Recorder;

/// Where the elements of a strided vector access are.
pub(super) struct Access {
    base: i64,
    sub: i64,
    lane: i64,
    size: i64,
    dense: bool,
}

impl Access {
    #[inline]
    fn addr(&self, s: usize, l: usize) -> i64 {
        self.base + s as i64 * self.sub + l as i64 * self.lane
    }

    /// Byte range touched by the active elements, `None` when no element is active.
    fn extent(&self, mask: Option<&MaskData>) -> Option<(i64, i64)> {
        match mask {
            None => {
                let corners = [
                    self.addr(0, 0),
                    self.addr(SUBLANES - 1, 0),
                    self.addr(0, LANES - 1),
                    self.addr(SUBLANES - 1, LANES - 1),
                ];
                let lo = *corners.iter().min().expect("four corners");
                let hi = *corners.iter().max().expect("four corners");
                Some((lo, hi + self.size))
            }
            Some(m) => {
                let (mut lo, mut hi) = (i64::MAX, i64::MIN);
                for s in 0..SUBLANES {
                    let row = &m[s * LANES..(s + 1) * LANES];
                    // The first and last active lanes bound the row (addresses are monotonic
                    // in the lane index).
                    let (Some(first), Some(last)) =
                        (row.iter().position(|x| *x), row.iter().rposition(|x| *x))
                    else {
                        continue;
                    };
                    for l in [first, last] {
                        let a = self.addr(s, l);
                        lo = lo.min(a);
                        hi = hi.max(a + self.size);
                    }
                }
                (lo <= hi).then_some((lo, hi))
            }
        }
    }

    /// Sublane `s` as one contiguous row of `bytes`, when the lanes are dense and the whole
    /// row lies inside.
    #[inline]
    fn row(&self, s: usize, len: usize) -> Option<std::ops::Range<usize>> {
        let start = self.base + s as i64 * self.sub;
        let end = start + LANES as i64 * self.size;
        (self.dense && start >= 0 && end as u64 <= len as u64)
            .then_some(start as usize..end as usize)
    }
}

#[inline]
fn load_elem(bytes: &[u8], a: usize, fmt: MemFmt) -> u32 {
    match fmt {
        MemFmt::W32 => u32::from_le_bytes([bytes[a], bytes[a + 1], bytes[a + 2], bytes[a + 3]]),
        MemFmt::Bf16 => bf16_bits_to_f32(u16::from_le_bytes([bytes[a], bytes[a + 1]])).to_bits(),
        MemFmt::F16 => f16_bits_to_f32(u16::from_le_bytes([bytes[a], bytes[a + 1]])).to_bits(),
        MemFmt::I64 => u32::from_le_bytes([bytes[a], bytes[a + 1], bytes[a + 2], bytes[a + 3]]),
        MemFmt::U8 => bytes[a] as u32,
    }
}

#[inline]
fn store_elem(bytes: &mut [u8], a: usize, fmt: MemFmt, v: u32) {
    match fmt {
        MemFmt::W32 => bytes[a..a + 4].copy_from_slice(&v.to_le_bytes()),
        MemFmt::Bf16 => {
            bytes[a..a + 2].copy_from_slice(&f32_to_bf16_bits(f32::from_bits(v)).to_le_bytes())
        }
        MemFmt::F16 => {
            bytes[a..a + 2].copy_from_slice(&f32_to_f16_bits(f32::from_bits(v)).to_le_bytes())
        }
        MemFmt::I64 => bytes[a..a + 8].copy_from_slice(&(v as i32 as i64).to_le_bytes()),
        MemFmt::U8 => bytes[a] = v as u8,
    }
}

crate::simd_variants! {
/// Loads the active elements of `acc` into `out` (inactive lanes are zero).
fn load_lanes(
    bytes: &[u8],
    acc: &Access,
    fmt: MemFmt,
    mask: Option<&MaskData>,
    out: &mut VregData,
) {
    for s in 0..SUBLANES {
        let o = &mut out[s * LANES..(s + 1) * LANES];
        let m = mask.map(|m| &m[s * LANES..(s + 1) * LANES]);
        match (acc.row(s, bytes.len()), fmt) {
            (Some(r), MemFmt::Bf16) => lanes::load_bf16_row(&bytes[r], o),
            (Some(r), MemFmt::W32) => lanes::load_w32_row(&bytes[r], o),
            _ => {
                for (l, x) in o.iter_mut().enumerate() {
                    *x = if m.is_none_or(|m| m[l]) {
                        load_elem(bytes, acc.addr(s, l) as usize, fmt)
                    } else {
                        0
                    };
                }
                continue;
            }
        }
        if let Some(m) = m {
            for (x, k) in o.iter_mut().zip(m) {
                *x = if *k { *x } else { 0 };
            }
        }
    }
}
}

crate::simd_variants! {
/// Stores the active elements of `v` at `acc`.
fn store_lanes(bytes: &mut [u8], acc: &Access, fmt: MemFmt, mask: Option<&MaskData>, v: &VregData) {
    for s in 0..SUBLANES {
        let vals = &v[s * LANES..(s + 1) * LANES];
        let m = mask.map(|m| &m[s * LANES..(s + 1) * LANES]);
        let len = bytes.len();
        match (acc.row(s, len), fmt, m) {
            (Some(r), MemFmt::Bf16, None) => lanes::store_bf16_row(vals, &mut bytes[r]),
            (Some(r), MemFmt::W32, None) => lanes::store_w32_row(vals, &mut bytes[r]),
            (Some(r), MemFmt::Bf16, Some(m)) => {
                for ((d, x), k) in bytes[r].as_chunks_mut::<2>().0.iter_mut().zip(vals).zip(m) {
                    let new = lanes::bf16_bits(*x).to_le_bytes();
                    *d = if *k { new } else { *d };
                }
            }
            _ => {
                for (l, x) in vals.iter().enumerate() {
                    if m.is_none_or(|m| m[l]) {
                        store_elem(bytes, acc.addr(s, l) as usize, fmt, *x);
                    }
                }
            }
        }
    }
}
}

impl Core {
    #[inline]
    fn opt_s(&self, r: Option<SReg>) -> (Option<i64>, u64) {
        match r {
            Some(r) => (Some(self.s(r) as i32 as i64), self.sready(r)),
            None => (None, 0),
        }
    }

    fn access(
        &self,
        fmt: MemFmt,
        addr: Addr,
        sub: Option<i64>,
        lane: Option<i64>,
    ) -> Result<Access, FaultKind> {
        let size = fmt.bytes() as i64;
        let base = self.s(addr.base) as i32 as i64 + addr.offset as i64;
        let lane = lane.unwrap_or(size);
        let sub = sub.unwrap_or(size * LANES as i64);
        for x in [base, sub, lane] {
            if x % size != 0 {
                return Err(FaultKind::Misaligned {
                    region: "VMEM",
                    addr: x,
                    align: size as u32,
                });
            }
        }
        Ok(Access {
            base,
            sub,
            lane,
            size,
            dense: lane == size,
        })
    }

    fn check_vmem(&self, access: &str, lo: i64, hi: i64) -> Result<Range, FaultKind> {
        if !self.vmem.contains(lo, hi) {
            return Err(FaultKind::OutOfBounds {
                access: if access == "read" { "read" } else { "write" },
                region: "VMEM".into(),
                start: lo,
                end: hi,
                size: self.vmem.size(),
            });
        }
        Ok(Range::span(MemKey::Vmem, lo as u64, hi as u64))
    }

    /// `vld`, `vst` and `vgather`.
    pub(crate) fn exec_vmem(
        &mut self,
        instr: &Instr,
        env: &Env,
        rec: &mut Recorder,
    ) -> Result<Flow, FaultKind> {
        let c = &env.preset.costs;
        let pc = self.pc;
        let f = env.functional;
        match *instr {
            Instr::VLoad {
                fmt,
                dst,
                addr,
                sub_stride,
                lane_stride,
                mask,
            } => {
                let (sub, st) = self.opt_s(sub_stride);
                let (lane, lt) = self.opt_s(lane_stride);
                let acc = self.access(fmt, addr, sub, lane)?;
                let mut ready = self
                    .sready(addr.base)
                    .max(st)
                    .max(lt)
                    .max(mask.map_or(0, |m| self.mready(m)));
                let extent = acc.extent(mask.map(|m| &*self.mregs[m.index() as usize]));
                if let Some((lo, hi)) = extent {
                    let r = self.check_vmem("read", lo, hi)?;
                    ready = self.t.write_hazard(&r, ready.max(self.t.front));
                    self.t.check_race(&r, false, ready)?;
                }
                let occ = if acc.dense {
                    c.vld_occupancy
                } else {
                    c.vld_strided_occupancy
                };
                let start = self.t.occupy(SyncUnit::of(instr.unit()), ready, occ);
                let at = start + c.vld_latency as u64;
                // The data only when computing it (timing-only runs skip the 4 KiB register).
                if f {
                    let mut out = self.take_vtmp();
                    if let Some((lo, hi)) = extent {
                        let m = mask.map(|m| &*self.mregs[m.index() as usize]);
                        let bytes = self.vmem.read(lo as usize, hi as usize);
                        load_lanes(bytes, &acc, fmt, m, &mut out);
                    } else {
                        out.fill(0);
                    }
                    self.put_vreg(dst, out);
                }
                self.t.set_ready(Reg::V, dst.index() as usize, at);
                rec.unit(instr.unit(), pc, start, start + occ as u64);
            }
            Instr::VStore {
                fmt,
                src,
                addr,
                sub_stride,
                lane_stride,
                mask,
            } => {
                let (sub, st) = self.opt_s(sub_stride);
                let (lane, lt) = self.opt_s(lane_stride);
                let acc = self.access(fmt, addr, sub, lane)?;
                let mut ready = self.sready(addr.base).max(st).max(lt).max(self.vready(src));
                ready = ready.max(mask.map_or(0, |m| self.mready(m)));
                if let Some((lo, hi)) = acc.extent(mask.map(|m| &*self.mregs[m.index() as usize])) {
                    let r = self.check_vmem("write", lo, hi)?;
                    ready = self.t.overwrite_hazard(&r, ready.max(self.t.front));
                    self.t.check_race(&r, true, ready)?;
                    if f {
                        let m = mask.map(|m| &*self.mregs[m.index() as usize]);
                        let v = &self.vregs[src.index() as usize];
                        let bytes = self.vmem.bytes_for(lo as usize, hi as usize);
                        store_lanes(bytes, &acc, fmt, m, v);
                    }
                }
                let occ = if acc.dense {
                    c.vst_occupancy
                } else {
                    c.vld_strided_occupancy
                };
                let start = self.t.occupy(SyncUnit::of(instr.unit()), ready, occ);
                rec.unit(instr.unit(), pc, start, start + occ as u64);
            }
            Instr::VGather {
                fmt,
                dst,
                addr,
                index,
                mask,
            } => {
                let acc = self.access(fmt, addr, None, None)?;
                let mut ready = self
                    .sready(addr.base)
                    .max(self.vready(index))
                    .max(mask.map_or(0, |m| self.mready(m)));
                let active =
                    |core: &Core, i: usize| mask.is_none_or(|m| core.mregs[m.index() as usize][i]);
                let (mut lo, mut hi) = (i64::MAX, i64::MIN);
                for (i, x) in self.vregs[index.index() as usize].iter().enumerate() {
                    if active(self, i) {
                        let a = acc.base + (*x as i32 as i64) * acc.size;
                        lo = lo.min(a);
                        hi = hi.max(a + acc.size);
                    }
                }
                let mut out = self.take_vtmp();
                out.fill(0);
                if lo <= hi {
                    let r = self.check_vmem("read", lo, hi)?;
                    ready = self.t.write_hazard(&r, ready.max(self.t.front));
                    self.t.check_race(&r, false, ready)?;
                    if f {
                        let bytes = self.vmem.read(lo as usize, hi as usize);
                        let idx = &self.vregs[index.index() as usize];
                        for (i, x) in idx.iter().enumerate() {
                            if mask.is_none_or(|m| self.mregs[m.index() as usize][i]) {
                                let a = acc.base + (*x as i32 as i64) * acc.size;
                                out[i] = load_elem(bytes, a as usize, fmt);
                            }
                        }
                    }
                }
                let start =
                    self.t
                        .occupy(SyncUnit::of(instr.unit()), ready, c.xlu_gather_occupancy);
                if f {
                    self.put_vreg(dst, out);
                } else {
                    self.vtmp = Some(out);
                }
                self.t.set_ready(
                    Reg::V,
                    dst.index() as usize,
                    start + c.xlu_permute_latency as u64,
                );
                rec.unit(
                    instr.unit(),
                    pc,
                    start,
                    start + c.xlu_gather_occupancy as u64,
                );
            }
            _ => unreachable!("exec_vmem called with a non-memory vector instruction"),
        }
        Ok(Flow::Next)
    }
}
