//! Kernels split over a chip's TensorCores (megacore, as on TPU v4 and v5p): one program,
//! launched on every core of the chip at once, each core running its part of the work — what
//! a Pallas kernel's `parallel` grid dimension does on a megacore chip.
//!
//! Launch convention: a split kernel's last argument is the scalar [`PART_ARG`], the core's
//! part (`0..parts`); the runtime launches the program on cores `0..parts` of the chip, each
//! with its part. The program reads it, branches to its part's code (generated for that part:
//! its own tiles or heads) and ends with a barrier, so that every core finishes together and a
//! kernel launched next on any one core starts after the whole of this one.
//!
//! ```text
//!     sld   r, [part]
//!     brnz  r, next1        ; part 0:
//!     ...part 0...
//!     br    end
//! next1:
//!     sadd  r, r, -1
//!     brnz  r, next2        ; part 1:
//!     ...
//! end:
//!     barrier
//! ```

use std::ops::Range;

use tpuemu_isa::{Addr, SReg};

use super::Emitter;

/// Name of a split kernel's last argument: the part the core runs.
pub const PART_ARG: &str = "part";

/// Part `p` of `n` units of work dealt to `parts` cores in contiguous ranges as equal as they
/// can be (the first `n % parts` get one more).
pub fn part_range(n: usize, parts: usize, p: usize) -> Range<usize> {
    let (q, r) = (n / parts, n % parts);
    let start = p * q + p.min(r);
    start..start + q + usize::from(p < r)
}

/// Emits a kernel's work as `parts` parts: `body(cx, p)` generates part `p`. With one part the
/// body is emitted alone (no argument, no branch, no barrier); otherwise as the module docs
/// show, `reg` a scratch register (free to reuse inside the bodies). `em` reaches the emitter
/// inside the generator's state `cx`.
pub fn emit_parts<T, E>(
    cx: &mut T,
    em: fn(&mut T) -> &mut Emitter,
    parts: usize,
    reg: SReg,
    mut body: impl FnMut(&mut T, usize) -> Result<(), E>,
) -> Result<(), E> {
    if parts <= 1 {
        return body(cx, 0);
    }
    let e = em(cx);
    let slot = e.b.scalar(PART_ARG);
    e.b.sld(reg, Addr::abs(4 * slot.index() as i32));
    let end = e.b.label();
    for p in 0..parts {
        let e = em(cx);
        let next = (p + 1 < parts).then(|| {
            let l = e.b.label();
            e.b.brnz(reg, l);
            l
        });
        body(cx, p)?;
        if let Some(l) = next {
            let e = em(cx);
            e.b.br(end);
            e.bind_join(l);
            e.b.sadd(reg, reg, -1);
        }
    }
    let e = em(cx);
    e.bind_join(end);
    e.b.barrier();
    Ok(())
}

/// Whether `program` is a split kernel (its last argument is [`PART_ARG`]).
pub fn is_split(program: &tpuemu_isa::Program) -> bool {
    program.args.last().is_some_and(|a| a.name == PART_ARG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_work_once_and_differ_by_at_most_one() {
        for n in 0..20 {
            for parts in 1..5 {
                let r: Vec<_> = (0..parts).map(|p| part_range(n, parts, p)).collect();
                assert_eq!(r[0].start, 0);
                assert_eq!(r[parts - 1].end, n);
                assert!(r.windows(2).all(|w| w[0].end == w[1].start));
                let lens: Vec<usize> = r.iter().map(|x| x.len()).collect();
                let (lo, hi) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
                assert!(hi - lo <= 1, "{n} over {parts}: {lens:?}");
            }
        }
    }
}
