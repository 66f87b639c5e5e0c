//! The vector unit: VMEM loads and stores, elementwise math, masks, and the cross-lane unit.

use tpuemu_isa::ops::{Axis, IotaKind, MaskOp, MemFmt};
use tpuemu_isa::reg::{LANES, SUBLANES, VREG_ELEMS};
use tpuemu_isa::{Addr, Instr, MReg, SReg, Unit, VReg, VSrc};

use super::state::{MaskData, VregData};
use super::timing::{MemKey, Range, SyncUnit};
use super::{Core, Env, Flow};
use crate::fault::FaultKind;
use crate::numerics::float::{
    bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits,
};
use crate::numerics::vmath;
use crate::recorder::Recorder;

/// Where the elements of a strided vector access are.
struct Access {
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
                    for l in 0..LANES {
                        if m[s * LANES + l] {
                            let a = self.addr(s, l);
                            lo = lo.min(a);
                            hi = hi.max(a + self.size);
                        }
                    }
                }
                (lo <= hi).then_some((lo, hi))
            }
        }
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

/// A register of zeros (loads that read nothing, and timing-only runs).
static ZERO_VREG: VregData = [0; VREG_ELEMS];

impl Core {
    #[inline]
    fn vready(&self, v: VReg) -> u64 {
        self.t.vreg[v.index() as usize]
    }

    #[inline]
    fn mready(&self, m: MReg) -> u64 {
        self.t.mreg[m.index() as usize]
    }

    #[inline]
    fn opt_s(&self, r: Option<SReg>) -> (Option<i64>, u64) {
        match r {
            Some(r) => (Some(self.s(r) as i32 as i64), self.sready(r)),
            None => (None, 0),
        }
    }

    /// Value getter and ready cycle of a vector operand.
    fn vsrc(&self, b: VSrc) -> (VSrcVal<'_>, u64) {
        match b {
            VSrc::V(v) => (
                VSrcVal::Reg(&self.vregs[v.index() as usize]),
                self.vready(v),
            ),
            VSrc::S(s) => (VSrcVal::Splat(self.s(s)), self.sready(s)),
            VSrc::Imm(bits) => (VSrcVal::Splat(bits), 0),
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

    /// Writes a vector result ready at `at`.
    #[inline]
    fn vresult(&mut self, dst: VReg, data: &VregData, at: u64, functional: bool) {
        if functional {
            self.vregs[dst.index() as usize] = *data;
            self.vector_dirty = true;
        }
        self.t.vreg[dst.index() as usize] = at;
    }

    pub(crate) fn exec_vector(
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
                let m = mask.map(|m| self.mregs[m.index() as usize]);
                let mut ready = self
                    .sready(addr.base)
                    .max(st)
                    .max(lt)
                    .max(mask.map_or(0, |m| self.mready(m)));
                let extent = acc.extent(m.as_ref());
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
                let start = self.t.occupy(SyncUnit::VLoad, ready, occ);
                let at = start + c.vld_latency as u64;
                // The data only when computing it (timing-only runs skip the 4 KiB register).
                if f && extent.is_some() {
                    let mut out = [0u32; VREG_ELEMS];
                    let bytes = self.vmem.bytes();
                    for s in 0..SUBLANES {
                        for l in 0..LANES {
                            if m.as_ref().is_none_or(|m| m[s * LANES + l]) {
                                out[s * LANES + l] = load_elem(bytes, acc.addr(s, l) as usize, fmt);
                            }
                        }
                    }
                    self.vresult(dst, &out, at, f);
                } else {
                    self.vresult(dst, &ZERO_VREG, at, f);
                }
                rec.unit(Unit::VLoad, pc, start, start + occ as u64);
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
                let m = mask.map(|m| self.mregs[m.index() as usize]);
                let mut ready = self.sready(addr.base).max(st).max(lt).max(self.vready(src));
                ready = ready.max(mask.map_or(0, |m| self.mready(m)));
                if let Some((lo, hi)) = acc.extent(m.as_ref()) {
                    let r = self.check_vmem("write", lo, hi)?;
                    ready = self.t.overwrite_hazard(&r, ready.max(self.t.front));
                    self.t.check_race(&r, true, ready)?;
                    if f {
                        let v = self.vregs[src.index() as usize];
                        let bytes = self.vmem.bytes();
                        for s in 0..SUBLANES {
                            for l in 0..LANES {
                                if m.as_ref().is_none_or(|m| m[s * LANES + l]) {
                                    store_elem(
                                        bytes,
                                        acc.addr(s, l) as usize,
                                        fmt,
                                        v[s * LANES + l],
                                    );
                                }
                            }
                        }
                    }
                }
                let occ = if acc.dense {
                    c.vst_occupancy
                } else {
                    c.vld_strided_occupancy
                };
                let start = self.t.occupy(SyncUnit::VStore, ready, occ);
                rec.unit(Unit::VStore, pc, start, start + occ as u64);
            }
            Instr::VGather {
                fmt,
                dst,
                addr,
                index,
                mask,
            } => {
                let acc = self.access(fmt, addr, None, None)?;
                let m = mask.map(|m| self.mregs[m.index() as usize]);
                let idx = self.vregs[index.index() as usize];
                let mut ready = self
                    .sready(addr.base)
                    .max(self.vready(index))
                    .max(mask.map_or(0, |m| self.mready(m)));
                let active = |i: usize| m.as_ref().is_none_or(|m| m[i]);
                let (mut lo, mut hi) = (i64::MAX, i64::MIN);
                for (i, x) in idx.iter().enumerate() {
                    if active(i) {
                        let a = acc.base + (*x as i32 as i64) * acc.size;
                        lo = lo.min(a);
                        hi = hi.max(a + acc.size);
                    }
                }
                let mut out = [0u32; VREG_ELEMS];
                if lo <= hi {
                    let r = self.check_vmem("read", lo, hi)?;
                    ready = self.t.write_hazard(&r, ready.max(self.t.front));
                    self.t.check_race(&r, false, ready)?;
                    if f {
                        let bytes = self.vmem.bytes();
                        for (i, x) in idx.iter().enumerate() {
                            if active(i) {
                                let a = acc.base + (*x as i32 as i64) * acc.size;
                                out[i] = load_elem(bytes, a as usize, fmt);
                            }
                        }
                    }
                }
                let start = self.t.occupy(SyncUnit::Xlu, ready, c.xlu_gather_occupancy);
                self.vresult(dst, &out, start + c.xlu_permute_latency as u64, f);
                rec.unit(Unit::Xlu, pc, start, start + c.xlu_gather_occupancy as u64);
            }
            _ => return self.exec_vector_compute(instr, env, rec),
        }
        Ok(Flow::Next)
    }

    /// Register-to-register vector and mask instructions.
    fn exec_vector_compute(
        &mut self,
        instr: &Instr,
        env: &Env,
        rec: &mut Recorder,
    ) -> Result<Flow, FaultKind> {
        let c = &env.preset.costs;
        let pc = self.pc;
        let f = env.functional;
        let mut out = self
            .vtmp
            .take()
            .unwrap_or_else(|| Box::new([0u32; VREG_ELEMS]));
        if f {
            out.fill(0);
        }
        // (unit, ready, occupancy, latency, destination)
        enum Dst {
            V(VReg),
            M(MReg, Box<MaskData>),
        }
        let (unit, ready, occ, lat, dst) = match *instr {
            Instr::VMov { dst, src, .. } => {
                let (b, bt) = self.vsrc(src);
                if f {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = b.get(i);
                    }
                }
                (
                    SyncUnit::Valu,
                    bt,
                    c.valu_occupancy,
                    c.valu_latency,
                    Dst::V(dst),
                )
            }
            Instr::VBin { op, ty, dst, a, b } => {
                let (bv, bt) = self.vsrc(b);
                if f {
                    let av = &self.vregs[a.index() as usize];
                    vmath::bin(op, ty, av, |i| bv.get(i), &mut out[..]);
                }
                (
                    SyncUnit::Valu,
                    self.vready(a).max(bt),
                    c.valu_occupancy,
                    c.valu_latency,
                    Dst::V(dst),
                )
            }
            Instr::VUn { op, ty, dst, a } => {
                if f {
                    vmath::un(op, ty, &self.vregs[a.index() as usize], &mut out[..]);
                }
                if op.is_transcendental() {
                    (
                        SyncUnit::Eup,
                        self.vready(a),
                        c.eup_occupancy,
                        c.eup_latency,
                        Dst::V(dst),
                    )
                } else {
                    (
                        SyncUnit::Valu,
                        self.vready(a),
                        c.valu_occupancy,
                        c.valu_latency,
                        Dst::V(dst),
                    )
                }
            }
            Instr::VCmp { op, ty, dst, a, b } => {
                let (bv, bt) = self.vsrc(b);
                let mut m = Box::new([false; VREG_ELEMS]);
                if f {
                    let av = &self.vregs[a.index() as usize];
                    for (i, o) in m.iter_mut().enumerate() {
                        *o = vmath::cmp(op, ty, av[i], bv.get(i));
                    }
                }
                (
                    SyncUnit::Valu,
                    self.vready(a).max(bt),
                    c.valu_occupancy,
                    c.valu_latency,
                    Dst::M(dst, m),
                )
            }
            Instr::VSel {
                dst, mask, a, b, ..
            } => {
                let (bv, bt) = self.vsrc(b);
                if f {
                    let (av, m) = (
                        &self.vregs[a.index() as usize],
                        &self.mregs[mask.index() as usize],
                    );
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = if m[i] { av[i] } else { bv.get(i) };
                    }
                }
                let ready = self.vready(a).max(bt).max(self.mready(mask));
                (
                    SyncUnit::Valu,
                    ready,
                    c.valu_occupancy,
                    c.valu_latency,
                    Dst::V(dst),
                )
            }
            Instr::VCvt { op, dst, a } => {
                if f {
                    for (o, x) in out.iter_mut().zip(self.vregs[a.index() as usize].iter()) {
                        *o = vmath::cvt(op, *x);
                    }
                }
                (
                    SyncUnit::Valu,
                    self.vready(a),
                    c.valu_occupancy,
                    c.valu_latency,
                    Dst::V(dst),
                )
            }
            Instr::VIota { kind, dst } => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = match kind {
                        IotaKind::Lane => (i % LANES) as u32,
                        IotaKind::Sub => (i / LANES) as u32,
                        IotaKind::Flat => i as u32,
                    };
                }
                (
                    SyncUnit::Valu,
                    0,
                    c.valu_occupancy,
                    c.valu_latency,
                    Dst::V(dst),
                )
            }
            Instr::VMask { dst, mask } => {
                for (o, b) in out.iter_mut().zip(self.mregs[mask.index() as usize].iter()) {
                    *o = *b as u32;
                }
                (
                    SyncUnit::Valu,
                    self.mready(mask),
                    c.valu_occupancy,
                    c.valu_latency,
                    Dst::V(dst),
                )
            }
            Instr::VRed {
                op,
                ty,
                axis,
                dst,
                a,
            } => {
                if f {
                    let av = &self.vregs[a.index() as usize];
                    match axis {
                        Axis::Lane => {
                            for s in 0..SUBLANES {
                                let mut row: [u32; LANES] =
                                    av[s * LANES..(s + 1) * LANES].try_into().expect("row");
                                let r = vmath::tree_reduce(op, ty, &mut row);
                                out[s * LANES..(s + 1) * LANES].fill(r);
                            }
                        }
                        Axis::Sub => {
                            for l in 0..LANES {
                                let mut col: [u32; SUBLANES] =
                                    std::array::from_fn(|s| av[s * LANES + l]);
                                let r = vmath::tree_reduce(op, ty, &mut col);
                                for s in 0..SUBLANES {
                                    out[s * LANES + l] = r;
                                }
                            }
                        }
                    }
                }
                (
                    SyncUnit::Xlu,
                    self.vready(a),
                    c.xlu_reduce_occupancy,
                    c.xlu_reduce_latency,
                    Dst::V(dst),
                )
            }
            Instr::VRot {
                axis,
                dst,
                a,
                amount,
            } => {
                let (k, kt) = self.ssrc(amount);
                if f {
                    let av = &self.vregs[a.index() as usize];
                    for s in 0..SUBLANES {
                        for l in 0..LANES {
                            let (ss, ll) = match axis {
                                Axis::Lane => (
                                    s,
                                    (l as i64 - k as i32 as i64).rem_euclid(LANES as i64) as usize,
                                ),
                                Axis::Sub => (
                                    (s as i64 - k as i32 as i64).rem_euclid(SUBLANES as i64)
                                        as usize,
                                    l,
                                ),
                            };
                            out[s * LANES + l] = av[ss * LANES + ll];
                        }
                    }
                }
                (
                    SyncUnit::Xlu,
                    self.vready(a).max(kt),
                    c.xlu_permute_occupancy,
                    c.xlu_permute_latency,
                    Dst::V(dst),
                )
            }
            Instr::VPerm {
                axis,
                dst,
                a,
                index,
            } => {
                if f {
                    let (av, iv) = (
                        &self.vregs[a.index() as usize],
                        &self.vregs[index.index() as usize],
                    );
                    for s in 0..SUBLANES {
                        for l in 0..LANES {
                            let i = iv[s * LANES + l] as usize;
                            out[s * LANES + l] = match axis {
                                Axis::Lane => av[s * LANES + i % LANES],
                                Axis::Sub => av[(i % SUBLANES) * LANES + l],
                            };
                        }
                    }
                }
                let ready = self.vready(a).max(self.vready(index));
                (
                    SyncUnit::Xlu,
                    ready,
                    c.xlu_permute_occupancy,
                    c.xlu_permute_latency,
                    Dst::V(dst),
                )
            }
            Instr::VTrans { dst, a } => {
                if f {
                    let av = &self.vregs[a.index() as usize];
                    for g in 0..LANES / SUBLANES {
                        for s in 0..SUBLANES {
                            for j in 0..SUBLANES {
                                out[j * LANES + g * SUBLANES + s] =
                                    av[s * LANES + g * SUBLANES + j];
                            }
                        }
                    }
                }
                (
                    SyncUnit::Xlu,
                    self.vready(a),
                    c.xlu_permute_occupancy,
                    c.xlu_permute_latency,
                    Dst::V(dst),
                )
            }
            Instr::MLogic { op, dst, a, b } => {
                let (ma, mb) = (
                    &self.mregs[a.index() as usize],
                    &self.mregs[b.index() as usize],
                );
                let m = Box::new(std::array::from_fn(|i| match op {
                    MaskOp::And => ma[i] && mb[i],
                    MaskOp::Or => ma[i] || mb[i],
                    MaskOp::Xor => ma[i] ^ mb[i],
                    MaskOp::AndNot => ma[i] && !mb[i],
                }));
                let ready = self.mready(a).max(self.mready(b));
                (
                    SyncUnit::Valu,
                    ready,
                    c.valu_occupancy,
                    c.valu_latency,
                    Dst::M(dst, m),
                )
            }
            Instr::MNot { dst, a } => {
                let ma = &self.mregs[a.index() as usize];
                let m = Box::new(std::array::from_fn(|i| !ma[i]));
                (
                    SyncUnit::Valu,
                    self.mready(a),
                    c.valu_occupancy,
                    c.valu_latency,
                    Dst::M(dst, m),
                )
            }
            Instr::MSet { dst, value } => {
                let m = Box::new([value; VREG_ELEMS]);
                (
                    SyncUnit::Valu,
                    0,
                    c.valu_occupancy,
                    c.valu_latency,
                    Dst::M(dst, m),
                )
            }
            _ => unreachable!("exec_vector_compute called with a non-vector instruction"),
        };
        let start = self.t.occupy(unit, ready, occ);
        let unit_name = match unit {
            SyncUnit::Eup => Unit::Eup,
            SyncUnit::Xlu => Unit::Xlu,
            _ => Unit::Valu,
        };
        rec.unit(unit_name, pc, start, start + occ as u64);
        match dst {
            Dst::V(d) => self.vresult(d, &out, start + lat as u64, f),
            Dst::M(d, m) => {
                if f {
                    self.mregs[d.index() as usize] = *m;
                    self.vector_dirty = true;
                }
                self.t.mreg[d.index() as usize] = start + lat as u64;
            }
        }
        self.vtmp = Some(out);
        Ok(Flow::Next)
    }
}

/// A vector operand's value.
enum VSrcVal<'a> {
    Reg(&'a VregData),
    Splat(u32),
}

impl VSrcVal<'_> {
    #[inline]
    fn get(&self, i: usize) -> u32 {
        match self {
            VSrcVal::Reg(r) => r[i],
            VSrcVal::Splat(v) => *v,
        }
    }
}
