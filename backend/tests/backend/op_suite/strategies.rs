//! Proptest strategies for the suite's inputs: shapes (rank 0 to 4, size-0 and size-1 dims,
//! now and then a wide one that spans several vector registers), broadcast-compatible shapes,
//! dtypes, values, and placements that make an input a non-contiguous view (permuted storage,
//! steps between elements, a storage offset, expanded dims of stride 0).

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use super::harness::{Input, Placement};
use super::reference::{HostTensor, numel};
use tpuemu_backend::{DType, Scalar};

/// One dim: mostly small, sometimes 1, rarely 0.
pub fn dim_size() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => Just(0usize),
        3 => Just(1usize),
        8 => 2usize..=5,
    ]
}

/// A shape of rank `lo..=hi`; now and then the last dim is wide (up to 300: more than one
/// 128-lane vector register row).
pub fn shape_rank(lo: usize, hi: usize) -> impl Strategy<Value = Vec<usize>> {
    (vec(dim_size(), lo..=hi), 0u8..10, 129usize..=300).prop_map(|(mut s, coin, wide)| {
        if coin == 0 && !s.is_empty() && s.len() <= 2 {
            let last = s.len() - 1;
            s[last] = wide;
        }
        s
    })
}

/// A shape of rank 0 to 4.
pub fn shape() -> impl Strategy<Value = Vec<usize>> {
    shape_rank(0, 4)
}

/// Two shapes that broadcast together: one is `s`, the other drops some leading dims of `s` and
/// turns some of the rest into 1 (in either order).
pub fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    shape().prop_flat_map(|s| {
        let n = s.len();
        (Just(s), 0..=n, vec(any::<bool>(), n), any::<bool>()).prop_map(|(s, drop, ones, swap)| {
            let t: Vec<usize> = s
                .iter()
                .zip(&ones)
                .skip(drop)
                .map(|(d, one)| if *one { 1 } else { *d })
                .collect();
            if swap { (t, s) } else { (s, t) }
        })
    })
}

/// Three shapes that broadcast together (for `where`).
pub fn broadcast_triple() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<usize>)> {
    (broadcast_pair(), 0..=4usize, any::<u8>()).prop_map(|((a, b), drop, mask)| {
        let full = if a.len() >= b.len() { &a } else { &b };
        let c: Vec<usize> = full
            .iter()
            .enumerate()
            .skip(drop.min(full.len()))
            .map(|(k, d)| if mask >> (k % 8) & 1 == 1 { 1 } else { *d })
            .collect();
        (a, b, c)
    })
}

/// A float dtype (f32 most often, bf16 often, f16 sometimes).
pub fn float_dtype() -> BoxedStrategy<DType> {
    prop_oneof![5 => Just(DType::F32), 4 => Just(DType::BF16), 1 => Just(DType::F16)].boxed()
}

/// Any dtype.
pub fn any_dtype() -> BoxedStrategy<DType> {
    prop_oneof![
        4 => Just(DType::F32),
        3 => Just(DType::BF16),
        1 => Just(DType::F16),
        2 => Just(DType::I32),
        2 => Just(DType::I64),
        1 => Just(DType::Bool),
    ]
    .boxed()
}

/// A numeric dtype (no bool).
pub fn num_dtype() -> BoxedStrategy<DType> {
    prop_oneof![
        4 => Just(DType::F32),
        3 => Just(DType::BF16),
        1 => Just(DType::F16),
        2 => Just(DType::I32),
        2 => Just(DType::I64),
    ]
    .boxed()
}

/// An integer index dtype.
pub fn index_dtype() -> BoxedStrategy<DType> {
    select(vec![DType::I64, DType::I32]).boxed()
}

/// A Python number: a bool, an int in `[-9, 9]` or a float in `[-9, 9)`.
pub fn number() -> impl Strategy<Value = Scalar> {
    prop_oneof![
        any::<bool>().prop_map(Scalar::Bool),
        (-9i64..=9).prop_map(Scalar::Int),
        (-9.0f64..9.0).prop_map(Scalar::Float),
    ]
}

/// Which values an input holds.
#[derive(Clone, Copy, Debug)]
pub enum Values {
    /// Floats in `[-r, r]`; integers in `[-r, r]`; bools.
    Range(f64),
    /// Like `Range`, and for floats now and then NaN, ±inf, ±0.
    Special(f64),
    /// Floats in `[lo, hi]`.
    Between(f64, f64),
    /// Small integer values (any dtype), so that extremes tie.
    Ties,
}

/// One value of `dtype` (before rounding to it).
pub fn value(dtype: DType, vals: Values) -> BoxedStrategy<f64> {
    match (dtype, vals) {
        (DType::Bool, _) => any::<bool>().prop_map(|b| b as u8 as f64).boxed(),
        (_, Values::Ties) => (-3i32..=3).prop_map(f64::from).boxed(),
        (d, Values::Range(r) | Values::Special(r)) if !d.is_float() => {
            let r = r.max(1.0) as i32;
            (-r..=r).prop_map(f64::from).boxed()
        }
        (d, Values::Between(lo, hi)) if !d.is_float() => (lo.ceil() as i32..=hi.floor() as i32)
            .prop_map(f64::from)
            .boxed(),
        (_, Values::Range(r)) => (-r..=r).boxed(),
        (_, Values::Between(lo, hi)) => (lo..=hi).boxed(),
        (_, Values::Special(r)) => prop_oneof![
            20 => -r..=r,
            1 => select(vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0]),
        ]
        .boxed(),
    }
}

/// A placement for a tensor of `shape`: contiguous about a third of the time, else a view with
/// permuted storage, steps, an offset and (where a dim is larger than 1) stride-0 dims.
pub fn placement(shape: &[usize], allow_expand: bool) -> impl Strategy<Value = Placement> + use<> {
    let n = shape.len();
    let shape = shape.to_vec();
    (
        0u8..3,
        Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
        vec(prop_oneof![3 => Just(1usize), 1 => Just(2usize)], n),
        0usize..3,
        vec(prop_oneof![5 => Just(false), 1 => Just(true)], n),
    )
        .prop_map(move |(kind, perm, steps, offset, expand)| {
            if kind == 0 {
                return Placement::contiguous(n);
            }
            let expanded = expand
                .iter()
                .zip(&shape)
                .map(|(e, d)| *e && allow_expand && *d > 1)
                .collect();
            Placement {
                perm,
                steps,
                offset,
                expanded,
            }
        })
}

/// An input of `shape` and `dtype` holding `vals`, placed as [`placement`] says (expanded dims
/// hold one value along them, as an expanded view does).
pub fn input(shape: Vec<usize>, dtype: DType, vals: Values) -> impl Strategy<Value = Input> {
    input_with(shape, dtype, vals, true)
}

/// [`input`] that is never expanded (for inputs that are written, or whose values must differ).
pub fn input_no_expand(
    shape: Vec<usize>,
    dtype: DType,
    vals: Values,
) -> impl Strategy<Value = Input> {
    input_with(shape, dtype, vals, false)
}

fn input_with(
    shape: Vec<usize>,
    dtype: DType,
    vals: Values,
    allow_expand: bool,
) -> impl Strategy<Value = Input> {
    let s0 = shape.clone();
    placement(&s0, allow_expand).prop_flat_map(move |place| {
        let base: Vec<usize> = shape
            .iter()
            .zip(&place.expanded)
            .map(|(d, e)| if *e { 1 } else { *d })
            .collect();
        let shape = shape.clone();
        vec(value(dtype, vals), numel(&base)).prop_map(move |data| Input {
            host: HostTensor::new(&base, dtype, data).broadcast_to(&shape),
            place: place.clone(),
        })
    })
}

/// A contiguous input (for index tensors and the like).
pub fn contiguous(shape: Vec<usize>, dtype: DType, vals: Values) -> impl Strategy<Value = Input> {
    let n = shape.len();
    vec(value(dtype, vals), numel(&shape)).prop_map(move |data| Input {
        host: HostTensor::new(&shape, dtype, data),
        place: Placement::contiguous(n),
    })
}

/// An int64/int32 index input of `shape` with values in `[lo, hi]` (any placement).
pub fn indices(shape: Vec<usize>, dtype: DType, lo: i64, hi: i64) -> impl Strategy<Value = Input> {
    let n = shape.len();
    let s0 = shape.clone();
    (placement(&s0, false), vec(lo..=hi.max(lo), numel(&shape))).prop_map(move |(place, data)| {
        Input {
            host: HostTensor::new(&shape, dtype, data.into_iter().map(|v| v as f64).collect()),
            place: if n == 0 {
                Placement::contiguous(0)
            } else {
                place
            },
        }
    })
}

/// A dim index of a rank-`n` tensor, negative half the time.
pub fn dim_of(n: usize) -> impl Strategy<Value = i64> {
    let n = n.max(1) as i64;
    (0..n, any::<bool>()).prop_map(move |(d, neg)| if neg { d - n } else { d })
}

/// A subset of the dims of a rank-`n` tensor (sorted, distinct; each written positive or
/// negative).
pub fn dims_of(n: usize) -> impl Strategy<Value = Vec<i64>> {
    (vec(any::<bool>(), n), vec(any::<bool>(), n)).prop_map(move |(pick, neg)| {
        (0..n)
            .filter(|d| pick[*d])
            .map(|d| {
                if neg[d] {
                    d as i64 - n as i64
                } else {
                    d as i64
                }
            })
            .collect()
    })
}
