//! The matrix units: weight loads, streaming LHS rows through the systolic array, popping
//! results.
//!
//! Functional model: weights and LHS values are read from VMEM (bf16 widened exactly, or f32
//! split into bf16 parts for the precision's passes); each pass is a tile product summed in
//! the defined order of [`crate::numerics::matmul`]; pass results are added in a fixed order,
//! smallest terms first (see [`passes`]). Results are f32.
//!
//! Timing model (per matrix unit, `R x C` array, `M` rows, `P` passes):
//! - Pipelined (TPU-like): `mxu.lw` shifts a tile into the idle weight buffer in `R` cycles,
//!   overlapping the current stream; `mxu.mm` streams `M x P` rows back to back once its weights
//!   are in; results leave `R + C - 2` cycles after the last row enters.
//! - SCALE-Sim: one weight buffer; a load takes `R` cycles with the array idle, a matmul holds
//!   the array for `M + R + C - 2` cycles (fill, stream, drain) and nothing overlaps. A fold
//!   (one load and one matmul) costs `2R + C + M - 2`, what SCALE-Sim 3.0.0 reports per fold.
//!
//! The front end does not wait for the matrix units; `mxu.pop` writes land asynchronously and
//! later VMEM accesses to those bytes wait for them.

use tpuemu_isa::ops::MxuFmt;
use tpuemu_isa::{Addr, Instr, Unit};

use super::deferred::{Piece, Pop};
use super::mxu_jobs::Rows;
use super::mxu_values::{ResultBlock, product, read_block};
use super::timing::{MemKey, Range, Timing};
use super::{Core, Env, Flow};
use crate::fault::FaultKind;
use crate::preset::MxuModel;
use crate::recorder::Recorder;

impl Core {
    /// Checks a `rows x row_bytes` block at `addr` with `stride`; returns its base and range.
    #[inline(always)]
    fn mxu_block(
        &self,
        addr: Addr,
        rows: u64,
        row_bytes: u64,
        stride: i64,
        write: bool,
    ) -> Result<(usize, Range), FaultKind> {
        let base = self.s(addr.base) as i32 as i64 + addr.offset as i64;
        let (lo, hi) = if rows == 0 {
            (base, base)
        } else {
            let last = base + (rows as i64 - 1) * stride;
            (base.min(last), base.max(last) + row_bytes as i64)
        };
        if stride < 0 || !self.vmem.contains(lo, hi) {
            return Err(FaultKind::OutOfBounds {
                access: if write { "write" } else { "read" },
                region: "VMEM".into(),
                start: lo,
                end: hi,
                size: self.vmem.size(),
            });
        }
        Ok((
            base as usize,
            Range::rows(MemKey::Vmem, lo as u64, rows, row_bytes, stride as u64),
        ))
    }

    pub(crate) fn exec_mxu(
        &mut self,
        instr: &Instr,
        env: &Env,
        rec: &mut Recorder,
    ) -> Result<Flow, FaultKind> {
        let p = env.preset;
        let (r_dim, c_dim) = (p.mxu_rows as u64, p.mxu_cols as u64);
        let pc = self.pc;
        match *instr {
            Instr::MxuLoad {
                mxu,
                fmt,
                transpose,
                addr,
                rows,
                cols,
                stride,
            } => {
                let (k, n, st) = (
                    self.s(rows) as u64,
                    self.s(cols) as u64,
                    self.s(stride) as i32 as i64,
                );
                if k == 0 || k > r_dim || n == 0 || n > c_dim {
                    return Err(FaultKind::Invalid(format!(
                        "weight tile {k}x{n} does not fit the {r_dim}x{c_dim} array (1..={r_dim} rows, 1..={c_dim} columns)"
                    )));
                }
                // Transposed tiles are stored as N rows of K elements.
                let (srows, scols) = if transpose { (n, k) } else { (k, n) };
                let (base, range) =
                    self.mxu_block(addr, srows, scols * fmt.bytes() as u64, st, false)?;
                let issue = self
                    .t
                    .front
                    .max(self.sready(addr.base))
                    .max(self.sready(rows))
                    .max(self.sready(cols))
                    .max(self.sready(stride));
                let issue = Timing::queue_slot(
                    &mut self.t.mxu[mxu.index() as usize].queue,
                    p.costs.mxu_queue_depth,
                    issue,
                );
                let two = p.mxu_weight_buffers == 2 && p.mxu_model == MxuModel::Pipelined;
                let m = &mut self.t.mxu[mxu.index() as usize];
                let b = if two { 1 - m.cur } else { 0 };
                let mut start = match p.mxu_model {
                    MxuModel::Pipelined => issue.max(m.bufs[b].free).max(m.load_free),
                    MxuModel::ScaleSim => issue.max(m.array_idle),
                };
                start = self.t.write_hazard(&range, start);
                self.t.check_race(&range, false, start)?;
                self.t.mxu[mxu.index() as usize].queue.push_back(start);
                let end = start + r_dim;
                self.t.add_pending_read(range, end);
                let m = &mut self.t.mxu[mxu.index() as usize];
                m.cur = b;
                m.bufs[b].ready = end;
                m.bufs[b].free = end;
                m.load_free = end;
                if p.mxu_model == MxuModel::ScaleSim {
                    m.array_idle = end;
                    m.busy += r_dim;
                    rec.mxu(Unit::Mxu(mxu), pc, start, end, 0);
                }
                self.t.async_end = self.t.async_end.max(end);
                self.stats.mxu_first = Some(self.stats.mxu_first.map_or(start, |f| f.min(start)));
                self.t.front = issue + 1;
                let m = &mut self.mxus[mxu.index() as usize];
                m.weights.loaded(fmt, k as usize, n as usize);
                if env.functional {
                    let shape = (srows as usize, scols as usize, st as usize);
                    let hi =
                        base + (srows as usize - 1) * st as usize + shape.1 * fmt.bytes() as usize;
                    let bytes = self.vmem.read(base, hi);
                    if fmt == MxuFmt::Bf16 && !transpose {
                        // Straight into the packed panels: one pass over the values.
                        m.weights.pack_bf16(&bytes[base..hi], st as usize);
                    } else {
                        let _ = read_block(bytes, base, shape, fmt, transpose, &mut m.weights.raw);
                    }
                }
                m.loaded = true;
            }
            Instr::MxuMatmul {
                mxu,
                fmt,
                transpose,
                prec,
                addr,
                rows,
                stride,
            } => {
                let mi = mxu.index() as usize;
                let w = &self.mxus[mi].weights;
                let (wk, wn, wfmt) = (w.k as u64, w.n as u64, w.fmt.unwrap_or(fmt));
                if !self.mxus[mi].loaded {
                    return Err(FaultKind::Invalid(format!(
                        "{mxu} has no weights loaded (mxu.lw first)"
                    )));
                }
                if wfmt != fmt {
                    return Err(FaultKind::Invalid(format!(
                        "{mxu} holds {wfmt} weights but the LHS is {fmt}"
                    )));
                }
                let (mrows, st) = (self.s(rows) as u64, self.s(stride) as i32 as i64);
                let queued = self.mxus[mi].queued_rows();
                crate::bounds::mxu_queue(mxu, queued, mrows, wn, p.vmem_bytes)?;
                // A transposed LHS block is stored as K rows of M elements.
                let (srows, scols) = if transpose { (wk, mrows) } else { (mrows, wk) };
                let (base, range) =
                    self.mxu_block(addr, srows, scols * fmt.bytes() as u64, st, false)?;
                let issue = self
                    .t
                    .front
                    .max(self.sready(addr.base))
                    .max(self.sready(rows))
                    .max(self.sready(stride));
                let issue = Timing::queue_slot(
                    &mut self.t.mxu[mxu.index() as usize].queue,
                    p.costs.mxu_queue_depth,
                    issue,
                );
                let npass = prec.passes() as u64;
                let m = &mut self.t.mxu[mi];
                let b = m.cur;
                let mut start = match p.mxu_model {
                    MxuModel::Pipelined => issue.max(m.bufs[b].ready).max(m.input_free),
                    MxuModel::ScaleSim => issue.max(m.bufs[b].ready).max(m.array_idle),
                };
                start = self.t.write_hazard(&range, start);
                self.t.check_race(&range, false, start)?;
                self.t.mxu[mxu.index() as usize].queue.push_back(start);
                let stream = mrows * npass;
                let ready = start + stream + r_dim + c_dim - 2;
                self.t.add_pending_read(range, start + stream);
                let flops = 2 * mrows * wk * wn;
                let m = &mut self.t.mxu[mi];
                match p.mxu_model {
                    MxuModel::Pipelined => {
                        m.input_free = start + stream;
                        m.bufs[b].free = start + stream;
                        m.busy += stream;
                        rec.mxu(Unit::Mxu(mxu), pc, start, start + stream, flops);
                    }
                    MxuModel::ScaleSim => {
                        m.array_idle = ready;
                        m.busy += ready - start;
                        rec.mxu(Unit::Mxu(mxu), pc, start, ready, flops);
                    }
                }
                self.t.async_end = self.t.async_end.max(ready);
                self.stats.mxu_first = Some(self.stats.mxu_first.map_or(start, |f| f.min(start)));
                self.stats.mxu_last = self.stats.mxu_last.max(ready);
                self.stats.flops += flops;
                self.t.front = issue + 1;
                let data = if env.functional {
                    let (bufs, unit) = (&mut self.mxu_bufs, &mut self.mxus[mi]);
                    let lhs = (base, mrows as usize, st as usize);
                    product(
                        bufs,
                        &mut unit.weights,
                        &mut self.vmem,
                        lhs,
                        prec,
                        transpose,
                    )
                } else {
                    Rows::default()
                };
                self.mxus[mi].queue.push_back(ResultBlock {
                    rows: mrows,
                    n: wn as usize,
                    data,
                    taken: 0,
                    ready,
                });
            }
            Instr::MxuPop {
                mxu,
                acc,
                addr,
                rows,
                stride,
            } => {
                let mi = mxu.index() as usize;
                let (r, st) = (self.s(rows) as u64, self.s(stride) as i32 as i64);
                let available = self.mxus[mi].queued_rows();
                if r > available {
                    return Err(FaultKind::MxuUnderflow {
                        mxu: mxu.to_string(),
                        asked: r as u32,
                        available,
                    });
                }
                let n = self.mxus[mi].queue.front().map_or(0, |b| b.n) as u64;
                let (base, range) = self.mxu_block(addr, r, n * 4, st, true)?;
                let issue = self
                    .t
                    .front
                    .max(self.sready(addr.base))
                    .max(self.sready(rows))
                    .max(self.sready(stride));
                let issue = Timing::queue_slot(
                    &mut self.t.mxu[mxu.index() as usize].queue,
                    p.costs.mxu_queue_depth,
                    issue,
                );
                let rows_ready =
                    self.pop_rows(mi, r as usize, (base, st as usize), acc, env.functional);
                let m = &mut self.t.mxu[mi];
                let mut start = issue.max(rows_ready).max(m.pop_free);
                start = self.t.overwrite_hazard(&range, start);
                self.t.check_race(&range, true, start)?;
                self.t.mxu[mxu.index() as usize].queue.push_back(start);
                let dur = r.div_ceil(p.costs.pop_rows_per_cycle as u64);
                self.t.mxu[mi].pop_free = start + dur;
                self.t.add_pending_write(range, start + dur);
                self.t.async_end = self.t.async_end.max(start + dur);
                self.t.front = issue + 1;
            }
            _ => unreachable!("exec_mxu called with a non-matrix instruction"),
        }
        Ok(Flow::Next)
    }

    /// Takes `rows` queued rows of matrix unit `mi`, queueing their write to VMEM when
    /// `functional` (see [`super::deferred`]); returns the cycle at which they are all out of
    /// the array.
    fn pop_rows(
        &mut self,
        mi: usize,
        rows: usize,
        (base, stride): (usize, usize),
        acc: bool,
        functional: bool,
    ) -> u64 {
        let mut ready = 0;
        let mut done = 0usize;
        let mut pieces = Vec::new();
        let mut n = 0;
        let queue = &mut self.mxus[mi].queue;
        while done < rows {
            let block = queue.front_mut().expect("row count checked by the caller");
            ready = ready.max(block.ready);
            let take = (rows - done).min((block.rows - block.taken) as usize);
            let (from, last) = (
                block.taken as usize,
                block.taken + take as u64 == block.rows,
            );
            n = block.n;
            if functional && take > 0 {
                let rows = if last {
                    // The rest of the block: its values go with the pop.
                    std::mem::take(&mut block.data)
                } else {
                    // Part of a block another pop takes more of: these rows, copied.
                    block.data.settle();
                    let mut v = self.mxu_bufs.result(take * n);
                    let mut at = 0;
                    block.data.for_runs(from, take, n, |_, vals| {
                        v[at..at + vals.len()].copy_from_slice(vals);
                        at += vals.len();
                    });
                    Rows::Ready(v)
                };
                let from = if last { from } else { 0 };
                pieces.push(Piece { rows, from, take });
            }
            block.taken += take as u64;
            done += take;
            if block.taken == block.rows {
                for v in std::mem::take(&mut block.data).into_buffers() {
                    self.mxu_bufs.recycle(v);
                }
                queue.pop_front();
            }
        }
        if functional {
            self.vmem.push_pop(Pop {
                base,
                stride,
                n,
                acc,
                pieces,
            });
        }
        ready
    }
}
