//! View operators and their copying relatives: `view`, `_unsafe_view`, `reshape`,
//! `contiguous`, `permute`, `transpose`, `t`, `expand`, `slice`, `select`, `unsqueeze`,
//! `squeeze`, `as_strided`, on inputs of every placement (a view of a view must read the
//! right elements).
//!
//! The reference for whether `view` can alias is the definition: strides exist under which
//! every element of the new shape sits where the row-major order of the input puts it
//! (otherwise PyTorch raises "view size is not compatible with input tensor's size and
//! stride"). `_unsafe_view` is only ever called by decompositions on contiguous tensors, so it
//! is checked on those.

use proptest::prelude::*;
use tpuemu_backend::ops::Value;

use super::harness::{Input, Out, Sample, check, ints, t, v};
use super::reference::{HostTensor, indices, numel, unravel, wrap};
use super::strategies::{Values, any_dtype, contiguous, dim_of, input, shape};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::view", view),
    ("aten::_unsafe_view", reshape),
    ("aten::reshape", reshape),
    ("aten::contiguous", reshape),
    ("aten::permute", permute),
    ("aten::transpose.int", transpose),
    ("aten::t", transpose),
    ("aten::expand", expand),
    ("aten::slice.Tensor", slice),
    ("aten::select.int", select),
    ("aten::unsqueeze", unsqueeze_squeeze),
    ("aten::squeeze.dim", unsqueeze_squeeze),
    ("aten::as_strided", as_strided),
];

/// Any input of rank `lo..=hi`.
fn any_input(lo: usize, hi: usize) -> impl Strategy<Value = Input> {
    (super::strategies::shape_rank(lo, hi), any_dtype())
        .prop_flat_map(|(s, d)| input(s, d, Values::Special(9.0)))
}

/// A shape with the element count of `s`: dims merged, split, 1s inserted or removed, one dim
/// written as -1.
fn new_shape(s: Vec<usize>) -> impl Strategy<Value = Vec<i64>> {
    (
        proptest::collection::vec((0u8..5, any::<usize>(), any::<usize>()), 0..3),
        any::<bool>(),
        any::<usize>(),
    )
        .prop_map(move |(steps, infer, at)| {
            let mut out: Vec<usize> = s.clone();
            for (kind, a, b) in steps {
                let n = out.len();
                match kind {
                    0 if n >= 2 => {
                        let k = a % (n - 1);
                        let m = out.remove(k + 1);
                        out[k] *= m;
                    }
                    1 if n >= 1 => {
                        let k = a % n;
                        let divs: Vec<usize> =
                            (1..=out[k]).filter(|f| out[k].is_multiple_of(*f)).collect();
                        if !divs.is_empty() {
                            let f = divs[b % divs.len()];
                            let rest = out[k] / f;
                            out[k] = f;
                            out.insert(k + 1, rest);
                        }
                    }
                    2 if n < 5 => out.insert(a % (n + 1), 1),
                    3 => {
                        if let Some(k) = out.iter().position(|d| *d == 1) {
                            out.remove(k);
                        }
                    }
                    _ => {}
                }
            }
            let mut r: Vec<i64> = out.iter().map(|d| *d as i64).collect();
            // -1 is only inferable when the other dims are non-zero.
            if infer && !r.is_empty() {
                let k = at % r.len();
                let rest: usize = out
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != k)
                    .map(|(_, d)| *d)
                    .product();
                if rest != 0 {
                    r[k] = -1;
                }
            }
            r
        })
}

/// `shape` with a -1 resolved for `numel` elements.
fn resolve(shape: &[i64], numel: usize) -> Vec<usize> {
    let known: usize = shape
        .iter()
        .filter(|d| **d >= 0)
        .map(|d| *d as usize)
        .product();
    shape
        .iter()
        .map(|d| if *d < 0 { numel / known } else { *d as usize })
        .collect()
}

/// Whether the elements of `x` (in row-major order) can be seen with `new` over the same
/// storage: strides exist that put each element where it is.
fn viewable(x: &Input, new: &[usize]) -> bool {
    let n = numel(new);
    if n == 0 || x.host.dim() == 0 {
        return true;
    }
    let (strides, _) = x.place.strides(&x.host.shape);
    let pos: Vec<i64> = indices(&x.host.shape)
        .map(|i| i.iter().zip(&strides).map(|(a, b)| (a * b) as i64).sum())
        .collect();
    let unit = |d: usize| -> Option<i64> {
        (new[d] > 1).then(|| {
            let mut i = vec![0; new.len()];
            i[d] = 1;
            pos[super::reference::ravel(&i, new)] - pos[0]
        })
    };
    let ns: Vec<i64> = (0..new.len()).map(|d| unit(d).unwrap_or(0)).collect();
    (0..n).all(|f| {
        let i = unravel(f, new);
        let off: i64 = i.iter().zip(&ns).map(|(a, b)| *a as i64 * b).sum();
        pos[f] - pos[0] == off
    })
}

/// Inputs from `inputs`, each with a new shape for its elements (see [`new_shape`]).
fn with_new_shape(
    inputs: impl Strategy<Value = Input>,
) -> impl Strategy<Value = (Input, Vec<i64>)> {
    inputs.prop_flat_map(|x| {
        let s = x.host.shape.clone();
        (Just(x), new_shape(s))
    })
}

/// Samples of a reshaping operator (`reshape`, `_unsafe_view`): the input's elements in
/// row-major order under a new shape.
fn reshaped(inputs: impl Strategy<Value = Input>) -> impl Strategy<Value = Sample> {
    with_new_shape(inputs).prop_map(|(x, shape)| {
        let new = resolve(&shape, x.host.numel());
        let want = x.host.reshaped(&new);
        Sample::new(vec![t(x), v(ints(&shape))], vec![Out::exact(want)])
    })
}

#[test]
fn view() {
    check(
        "aten::view",
        with_new_shape(any_input(0, 4)).prop_map(|(x, shape)| {
            let new = resolve(&shape, x.host.numel());
            let args = vec![t(x.clone()), v(ints(&shape))];
            if viewable(&x, &new) {
                Sample::new(args, vec![Out::exact(x.host.reshaped(&new))])
            } else {
                Sample::error(args, &["view size is not compatible"])
            }
        }),
    );
}

#[test]
fn reshape() {
    check("aten::reshape", reshaped(any_input(0, 4)));
    check(
        "aten::_unsafe_view",
        reshaped(
            (shape(), any_dtype()).prop_flat_map(|(s, d)| contiguous(s, d, Values::Range(9.0))),
        ),
    );
    check(
        "aten::contiguous",
        any_input(0, 4).prop_map(|x| {
            let want = x.host.clone();
            Sample::new(vec![t(x)], vec![Out::exact(want)])
        }),
    );
}

#[test]
fn permute() {
    check(
        "aten::permute",
        any_input(0, 4)
            .prop_flat_map(|x| {
                let n = x.host.dim();
                (
                    Just(x),
                    Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
                    proptest::collection::vec(any::<bool>(), n),
                )
            })
            .prop_map(|(x, perm, neg)| {
                let n = perm.len() as i64;
                let dims: Vec<i64> = perm
                    .iter()
                    .zip(&neg)
                    .map(|(p, ng)| if *ng { *p as i64 - n } else { *p as i64 })
                    .collect();
                let want = x.host.permuted(&perm);
                Sample::new(vec![t(x), v(ints(&dims))], vec![Out::exact(want)])
            }),
    );
}

#[test]
fn transpose() {
    check(
        "aten::transpose.int",
        any_input(0, 4)
            .prop_flat_map(|x| {
                let n = x.host.dim();
                (Just(x), dim_of(n), dim_of(n))
            })
            .prop_map(|(x, a, b)| {
                let n = x.host.dim();
                let mut perm: Vec<usize> = (0..n).collect();
                if n > 0 {
                    perm.swap(wrap(a, n), wrap(b, n));
                }
                let want = x.host.permuted(&perm);
                Sample::new(
                    vec![t(x), v(Value::Int(a)), v(Value::Int(b))],
                    vec![Out::exact(want)],
                )
            }),
    );
    check(
        "aten::t",
        any_input(0, 2).prop_map(|x| {
            let perm: Vec<usize> = (0..x.host.dim()).rev().collect();
            let want = x.host.permuted(&perm);
            Sample::new(vec![t(x)], vec![Out::exact(want)])
        }),
    );
}

#[test]
fn expand() {
    check(
        "aten::expand",
        any_input(0, 3)
            .prop_flat_map(|x| {
                let n = x.host.dim();
                (
                    Just(x),
                    proptest::collection::vec(0usize..4, 0..=2),
                    proptest::collection::vec((0usize..4, any::<bool>()), n),
                )
            })
            .prop_map(|(x, lead, per)| {
                let mut sizes: Vec<i64> = lead.iter().map(|d| *d as i64).collect();
                let mut shape = lead.clone();
                for (d, (new, minus)) in x.host.shape.iter().zip(&per) {
                    let s = if *d == 1 { *new } else { *d };
                    shape.push(s);
                    sizes.push(if *minus && s == *d { -1 } else { s as i64 });
                }
                let want = x.host.broadcast_to(&shape);
                Sample::new(vec![t(x), v(ints(&sizes))], vec![Out::exact(want)])
            }),
    );
}

#[test]
fn slice() {
    let bound = || prop_oneof![1 => Just(None), 3 => (-7i64..=7).prop_map(Some)];
    check(
        "aten::slice.Tensor",
        any_input(1, 4)
            .prop_flat_map(move |x| {
                let n = x.host.dim();
                (Just(x), dim_of(n), bound(), bound(), 1i64..=3)
            })
            .prop_map(|(x, dim, start, end, step)| {
                let d = wrap(dim, x.host.dim());
                let n = x.host.shape[d] as i64;
                let clamp = |b: i64| if b < 0 { (b + n).clamp(0, n) } else { b.min(n) };
                let s = clamp(start.unwrap_or(0));
                let e = clamp(end.unwrap_or(n)).max(s);
                let len = ((e - s + step - 1) / step) as usize;
                let mut shape = x.host.shape.clone();
                shape[d] = len;
                let want = HostTensor::from_fn(&shape, x.host.dtype, |i| {
                    let mut src = i.to_vec();
                    src[d] = (s + i[d] as i64 * step) as usize;
                    x.host.at(&src)
                });
                let opt = |b: Option<i64>| b.map_or(Value::None, Value::Int);
                Sample::new(
                    vec![
                        t(x),
                        v(Value::Int(dim)),
                        v(opt(start)),
                        v(opt(end)),
                        v(Value::Int(step)),
                    ],
                    vec![Out::exact(want)],
                )
            }),
    );
}

#[test]
fn select() {
    check(
        "aten::select.int",
        any_input(1, 4)
            .prop_filter("a dim with elements", |x| {
                x.host.shape.iter().any(|d| *d > 0)
            })
            .prop_flat_map(|x| {
                let n = x.host.dim();
                (Just(x), dim_of(n), any::<usize>(), any::<bool>())
            })
            .prop_filter("select needs a non-empty dim", |(x, dim, _, _)| {
                x.host.shape[wrap(*dim, x.host.dim())] > 0
            })
            .prop_map(|(x, dim, k, neg)| {
                let d = wrap(dim, x.host.dim());
                let n = x.host.shape[d];
                let i = k % n;
                let index = if neg { i as i64 - n as i64 } else { i as i64 };
                let mut shape = x.host.shape.clone();
                shape.remove(d);
                let want = HostTensor::from_fn(&shape, x.host.dtype, |o| {
                    let mut src = o.to_vec();
                    src.insert(d, i);
                    x.host.at(&src)
                });
                Sample::new(
                    vec![t(x), v(Value::Int(dim)), v(Value::Int(index))],
                    vec![Out::exact(want)],
                )
            }),
    );
}

#[test]
fn unsqueeze_squeeze() {
    check(
        "aten::unsqueeze",
        any_input(0, 4)
            .prop_flat_map(|x| {
                let n = x.host.dim();
                (Just(x), dim_of(n + 1))
            })
            .prop_map(|(x, dim)| {
                let mut shape = x.host.shape.clone();
                shape.insert(wrap(dim, x.host.dim() + 1), 1);
                let want = x.host.reshaped(&shape);
                Sample::new(vec![t(x), v(Value::Int(dim))], vec![Out::exact(want)])
            }),
    );
    check(
        "aten::squeeze.dim",
        any_input(0, 4)
            .prop_flat_map(|x| {
                let n = x.host.dim();
                (Just(x), dim_of(n))
            })
            .prop_map(|(x, dim)| {
                let mut shape = x.host.shape.clone();
                if !shape.is_empty() {
                    let d = wrap(dim, shape.len());
                    if shape[d] == 1 {
                        shape.remove(d);
                    }
                }
                let want = x.host.reshaped(&shape);
                Sample::new(vec![t(x), v(Value::Int(dim))], vec![Out::exact(want)])
            }),
    );
}

#[test]
fn as_strided() {
    // A contiguous input: its storage is its values.
    check(
        "aten::as_strided",
        ((1usize..=40), any_dtype())
            .prop_flat_map(|(n, d)| contiguous(vec![n], d, Values::Range(9.0)))
            .prop_flat_map(|x| {
                (
                    Just(x),
                    proptest::collection::vec((0usize..=3, 0usize..=4), 0..=3),
                    0usize..4,
                    any::<bool>(),
                )
            })
            .prop_map(|(x, dims, off, give_offset)| {
                let len = x.host.numel();
                let offset = if give_offset { off.min(len - 1) } else { 0 };
                // Shrink sizes until the view fits in the storage.
                let mut sizes: Vec<usize> = dims.iter().map(|d| d.0).collect();
                let strides: Vec<usize> = dims.iter().map(|d| d.1).collect();
                let span = |s: &[usize]| -> usize {
                    s.iter()
                        .zip(&strides)
                        .map(|(a, b)| a.saturating_sub(1) * b)
                        .sum()
                };
                while numel(&sizes) > 0 && offset + span(&sizes) >= len {
                    let k = sizes.iter().position(|s| *s > 1).unwrap_or(0);
                    sizes[k] -= 1;
                }
                let want = HostTensor::from_fn(&sizes, x.host.dtype, |i| {
                    let p: usize = i.iter().zip(&strides).map(|(a, b)| a * b).sum();
                    x.host.data[offset + p]
                });
                let as_i = |xs: &[usize]| ints(&xs.iter().map(|d| *d as i64).collect::<Vec<_>>());
                let off = if give_offset {
                    Value::Int(offset as i64)
                } else {
                    Value::None
                };
                Sample::new(
                    vec![t(x), v(as_i(&sizes)), v(as_i(&strides)), v(off)],
                    vec![Out::exact(want)],
                )
            }),
    );
}
