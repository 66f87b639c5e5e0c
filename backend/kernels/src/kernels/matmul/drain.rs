//! Draining a finished output tile: the epilogue over a chunk of its rows (the tile kernel's
//! dense vector code, in VMEM), then their store to HBM — chunk by chunk, interleaved with the
//! next tile's folds.

use super::streamed::{Step, elem_off};
use super::{Ctx, MatOperand, MatSpec, SEM_STORE, Side, tile_desc};
use crate::dtype::DType;
use crate::kernels::KernelError;
use crate::kernels::tile::body::{self, VOperand};

/// A finished output tile whose epilogue and store are still to be emitted, in row chunks.
#[derive(Default)]
pub(super) struct Drain {
    /// Its accumulator parity (`None`: nothing to drain).
    cb: Option<usize>,
    st: Step,
    rm: u32,
    rn: u32,
    /// Row pitch of the tile buffers, in elements.
    tn: u32,
    next_row: u32,
    chunk_rows: u32,
    c_buf: u32,
    x_bufs: Vec<u32>,
    /// Each output's buffer.
    o_bufs: Vec<u32>,
    /// The first output's argument slot (the others follow).
    out_slot: u8,
    /// A row epilogue's argument operands' buffers (see [`super::rows`]).
    r_bufs: Vec<u32>,
}

impl Drain {
    /// The drain of tile `st` in buffers `cb`: `ext` is its rows, columns and row pitch, `bufs`
    /// its accumulator, epilogue inputs and outputs.
    pub fn new(
        out_slot: u8,
        st: &Step,
        ext: (u32, u32, u32),
        chunk_rows: u32,
        cb: usize,
        bufs: (u32, Vec<u32>, Vec<u32>),
    ) -> Self {
        let (rm, rn, tn) = ext;
        let (c_buf, x_bufs, o_bufs) = bufs;
        Drain {
            cb: Some(cb),
            st: *st,
            rm,
            rn,
            tn,
            next_row: 0,
            chunk_rows,
            c_buf,
            x_bufs,
            o_bufs,
            out_slot,
            r_bufs: Vec::new(),
        }
    }

    /// The buffers of a row epilogue's argument operands.
    pub fn with_rows(mut self, r_bufs: Vec<u32>) -> Self {
        self.r_bufs = r_bufs;
        self
    }

    /// Each output with its element size as stored (f32 without an epilogue).
    fn outputs<'s>(&self, s: &'s MatSpec) -> impl Iterator<Item = (&'s MatOperand, u32)> {
        let plain = s.epilogue.is_none();
        s.outputs()
            .map(move |o| (o, if plain { 4 } else { o.dtype.size() as u32 }))
    }

    /// The accumulator parity still to drain, if any.
    pub fn parity(&self) -> Option<usize> {
        self.cb
    }

    /// Bytes the whole tile's stores move.
    pub fn bytes(&self, s: &MatSpec) -> u64 {
        if let Some(r) = &s.rows {
            return super::rows::store_bytes(r, self.rm, self.rn, self.tn);
        }
        self.outputs(s)
            .map(|(o, esz)| {
                let (st1, st2) = (o.strides[1], o.strides[2]);
                tile_desc(esz, self.rm, self.rn, st1, st2, self.tn, false).bytes()
            })
            .sum()
    }

    /// Emits the next chunk: the epilogue over its rows, then their store.
    pub fn chunk(&mut self, cx: &mut Ctx) -> Result<(), KernelError> {
        let Some(cb) = self.cb else { return Ok(()) };
        if self.next_row >= self.rm {
            self.cb = None;
            return Ok(());
        }
        let s = cx.spec;
        let r0 = self.next_row;
        let rows = self.chunk_rows.min(self.rm - r0);
        self.epilogue(cx, r0, rows)?;
        if s.rows.is_some() {
            // The product stays in VMEM: the row program reads it there, then stores its own.
            super::rows::chunk(
                cx,
                &self.st,
                (r0, rows),
                self.o_bufs[0],
                &self.r_bufs,
                SEM_STORE + cb as u8,
            )?;
        } else {
            self.store(cx, r0, rows, cb)?;
        }
        self.next_row += rows;
        if self.next_row >= self.rm {
            self.cb = None;
        }
        Ok(())
    }

    /// The stores of the outputs' rows `r0..r0 + rows` on buffer `cb`'s semaphore.
    fn store(&self, cx: &mut Ctx, r0: u32, rows: u32, cb: usize) -> Result<(), KernelError> {
        for (k, (o, esz)) in self.outputs(cx.spec).enumerate() {
            let (st1, st2) = (o.strides[1], o.strides[2]);
            let d = tile_desc(esz, rows, self.rn, st1, st2, self.tn, false);
            let hbm = Side::Hbm {
                slot: self.out_slot + k as u8,
                off: elem_off(o, self.st.b, self.st.i + r0, self.st.j),
            };
            let vmem = Side::Vmem((self.o_bufs[k] + r0 * self.tn * esz) as i32);
            cx.dma(hbm, vmem, &d, SEM_STORE + cb as u8)?;
        }
        Ok(())
    }

    /// The epilogue over rows `r0..r0 + rows` of the tile, if the kernel has one.
    fn epilogue(&self, cx: &mut Ctx, r0: u32, rows: u32) -> Result<(), KernelError> {
        let s = cx.spec;
        let Some(prog) = &s.epilogue else {
            return Ok(());
        };
        let pitch = self.tn;
        let at = |buf: u32, esz: u32| (buf + r0 * pitch * esz) as i32;
        let mut ops = vec![VOperand {
            base: at(self.c_buf, 4),
            dtype: DType::F32,
        }];
        for (xi, x) in s.extras.iter().enumerate() {
            ops.push(VOperand {
                base: at(self.x_bufs[xi], x.dtype.size() as u32),
                dtype: x.dtype,
            });
        }
        let inputs = ops.len();
        for (o, buf) in s.outputs().zip(&self.o_bufs) {
            ops.push(VOperand {
                base: at(*buf, o.dtype.size() as u32),
                dtype: o.dtype,
            });
        }
        let n_vregs = (rows * pitch).div_ceil(1024);
        body::dense(
            &mut cx.e,
            &mut cx.pool,
            prog,
            &ops,
            inputs,
            n_vregs,
            cx.chip.core.vregs,
            None,
        )?;
        cx.e.forget_constants();
        Ok(())
    }

    /// Emits every chunk left.
    pub fn finish(&mut self, cx: &mut Ctx) -> Result<(), KernelError> {
        while self.cb.is_some() {
            self.chunk(cx)?;
        }
        Ok(())
    }
}
