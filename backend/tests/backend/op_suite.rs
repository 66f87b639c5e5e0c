//! The operator suite: every registered operator against a plain host reference, with property
//! tests over shapes (broadcasting, size-0 and size-1 dims, non-contiguous views), dtypes (f32,
//! bf16, f16, integers and bool where the operator takes them) and values, in every mode
//! (Strict, Debug, DeferAndFuse, Compile), with `torch.testing`'s tolerances.
//!
//! - `reference`: the host reference (f64, PyTorch's promotion, broadcasting and rounding);
//! - `strategies`: proptest strategies for shapes, dtypes, values and placements;
//! - `harness`: samples, the runs in each mode, the comparison;
//! - one file per operator family, each test checking one overload (or a few that share a
//!   reference) on drawn samples and on fixed edge cases;
//! - `errors`: wrong shapes, dtypes, dims and indices give errors that name the operator and
//!   say what was expected and what came, never a panic;
//! - `coverage`: every registered overload is tested here or excluded with a reason.
//!
//! Tolerances are `torch.testing.assert_close`'s defaults (f32: rtol 1.3e-6, atol 1e-5; bf16:
//! 1.6e-2, 1e-5; f16: 1e-3, 1e-5; integers and bool exact), NaN equal to NaN. Where the
//! device's numerics legitimately differ from an exact reference, a family adds a per-element
//! bound computed from the inputs and says why (f32 accumulation in sums and products, one bf16
//! pass of the matrix units at DEFAULT precision, ...). Each operator's samples come from a
//! fixed seed: the suite is deterministic.

#[path = "op_suite/reference.rs"]
mod reference;

#[path = "op_suite/strategies.rs"]
mod strategies;

#[path = "op_suite/harness.rs"]
mod harness;

#[path = "op_suite/binary.rs"]
mod binary;

#[path = "op_suite/unary.rs"]
mod unary;

#[path = "op_suite/creation.rs"]
mod creation;

#[path = "op_suite/views.rs"]
mod views;

#[path = "op_suite/data.rs"]
mod data;

#[path = "op_suite/reduce.rs"]
mod reduce;

#[path = "op_suite/nn.rs"]
mod nn;

#[path = "op_suite/spatial.rs"]
mod spatial;

#[path = "op_suite/matrix.rs"]
mod matrix;

#[path = "op_suite/backward.rs"]
mod backward;

#[path = "op_suite/from_torch.rs"]
mod from_torch;

#[path = "op_suite/division.rs"]
mod division;

#[path = "op_suite/pointwise.rs"]
mod pointwise;

#[path = "op_suite/like.rs"]
mod like;

#[path = "op_suite/random.rs"]
mod random;

#[path = "op_suite/math.rs"]
mod math;

#[path = "op_suite/activations.rs"]
mod activations;

#[path = "op_suite/gamma.rs"]
mod gamma;

#[path = "op_suite/spaced.rs"]
mod spaced;

#[path = "op_suite/compare.rs"]
mod compare;

#[path = "op_suite/linalg.rs"]
mod linalg;

#[path = "op_suite/coverage.rs"]
mod coverage;

#[path = "op_suite/errors.rs"]
mod errors;
