//! Moving a DMA's bytes: run by run straight from the source memory to the destination when
//! they are different memories, through a kept buffer when they are the same one (so that a
//! copy onto overlapping bytes reads everything before it writes, as the model defines), and
//! gathered into one message for a remote DMA.

use tpuemu_isa::dma::DmaDescriptor;

use super::deferred::Vmem;
use super::dma::{Side, extent, for_each_run};
use super::timing::MemKey;
use super::{ChipShared, Core};
use crate::memory::{LocalMem, PageReader, PageWriter};

/// Reads `out.len()` bytes at `at` of one memory.
fn read(
    vmem: &mut Vmem,
    smem: &LocalMem,
    chip: &ChipShared,
    mem: MemKey,
    at: usize,
    out: &mut [u8],
) {
    match mem {
        MemKey::Vmem => out.copy_from_slice(&vmem.read(at, at + out.len())[at..at + out.len()]),
        MemKey::Smem => smem.read(at, out),
        MemKey::Hbm(id) => chip
            .hbm
            .buffer(id)
            .expect("argument buffers are live")
            .read(at as u64, out),
    }
}

/// Writes `data` at `at` of one memory.
fn write(
    vmem: &mut Vmem,
    smem: &mut LocalMem,
    chip: &mut ChipShared,
    mem: MemKey,
    at: usize,
    data: &[u8],
) {
    match mem {
        MemKey::Vmem => {
            vmem.bytes_for(at, at + data.len())[at..at + data.len()].copy_from_slice(data)
        }
        MemKey::Smem => smem.write(at, data),
        MemKey::Hbm(id) => chip
            .hbm
            .buffer_mut(id)
            .expect("argument buffers are live")
            .write(at as u64, data),
    }
}

impl Core {
    /// Copies a DMA's bytes from side `s` to side `d` of this chip.
    pub(super) fn copy_local(
        &mut self,
        chip: &mut ChipShared,
        s: &Side,
        d: &Side,
        desc: &DmaDescriptor,
    ) {
        let (vmem, smem) = (&mut self.vmem, &mut self.smem);
        match (s.mem, d.mem) {
            // Different memories: nothing read can have been written by this DMA.
            (MemKey::Hbm(id), MemKey::Vmem) => {
                let mut src =
                    PageReader::new(chip.hbm.buffer(id).expect("argument buffers are live"));
                let (lo, hi) = extent(d.base, desc, false).expect("a DMA that moves bytes");
                let dst = vmem.bytes_for(lo as usize, hi as usize);
                for_each_run(desc, |so, d_o, len| {
                    let at = (d.base + d_o) as usize;
                    src.read((s.base + so) as u64, &mut dst[at..at + len]);
                });
            }
            (MemKey::Vmem, MemKey::Hbm(id)) => {
                let mut dst =
                    PageWriter::new(chip.hbm.buffer_mut(id).expect("argument buffers are live"));
                let (lo, hi) = extent(s.base, desc, true).expect("a DMA that moves bytes");
                let src = vmem.read(lo as usize, hi as usize);
                for_each_run(desc, |so, d_o, len| {
                    let at = (s.base + so) as usize;
                    dst.write((d.base + d_o) as u64, &src[at..at + len]);
                });
            }
            (MemKey::Hbm(a), MemKey::Hbm(b)) if a != b => {
                let (src, dst) = chip.hbm.pair(a, b).expect("argument buffers are live");
                let (mut src, mut dst) = (PageReader::new(src), PageWriter::new(dst));
                let mut buf = std::mem::take(&mut self.dma_buf);
                for_each_run(desc, |so, d_o, len| {
                    buf.resize(len, 0);
                    src.read((s.base + so) as u64, &mut buf);
                    dst.write((d.base + d_o) as u64, &buf);
                });
                drop(dst);
                self.dma_buf = buf;
            }
            (a, b) if a != b && !(matches!(a, MemKey::Hbm(_)) && matches!(b, MemKey::Hbm(_))) => {
                // VMEM and SMEM, or HBM and SMEM: small copies, one run at a time.
                let mut buf = std::mem::take(&mut self.dma_buf);
                for_each_run(desc, |so, d_o, len| {
                    buf.resize(len, 0);
                    read(vmem, smem, chip, a, (s.base + so) as usize, &mut buf);
                    write(vmem, smem, chip, b, (d.base + d_o) as usize, &buf);
                });
                self.dma_buf = buf;
            }
            _ => {
                // The same memory: everything is read first (the bytes may overlap).
                let mut buf = std::mem::take(&mut self.dma_buf);
                buf.resize(desc.bytes() as usize, 0);
                let mut at = 0usize;
                for_each_run(desc, |so, _, len| {
                    read(
                        vmem,
                        smem,
                        chip,
                        s.mem,
                        (s.base + so) as usize,
                        &mut buf[at..at + len],
                    );
                    at += len;
                });
                let mut at = 0usize;
                for_each_run(desc, |_, d_o, len| {
                    write(
                        vmem,
                        smem,
                        chip,
                        d.mem,
                        (d.base + d_o) as usize,
                        &buf[at..at + len],
                    );
                    at += len;
                });
                self.dma_buf = buf;
            }
        }
    }

    /// Writes zeros where a DMA writes side `d` in scalar memory (a timing-only DMA into
    /// SMEM).
    pub(super) fn zero_smem(&mut self, d: &Side, desc: &DmaDescriptor) {
        let mut buf = std::mem::take(&mut self.dma_buf);
        for_each_run(desc, |_, d_o, len| {
            buf.clear();
            buf.resize(len, 0);
            self.smem.write((d.base + d_o) as usize, &buf);
        });
        self.dma_buf = buf;
    }

    /// A DMA's source bytes in element order (for a remote DMA).
    pub(super) fn gather(
        &mut self,
        chip: &ChipShared,
        s: &Side,
        desc: &DmaDescriptor,
        bytes: usize,
    ) -> Vec<u8> {
        let mut buf = vec![0u8; bytes];
        let mut at = 0usize;
        for_each_run(desc, |so, _, len| {
            read(
                &mut self.vmem,
                &self.smem,
                chip,
                s.mem,
                (s.base + so) as usize,
                &mut buf[at..at + len],
            );
            at += len;
        });
        buf
    }
}
