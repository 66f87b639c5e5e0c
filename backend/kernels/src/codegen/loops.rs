//! Counted loops: a counter from zero in fixed steps, the test at the bottom.
//!
//! ```text
//!     smov counter, 0
//! top:
//!     ...body...
//!     sadd counter, counter, step
//!     scmp.lt test, counter, trips * step
//!     brnz test, top
//! ```
//!
//! ```
//! use tpuemu_kernels::codegen::Emitter;
//! use tpuemu_isa::SReg;
//!
//! let mut e = Emitter::new("k");
//! let l = e.begin_loop(SReg::n(1), SReg::n(2), 10, 4); // 0, 4, ..., 36
//! e.nop();
//! e.end_loop(l);
//! let p = e.finish().unwrap();
//! let text: Vec<String> = p.instrs.iter().map(|i| i.to_string()).collect();
//! assert_eq!(
//!     text,
//!     ["smov s1, 0", "nop", "sadd s1, s1, 4", "scmp.lt s2, s1, 40", "brnz s2, @1"]
//! );
//! ```

use tpuemu_isa::ops::CmpOp;
use tpuemu_isa::{Label, SReg};

use super::Emitter;

/// A loop being emitted: opened by [`Emitter::begin_loop`], closed by [`Emitter::end_loop`].
#[must_use = "close the loop with Emitter::end_loop"]
#[derive(Debug)]
pub struct CountedLoop {
    counter: SReg,
    test: SReg,
    step: i32,
    first: i32,
    end: i32,
    top: Label,
    back_edge: bool,
    /// The counter advanced and tested at the top of the body (see
    /// [`CountedLoop::tested_early`]).
    early: bool,
}

impl CountedLoop {
    /// A loop of one trip gets no back edge: its body runs once, straight through.
    pub fn straight_if_once(mut self) -> Self {
        self.back_edge = self.end - self.first != self.step;
        self
    }

    /// Advances and tests the counter at the top of the body, leaving only the branch at the
    /// bottom: the in-order core issues the increment and the compare beside the body's first
    /// instructions instead of after its last, so the branch's operand is ready when it comes.
    /// The body must not read the counter (it is one step ahead there).
    pub fn tested_early(mut self, e: &mut Emitter) -> Self {
        if self.back_edge {
            self.early = true;
            e.b.sadd(self.counter, self.counter, self.step);
            e.b.scmp(CmpOp::Lt, self.test, self.counter, self.end);
        }
        self
    }
}

impl Emitter {
    /// Opens a loop of `trips` iterations whose `counter` takes the values `0, step, 2 * step,
    /// ...` (a byte cursor when `step` is a size): emits `counter = 0` and binds the top. The
    /// body follows; `test` is the scratch register of the bottom test.
    pub fn begin_loop(&mut self, counter: SReg, test: SReg, trips: u32, step: i32) -> CountedLoop {
        self.begin_loop_over(counter, test, 0..trips, step)
    }

    /// Opens a loop whose `counter` takes the values `first * step, (first + 1) * step, ...`
    /// up to but not including `end * step`, for `first..end` = `range` (one part of a loop
    /// split over cores).
    pub fn begin_loop_over(
        &mut self,
        counter: SReg,
        test: SReg,
        range: std::ops::Range<u32>,
        step: i32,
    ) -> CountedLoop {
        self.b.smov(counter, range.start as i32 * step);
        let top = self.b.here();
        CountedLoop {
            counter,
            test,
            step,
            first: range.start as i32 * step,
            end: range.end as i32 * step,
            top,
            back_edge: true,
            early: false,
        }
    }

    /// Closes the loop: advances the counter and branches back while it is below the end.
    pub fn end_loop(&mut self, l: CountedLoop) {
        if l.back_edge {
            if !l.early {
                self.b.sadd(l.counter, l.counter, l.step);
                self.b.scmp(CmpOp::Lt, l.test, l.counter, l.end);
            }
            self.b.brnz(l.test, l.top);
        }
    }
}
