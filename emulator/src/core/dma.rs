//! DMA: strided, multi-dimensional copies between HBM, VMEM and SMEM, and remote pushes to
//! other chips.
//!
//! A DMA runs on the first free DMA engine of the core. Transfers touching HBM queue on the
//! chip's HBM, a shared-bandwidth FIFO server: each transfer holds it for its effective bytes
//! divided by the bytes per cycle, then completes after the HBM latency. Effective bytes count
//! every contiguous run on the HBM side as at least one burst (`dma_burst_bytes`), and a source
//! dimension of stride 0 (replication) is read once. On completion the DMA adds the bytes moved
//! to its semaphore.
//!
//! Functionally the copy happens when the DMA is issued; a program that touches the bytes
//! before the DMA completes is racing, and the executor reports it (see
//! [`super::timing::Timing::check_race`]), so the early copy is never observable.

use tpuemu_isa::dma::{DmaDescriptor, MAX_DMA_DIMS};
use tpuemu_isa::ops::Space;
use tpuemu_isa::{DmaShape, Instr, MemRef};

use super::timing::{Inflight, MemKey, Range, Timing};
use super::{ArgVal, ChipShared, Core, Env, Flow, Outgoing};
use crate::fault::FaultKind;
use crate::memory::LocalMem;
use crate::recorder::Recorder;

/// A push to another chip, delivered by the launcher over the ICI model.
#[derive(Debug)]
pub(crate) struct RemoteWrite {
    pub pc: u32,
    pub from_chip: u32,
    pub to_chip: u32,
    pub core: u32,
    pub dst: MemKey,
    pub dst_base: i64,
    pub dst_range: Range,
    pub desc: DmaDescriptor,
    /// The bytes in element order (empty when timing only).
    pub data: Vec<u8>,
    pub bytes: u64,
    pub send_sem: u8,
    pub recv_sem: u8,
    /// Cycle at which the sending engine starts.
    pub start: u64,
}

/// The byte range `[lo, hi)` touched by one side of a descriptor, or `None` when it moves
/// nothing.
pub(super) fn extent(base: i64, desc: &DmaDescriptor, src: bool) -> Option<(i64, i64)> {
    if desc.dims.iter().any(|d| d.count == 0) {
        return None;
    }
    let (mut lo, mut hi) = (base, base);
    for d in &desc.dims {
        let stride = if src { d.src_stride } else { d.dst_stride } as i64;
        let span = (d.count as i64 - 1) * stride;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    Some((lo, hi + desc.elem_bytes as i64))
}

/// Timing only (no values): an address computed from data (a gather's index, read from memory
/// that holds no values) is unknown, so a side whose extent falls outside its region is moved
/// inside it, keeping its length, strides and alignment within the region's size: the transfer is
/// timed as the same access at an address that exists. With values, the bounds are checked and a
/// stray address faults. Computed in 128 bits (registers may hold anything); a side longer than
/// its region is left where it is, for the bounds check to report.
fn fit_unknown_address(side: &mut Side, desc: &DmaDescriptor, src: bool) {
    let Some((lo, hi)) = crate::bounds::extent(side.base, desc, src) else {
        return;
    };
    let size = side.size as i128;
    let span = hi - lo;
    if (lo >= 0 && hi <= size) || span > size {
        return;
    }
    let room = size - span + 1;
    let new_lo = lo.rem_euclid(room) & !(ALIGN_KEEP as i128 - 1);
    // |new_lo - lo| <= size + span, within i64 since span <= size.
    side.base += (new_lo - lo) as i64;
}

/// Places one side of a DMA (moving an unknown address in timing-only mode), checks it against
/// its region ([`crate::bounds::dma_side`]) and returns its extent.
fn place_side(
    side: &mut Side,
    desc: &DmaDescriptor,
    src: bool,
    functional: bool,
) -> Result<Option<(i64, i64)>, FaultKind> {
    if !functional {
        fit_unknown_address(side, desc, src);
    }
    crate::bounds::dma_side(desc, side.base, side.size, src, || side.region.name())?;
    Ok(extent(side.base, desc, src))
}

/// The alignment a moved timing-only address keeps (a VMEM row and every DMA alignment divide it).
const ALIGN_KEEP: i64 = 512;

/// Length of the contiguous run of one side: the element, extended by inner dimensions whose
/// stride continues it. Returns (run bytes, number of inner dims merged).
fn run_len(desc: &DmaDescriptor, src: bool) -> (u64, usize) {
    let mut run = desc.elem_bytes as u64;
    let mut merged = 0;
    for d in desc.dims.iter().rev() {
        let stride = if src { d.src_stride } else { d.dst_stride } as i64;
        if stride == run as i64 || d.count == 1 {
            run *= d.count as u64;
            merged += 1;
        } else {
            break;
        }
    }
    (run, merged)
}

/// HBM bytes a side costs: runs rounded up to bursts; replicated (stride-0) source dims once.
fn effective_bytes(desc: &DmaDescriptor, src: bool, burst: u64) -> u64 {
    let (run, merged) = run_len(desc, src);
    let outer = &desc.dims[..desc.dims.len() - merged];
    let runs: u64 = outer
        .iter()
        .filter(|d| !(src && d.src_stride == 0))
        .map(|d| d.count as u64)
        .product();
    runs * run.max(burst)
}

/// Calls `f(src_offset, dst_offset, len)` for every run both sides see as contiguous.
pub(super) fn for_each_run(desc: &DmaDescriptor, mut f: impl FnMut(i64, i64, usize)) {
    // Both sides are contiguous over the inner dims merged on both.
    let merged = run_len(desc, true).1.min(run_len(desc, false).1);
    let inner = &desc.dims[desc.dims.len() - merged..];
    let run = inner
        .iter()
        .fold(desc.elem_bytes as u64, |r, d| r * d.count as u64);
    let outer = &desc.dims[..desc.dims.len() - merged];
    if outer.iter().any(|d| d.count == 0) {
        return;
    }
    let Some((last, higher)) = outer.split_last() else {
        f(0, 0, run as usize);
        return;
    };
    // The innermost outer dimension in a tight loop; the ones above it as an odometer.
    let (ss, ds) = (last.src_stride as i64, last.dst_stride as i64);
    let mut idx = [0u32; MAX_DMA_DIMS];
    loop {
        let (mut so, mut d_o) = (0i64, 0i64);
        for (i, d) in higher.iter().enumerate() {
            so += idx[i] as i64 * d.src_stride as i64;
            d_o += idx[i] as i64 * d.dst_stride as i64;
        }
        for _ in 0..last.count {
            f(so, d_o, run as usize);
            so += ss;
            d_o += ds;
        }
        let mut i = higher.len();
        loop {
            if i == 0 {
                return;
            }
            i -= 1;
            idx[i] += 1;
            if idx[i] < higher[i].count {
                break;
            }
            idx[i] = 0;
        }
    }
}

/// A resolved side of a DMA.
pub(super) struct Side {
    pub(super) mem: MemKey,
    pub(super) base: i64,
    size: u64,
    region: Region,
}

/// What a side of a DMA addresses, named only when a fault needs the words.
#[derive(Clone, Copy)]
enum Region {
    Vmem,
    Smem,
    HbmArg { slot: usize, id: u64 },
    PeerVmem(u32),
    PeerSmem(u32),
}

impl Region {
    fn name(self) -> String {
        match self {
            Region::Vmem => "VMEM".into(),
            Region::Smem => "SMEM".into(),
            Region::HbmArg { slot, id } => format!("HBM argument a{slot} (buffer {id})"),
            Region::PeerVmem(to) => format!("VMEM of chip {to}"),
            Region::PeerSmem(to) => format!("SMEM of chip {to}"),
        }
    }
}

impl Core {
    fn side(&self, r: &MemRef, args: &[ArgVal]) -> Result<Side, FaultKind> {
        let base = self.s(r.addr) as u64 as i64;
        Ok(match r.space {
            Space::Vmem => Side {
                mem: MemKey::Vmem,
                base,
                size: self.vmem.size(),
                region: Region::Vmem,
            },
            Space::Smem => Side {
                mem: MemKey::Smem,
                base,
                size: self.smem.size(),
                region: Region::Smem,
            },
            Space::Hbm => {
                let slot = r.slot.map_or(0, |s| s.index()) as usize;
                match args.get(slot) {
                    Some(ArgVal::Buffer { id, size }) => Side {
                        mem: MemKey::Hbm(*id),
                        base,
                        size: *size,
                        region: Region::HbmArg { slot, id: *id },
                    },
                    Some(ArgVal::Scalar(_)) => {
                        return Err(FaultKind::Invalid(format!(
                            "argument a{slot} is a scalar, not a buffer"
                        )));
                    }
                    None => {
                        return Err(FaultKind::Invalid(format!(
                            "argument a{slot} does not exist"
                        )));
                    }
                }
            }
        })
    }

    fn descriptor(&mut self, shape: DmaShape) -> Result<DmaDescriptor, FaultKind> {
        match shape {
            DmaShape::Len(r) => Ok(DmaDescriptor::contiguous(self.s(r))),
            DmaShape::Desc(r) => {
                let a = self.s(r) as i64;
                let word = |core: &mut Core, i: i64| -> Result<u32, FaultKind> {
                    let at = a + 4 * i;
                    if a % 4 != 0 {
                        return Err(FaultKind::Misaligned {
                            region: "SMEM",
                            addr: a,
                            align: 4,
                        });
                    }
                    if !core.smem.contains(at, at + 4) {
                        return Err(FaultKind::OutOfBounds {
                            access: "read",
                            region: "SMEM (DMA descriptor)".into(),
                            start: at,
                            end: at + 4,
                            size: core.smem.size(),
                        });
                    }
                    Ok(core.smem.read_u32(at as usize))
                };
                let nd = word(self, 0)?.min(MAX_DMA_DIMS as u32 + 1);
                let n = 2 + 3 * nd as usize;
                let mut words = [0u32; 2 + 3 * (MAX_DMA_DIMS + 1)];
                for (i, w) in words.iter_mut().enumerate().take(n) {
                    *w = word(self, i as i64)?;
                }
                DmaDescriptor::from_words(&words[..n])
                    .map_err(|e| FaultKind::Invalid(e.to_string()))
            }
        }
    }

    pub(crate) fn exec_dma(
        &mut self,
        instr: &Instr,
        env: &Env,
        chip: &mut ChipShared,
        out: &mut Vec<Outgoing>,
        rec: &mut Recorder,
    ) -> Result<Flow, FaultKind> {
        let Instr::Dma {
            dst,
            src,
            shape,
            sem,
            remote,
        } = *instr
        else {
            unreachable!("exec_dma called with a non-DMA instruction")
        };
        let c = &env.preset.costs;
        let size_reg = match shape {
            DmaShape::Len(r) | DmaShape::Desc(r) => r,
        };
        let mut issue = self
            .t
            .front
            .max(self.sready(dst.addr))
            .max(self.sready(src.addr))
            .max(self.sready(size_reg));
        if let Some(r) = remote {
            issue = issue.max(self.sready(r.chip));
        }
        let issue = Timing::queue_slot(&mut self.t.dma_queue, c.dma_queue_depth, issue);
        let desc = self.descriptor(shape)?;
        let bytes = desc.bytes();
        if env.functional {
            self.stats.work = self
                .stats
                .work
                .saturating_add(bytes / crate::limits::DMA_BYTES_PER_UNIT);
        }
        let mut s = self.side(&src, env.args)?;
        let src_ext = place_side(&mut s, &desc, true, env.functional)?;
        let src_range = check(&s, src_ext, "read", &desc, true)?;

        // The destination: here, or on another chip for remote DMA.
        let (d, remote_to) = match remote {
            None => (self.side(&dst, env.args)?, None),
            Some(r) => {
                let to = self.s(r.chip);
                let peer = env.peers.get(to).ok_or_else(|| {
                    FaultKind::Invalid(format!(
                        "remote DMA to chip {to}, which is not part of this launch"
                    ))
                })?;
                let side = match dst.space {
                    Space::Hbm => self.side(&dst, peer)?,
                    Space::Vmem => Side {
                        mem: MemKey::Vmem,
                        base: self.s(dst.addr) as i64,
                        size: env.preset.vmem_bytes,
                        region: Region::PeerVmem(to),
                    },
                    Space::Smem => Side {
                        mem: MemKey::Smem,
                        base: self.s(dst.addr) as i64,
                        size: env.preset.smem_bytes,
                        region: Region::PeerSmem(to),
                    },
                };
                (side, Some((to, r.recv_sem)))
            }
        };
        let mut d = d;
        let dst_ext = place_side(&mut d, &desc, false, env.functional)?;
        let dst_range = check(&d, dst_ext, "write", &desc, false)?;

        // Hazards with pending matrix-unit writes, then races with DMAs in flight.
        let mut start_min = issue + c.dma_issue as u64;
        if let Some(r) = &src_range {
            start_min = self.t.write_hazard(r, start_min);
        }
        if remote_to.is_none()
            && let Some(r) = &dst_range
        {
            start_min = self.t.overwrite_hazard(r, start_min);
        }
        if let Some(r) = &src_range {
            self.t.check_race(r, false, start_min)?;
        }
        if remote_to.is_none()
            && let Some(r) = &dst_range
        {
            self.t.check_race(r, true, start_min)?;
        }

        // Engine and bandwidth.
        let (e, free) = self
            .t
            .dma_free
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|(i, t)| (*t, *i))
            .expect("at least one engine");
        let start = start_min.max(free);
        self.t.dma_queue.push_back(start);
        let hbm_src = matches!(s.mem, MemKey::Hbm(_));
        let hbm_dst = matches!(d.mem, MemKey::Hbm(_)) && remote_to.is_none();
        let burst = c.dma_burst_bytes as u64;
        let (xfer_end, complete) = if remote_to.is_some() {
            // Reading the source; the links are timed by the launcher.
            let eff = if hbm_src {
                effective_bytes(&desc, true, burst)
            } else {
                0
            };
            let hs = start.max(chip.hbm_free);
            let dur = (eff as f64 / env.preset.hbm_bytes_per_cycle()).ceil() as u64;
            chip.hbm_free = if eff > 0 { hs + dur } else { chip.hbm_free };
            self.stats.hbm_bytes += eff;
            self.stats.ici_bytes += bytes;
            (if eff > 0 { hs + dur } else { start }, 0)
        } else if hbm_src || hbm_dst {
            let eff = if hbm_src {
                effective_bytes(&desc, true, burst)
            } else {
                0
            } + if hbm_dst {
                effective_bytes(&desc, false, burst)
            } else {
                0
            };
            let hs = start.max(chip.hbm_free);
            let dur = (eff as f64 / env.preset.hbm_bytes_per_cycle()).ceil() as u64;
            chip.hbm_free = hs + dur;
            self.stats.hbm_bytes += eff;
            (
                hs + dur,
                hs + dur + env.preset.ns_to_cycles(env.preset.hbm_latency_ns),
            )
        } else {
            let end = start + bytes.div_ceil(c.dma_local_bytes_per_cycle as u64);
            (end, end)
        };
        self.t.dma_free[e] = xfer_end;
        self.t.dma_busy[e] += xfer_end - start;
        self.t.front = issue + c.dma_issue as u64;
        rec.dma(
            e as u32,
            dma_name(&s.mem, &d.mem, remote_to.is_some()),
            start,
            xfer_end.max(start),
            bytes,
        );

        // Data.
        let functional = env.functional && bytes > 0;
        // Timing only: scalar memory still receives what a read gives here (zeros), so the
        // scalar unit's loads of indices, counts and descriptors see defined values and the
        // program takes the path it takes on zeros.
        let smem_zeros = !env.functional && bytes > 0 && matches!(d.mem, MemKey::Smem);
        match remote_to {
            None => {
                if functional {
                    self.copy_local(chip, &s, &d, &desc);
                } else if smem_zeros {
                    self.zero_smem(&d, &desc);
                }
                self.sems[sem.index() as usize].add_at(complete, bytes as i64);
                self.t.async_end = self.t.async_end.max(complete);
                if let (Some(sr), Some(dr)) = (src_range, dst_range) {
                    self.t.add_inflight(Inflight {
                        pc: self.pc,
                        src: sr,
                        dst: dr,
                        complete,
                    });
                }
            }
            Some((to, recv)) => {
                self.t.async_end = self.t.async_end.max(xfer_end);
                if let Some(sr) = src_range {
                    // The source is being read until the bytes have left: writing it races,
                    // reading it (another push of the same bytes) does not.
                    self.t.add_inflight(Inflight {
                        pc: self.pc,
                        src: sr,
                        dst: Range::span(sr.mem, 0, 0),
                        complete: xfer_end,
                    });
                }
                let data = if functional {
                    self.gather(chip, &s, &desc, bytes as usize)
                } else if smem_zeros {
                    vec![0u8; bytes as usize]
                } else {
                    Vec::new()
                };
                out.push(Outgoing::Write(Box::new(RemoteWrite {
                    pc: self.pc,
                    from_chip: env.place.chip,
                    to_chip: to,
                    core: env.place.core,
                    dst: d.mem,
                    dst_base: d.base,
                    dst_range: dst_range.unwrap_or(Range::span(d.mem, 0, 0)),
                    desc,
                    data,
                    bytes,
                    send_sem: sem.index(),
                    recv_sem: recv.index(),
                    start: xfer_end,
                })));
            }
        }
        Ok(Flow::Next)
    }
}

/// Writes a remote DMA's bytes into the destination core's memory.
pub(crate) fn deliver(
    w: &RemoteWrite,
    vmem: &mut super::deferred::Vmem,
    smem: &mut LocalMem,
    chip: &mut ChipShared,
) {
    if w.data.is_empty() {
        return;
    }
    let mut at = 0usize;
    for_each_run(&w.desc, |_, d_o, len| {
        let pos = w.dst_base + d_o;
        let src = &w.data[at..at + len];
        match w.dst {
            MemKey::Vmem => vmem.bytes_for(pos as usize, pos as usize + len)
                [pos as usize..pos as usize + len]
                .copy_from_slice(src),
            MemKey::Smem => smem.write(pos as usize, src),
            MemKey::Hbm(id) => chip
                .hbm
                .buffer_mut(id)
                .expect("argument buffers are live")
                .write(pos as u64, src),
        }
        at += len;
    });
}

fn check(
    side: &Side,
    ext: Option<(i64, i64)>,
    access: &'static str,
    desc: &DmaDescriptor,
    src: bool,
) -> Result<Option<Range>, FaultKind> {
    let Some((lo, hi)) = ext else { return Ok(None) };
    if lo < 0 || hi as u64 > side.size {
        return Err(FaultKind::OutOfBounds {
            access,
            region: side.region.name(),
            start: lo,
            end: hi,
            size: side.size,
        });
    }
    // A set of equally spaced rows is tracked exactly; anything else by its bounds.
    let (run, merged) = run_len(desc, src);
    let outer = &desc.dims[..desc.dims.len() - merged];
    let stride = outer
        .first()
        .map(|d| if src { d.src_stride } else { d.dst_stride } as i64);
    Ok(Some(match (outer.len(), stride) {
        (0, _) => Range::span(side.mem, lo as u64, hi as u64),
        (1, Some(st)) if st > 0 => {
            Range::rows(side.mem, lo as u64, outer[0].count as u64, run, st as u64)
        }
        _ => Range::span(side.mem, lo as u64, hi as u64),
    }))
}

fn dma_name(src: &MemKey, dst: &MemKey, remote: bool) -> &'static str {
    let k = |m: &MemKey| match m {
        MemKey::Vmem => 0,
        MemKey::Smem => 1,
        MemKey::Hbm(_) => 2,
    };
    if remote {
        return "rdma";
    }
    match (k(src), k(dst)) {
        (2, 0) => "dma hbm->vmem",
        (0, 2) => "dma vmem->hbm",
        (2, 2) => "dma hbm->hbm",
        (2, 1) => "dma hbm->smem",
        (1, 2) => "dma smem->hbm",
        (0, 0) => "dma vmem->vmem",
        _ => "dma local",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuemu_isa::dma::DmaDim;

    fn d(elem: u32, dims: &[(u32, i32, i32)]) -> DmaDescriptor {
        DmaDescriptor {
            elem_bytes: elem,
            dims: dims
                .iter()
                .map(|&(count, src_stride, dst_stride)| DmaDim {
                    count,
                    src_stride,
                    dst_stride,
                })
                .collect(),
        }
    }

    #[test]
    fn runs_merge_contiguous_dims() {
        // 4 rows of 8 f32, source rows 64 bytes apart, destination dense.
        let desc = d(4, &[(4, 64, 32), (8, 4, 4)]);
        let mut runs = Vec::new();
        for_each_run(&desc, |s, t, n| runs.push((s, t, n)));
        assert_eq!(
            runs,
            vec![(0, 0, 32), (64, 32, 32), (128, 64, 32), (192, 96, 32)]
        );
        assert_eq!(effective_bytes(&desc, true, 32), 128);
        assert_eq!(effective_bytes(&desc, true, 64), 256);
    }

    #[test]
    fn extent_handles_negative_strides() {
        let desc = d(4, &[(3, -4, 4)]);
        assert_eq!(extent(100, &desc, true), Some((92, 104)));
        assert_eq!(extent(100, &desc, false), Some((100, 112)));
        assert_eq!(extent(0, &d(4, &[(0, 4, 4)]), true), None);
    }

    #[test]
    fn replicated_source_is_read_once() {
        // Broadcast one 512-byte row to 16 rows.
        let desc = d(512, &[(16, 0, 512)]);
        assert_eq!(effective_bytes(&desc, true, 32), 512);
        assert_eq!(effective_bytes(&desc, false, 32), 16 * 512);
    }
}
