//! The argument prologue of the backend's kernels.
//!
//! Launch convention: the kernel's buffers (one per operand), then one scalar per buffer, its
//! view's storage offset in elements (`off0`, `off1`, ...), so that views at different offsets
//! of their storages share one compiled kernel. A kernel turns each offset into a byte offset
//! once, at its start.

use tpuemu_isa::{Addr, ArgSlot, SReg};

use super::Emitter;

/// The buffers a kernel declared and where their offset arguments are.
#[derive(Clone, Debug)]
pub struct BufferArgs {
    /// The buffers' slots, in declaration order.
    pub slots: Vec<ArgSlot>,
    /// SMEM word of the first offset argument (word `first_offset + k` is buffer `k`'s).
    first_offset: u32,
}

impl BufferArgs {
    /// SMEM byte address of buffer `k`'s offset argument.
    pub fn offset_addr(&self, k: usize) -> Addr {
        Addr::abs(4 * (self.first_offset as i32 + k as i32))
    }
}

impl Emitter {
    /// Declares one buffer per name, then the offset scalar `off{k}` of each.
    pub fn buffers_with_offsets<S: Into<String>>(
        &mut self,
        names: impl IntoIterator<Item = S>,
    ) -> BufferArgs {
        let slots: Vec<ArgSlot> = names.into_iter().map(|n| self.b.buffer(n)).collect();
        let first_offset = slots.len() as u32;
        for k in 0..slots.len() {
            self.b.scalar(format!("off{k}"));
        }
        BufferArgs {
            slots,
            first_offset,
        }
    }

    /// `dst` = buffer `k`'s byte offset: its offset argument times `elem_bytes`.
    pub fn byte_offset(&mut self, dst: SReg, args: &BufferArgs, k: usize, elem_bytes: u32) {
        self.b.sld(dst, args.offset_addr(k));
        self.b.smul(dst, dst, elem_bytes as i32);
    }
}
