//! Copies a kernel makes itself: `pltpu.make_async_copy(src, dst, sem).start()` and `.wait()`
//! (`dma_start`, `dma_wait`) between an array in HBM (`memory_space=pl.ANY`) and VMEM
//! references, on the core's DMA engines, with the kernel's semaphores
//! (`pltpu.SemaphoreType.DMA`). A copy counts its bytes on its semaphore when it completes, as
//! on a TPU; `.wait()` waits for the bytes of the copy it describes. Reading a VMEM region
//! before the copy into it has been waited for is a race the emulator reports.

use tpuemu_isa::{DmaShape, MemRef, Sem};

use super::PallasError;
use super::body::{Body, Val};
use super::scalar::at;
use super::spec::{Dt, Eqn};
use crate::codegen::hbm_vmem_desc;

/// One end of a copy.
enum End {
    /// A VMEM region: its address, row stride, rows, columns and element bytes.
    Vmem(u32, u32, u32, u32, u32),
    /// An HBM region: the slot, byte offset, row stride, rows, columns and element bytes.
    Hbm(tpuemu_isa::ArgSlot, i64, i64, u32, u32, u32),
}

impl End {
    fn rows_cols(&self) -> (u32, u32) {
        match *self {
            End::Vmem(_, _, r, c, _) | End::Hbm(_, _, _, r, c, _) => (r, c),
        }
    }

    fn esz(&self) -> u32 {
        match *self {
            End::Vmem(.., e) | End::Hbm(.., e) => e,
        }
    }
}

impl Body<'_> {
    /// The region `p[key]` (`{"ref": k, "idx": [...]}`) names among `ins`.
    fn end(&mut self, eq: &Eqn, ins: &[Val], key: &str) -> Result<End, PallasError> {
        let p = eq
            .params
            .get(key)
            .ok_or_else(|| PallasError::Spec(format!("a DMA without `{key}`")))?;
        let k = p.get("ref").and_then(|v| v.as_u64()).unwrap_or(u64::MAX) as usize;
        let spec = p
            .get("idx")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        match ins.get(k) {
            Some(Val::Ref(r)) => {
                let v = self.region_of(eq, r, &spec, ins)?;
                if v.fmt.bytes() != v.dt.bytes() || v.dt == Dt::Bool {
                    return Err(self.unsupported(format!("a DMA of {:?}{}", v.dt, at(&eq.src))));
                }
                Ok(End::Vmem(v.addr, v.stride, v.rows, v.cols, v.fmt.bytes()))
            }
            Some(Val::Hbm(h)) => {
                let pos = self.positions(eq, &h.shape, &spec, ins)?;
                let n = pos.len();
                let esz = h.dt.bytes() as i64;
                let mut strides = vec![1i64; n];
                for d in (0..n.saturating_sub(1)).rev() {
                    strides[d] = strides[d + 1] * h.shape[d + 1] as i64;
                }
                let offset: i64 = pos.iter().zip(&strides).map(|(p, s)| p.0 * s).sum::<i64>() * esz;
                let lead_ok = n < 3 || pos[..n - 2].iter().all(|p| p.1 == 1);
                if !lead_ok || n == 0 {
                    return Err(self.unsupported(format!(
                        "a DMA of a region of shape {:?} of an HBM array{} (one 2-D block at a time)",
                        pos.iter().map(|p| p.1).collect::<Vec<_>>(),
                        at(&eq.src)
                    )));
                }
                let (rows, cols, rstride) = if n == 1 {
                    (1, pos[0].1, 0)
                } else {
                    (pos[n - 2].1, pos[n - 1].1, strides[n - 2] * esz)
                };
                if offset > i32::MAX as i64 {
                    return Err(PallasError::TooLarge {
                        kernel: self.kernel.into(),
                        what: "a copy beyond 2 GiB into an HBM array".into(),
                    });
                }
                Ok(End::Hbm(
                    h.slot,
                    offset,
                    rstride,
                    rows as u32,
                    cols as u32,
                    esz as u32,
                ))
            }
            _ => Err(PallasError::Spec(format!(
                "a DMA's `{key}` is not a reference"
            ))),
        }
    }

    /// The semaphore `p.sem` names.
    fn semaphore(&self, eq: &Eqn, ins: &[Val]) -> Result<Sem, PallasError> {
        let p = eq.params.get("sem");
        let k = p
            .and_then(|p| p.get("ref"))
            .and_then(|v| v.as_u64())
            .unwrap_or(u64::MAX) as usize;
        let Some(Val::Sems(base, shape)) = ins.get(k) else {
            return Err(self.unsupported(format!(
                "a DMA whose semaphore is not a scratch semaphore{}",
                at(&eq.src)
            )));
        };
        let spec = p
            .and_then(|p| p.get("idx"))
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        let pos = self.positions(eq, shape, &spec, ins)?;
        if pos.iter().any(|p| p.1 != 1) && !shape.is_empty() {
            return Err(self.unsupported(format!("a DMA on several semaphores{}", at(&eq.src))));
        }
        let mut flat = 0i64;
        for (d, p) in pos.iter().enumerate() {
            flat = flat * shape[d] as i64 + p.0;
        }
        Ok(Sem::n(*base + flat as u8))
    }

    /// The two ends of `eq`'s copy, checked against each other: (source, destination, bytes).
    fn ends(&mut self, eq: &Eqn, ins: &[Val]) -> Result<(End, End, u64), PallasError> {
        let src = self.end(eq, ins, "src")?;
        let dst = self.end(eq, ins, "dst")?;
        if src.rows_cols() != dst.rows_cols() || src.esz() != dst.esz() {
            return Err(PallasError::refused(
                self.kernel,
                format!(
                    "a copy of {:?} elements of {} bytes into {:?} of {} bytes{}",
                    src.rows_cols(),
                    src.esz(),
                    dst.rows_cols(),
                    dst.esz(),
                    at(&eq.src)
                ),
            ));
        }
        let (r, c) = src.rows_cols();
        let bytes = r as u64 * c as u64 * src.esz() as u64;
        Ok((src, dst, bytes))
    }

    pub(super) fn dma_start(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let (src, dst, _) = self.ends(eq, &ins)?;
        let sem = self.semaphore(eq, &ins)?;
        if let Some(Val::Ref(r)) = eq
            .params
            .get("dst")
            .and_then(|p| p.get("ref"))
            .and_then(|v| v.as_u64())
            .and_then(|k| ins.get(k as usize))
        {
            // Values still reading what the copy overwrites are kept first.
            let r = r.clone();
            self.protect(&r, None)?;
        }
        let (rows, cols) = src.rows_cols();
        let esz = src.esz();
        let (src_stride, dst_stride) = (stride(&src), stride(&dst));
        let desc = hbm_vmem_desc(cols * esz, &[(rows, src_stride, dst_stride)], true);
        let d = self.e.descriptor(&desc);
        let dreg = self.e.konst(d as i32);
        let s = self.mem_ref(&src);
        let t = self.mem_ref(&dst);
        self.e.dma(t, s, DmaShape::Desc(dreg), sem);
        Ok(Vec::new())
    }

    pub(super) fn dma_wait(&mut self, eq: &Eqn, ins: Vec<Val>) -> Result<Vec<Val>, PallasError> {
        let (_, _, bytes) = self.ends(eq, &ins)?;
        let sem = self.semaphore(eq, &ins)?;
        self.e.wait_bytes(sem, bytes);
        Ok(Vec::new())
    }

    fn mem_ref(&mut self, end: &End) -> MemRef {
        match *end {
            End::Vmem(addr, ..) => MemRef::vmem(self.e.konst(addr as i32)),
            End::Hbm(slot, off, ..) => MemRef::hbm(slot, self.e.konst(off as i32)),
        }
    }
}

/// A region's row stride in bytes (source or destination side of a descriptor).
fn stride(end: &End) -> i64 {
    match *end {
        End::Vmem(_, s, ..) => s as i64,
        End::Hbm(_, _, s, ..) => s,
    }
}
