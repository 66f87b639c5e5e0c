//! Data movement: joining and splitting (`cat`, `stack`, `split`), indexing (`index_select`,
//! `gather`, `embedding`) and regions (`masked_fill`, `tril`, `triu`, `constant_pad_nd`,
//! `flip`), over every dtype and placement, with int32 and int64 indices (themselves views).
//!
//! `cat` promotes its inputs to their common dtype and, as PyTorch's legacy rule says, lets
//! 1-D empty tensors take part whatever the other shapes.

use proptest::collection::vec;
use proptest::prelude::*;
use tpuemu_backend::DType;
use tpuemu_backend::ops::Value;

use super::harness::{Arg, Input, Out, Sample, check, ints, scalar_value, t, v};
use super::reference::{HostTensor, promote, round, wrap, zip_map};
use super::strategies::{
    Values, any_dtype, dim_of, dims_of, index_dtype, indices, input, number, shape, shape_rank,
};

/// The overloads this file covers.
pub const OPS: &[(&str, fn())] = &[
    ("aten::cat", cat),
    ("aten::stack", stack),
    ("aten::split.Tensor", split),
    ("aten::index_select", index_select),
    ("aten::gather", gather),
    ("aten::embedding", embedding),
    ("aten::masked_fill.Scalar", masked_fill),
    ("aten::masked_fill.Tensor", masked_fill),
    ("aten::tril", triangles),
    ("aten::triu", triangles),
    ("aten::constant_pad_nd", constant_pad_nd),
    ("aten::flip", flip),
];

/// Joins `parts` along `d` (all of one rank), converting to `dtype`.
fn join(parts: &[&HostTensor], d: usize, dtype: DType) -> HostTensor {
    let mut shape = parts[0].shape.clone();
    shape[d] = parts.iter().map(|p| p.shape[d]).sum();
    HostTensor::from_fn(&shape, dtype, |i| {
        let mut k = i[d];
        for p in parts {
            if k < p.shape[d] {
                let mut src = i.to_vec();
                src[d] = k;
                return p.at(&src);
            }
            k -= p.shape[d];
        }
        unreachable!("index inside the join")
    })
}

#[test]
fn cat() {
    check(
        "aten::cat",
        (
            shape_rank(1, 4),
            vec((0usize..4, any_dtype(), 0u8..8), 1..=4),
            any::<bool>(),
        )
            .prop_flat_map(|(base, parts, neg)| {
                let n = base.len();
                let d = (parts.len() + base.iter().sum::<usize>()) % n;
                let dim = if neg { d as i64 - n as i64 } else { d as i64 };
                let ins: Vec<_> = parts
                    .iter()
                    .map(|(len, dt, legacy)| {
                        // Now and then a legacy empty 1-D tensor.
                        let s = if *legacy == 0 {
                            vec![0]
                        } else {
                            let mut s = base.clone();
                            s[d] = *len;
                            s
                        };
                        input(s, *dt, Values::Range(9.0))
                    })
                    .collect();
                (ins, Just(dim))
            })
            .prop_map(|(ins, dim)| {
                let dtype = ins
                    .iter()
                    .map(|x| x.host.dtype)
                    .reduce(promote)
                    .expect("one input");
                let kept: Vec<&HostTensor> = ins
                    .iter()
                    .map(|x| &x.host)
                    .filter(|h| !(h.dim() == 1 && h.numel() == 0))
                    .collect();
                let want = if kept.is_empty() {
                    HostTensor::new(&[0], dtype, vec![])
                } else {
                    join(&kept, wrap(dim, kept[0].dim()), dtype)
                };
                Sample::new(
                    vec![Arg::Ts(ins), v(Value::Int(dim))],
                    vec![Out::exact(want)],
                )
            }),
    );
}

#[test]
fn stack() {
    check(
        "aten::stack",
        (shape_rank(0, 3), vec(any_dtype(), 1..=4))
            .prop_flat_map(|(s, dts)| {
                let n = s.len();
                let ins: Vec<_> = dts
                    .iter()
                    .map(|d| input(s.clone(), *d, Values::Range(9.0)))
                    .collect();
                (ins, dim_of(n + 1))
            })
            .prop_map(|(ins, dim)| {
                let dtype = ins
                    .iter()
                    .map(|x| x.host.dtype)
                    .reduce(promote)
                    .expect("one");
                let d = wrap(dim, ins[0].host.dim() + 1);
                let parts: Vec<HostTensor> = ins
                    .iter()
                    .map(|x| {
                        let mut s = x.host.shape.clone();
                        s.insert(d, 1);
                        x.host.reshaped(&s)
                    })
                    .collect();
                let refs: Vec<&HostTensor> = parts.iter().collect();
                let want = join(&refs, d, dtype);
                Sample::new(
                    vec![Arg::Ts(ins), v(Value::Int(dim))],
                    vec![Out::exact(want)],
                )
            }),
    );
}

#[test]
fn split() {
    check(
        "aten::split.Tensor",
        (shape_rank(1, 4), any_dtype())
            .prop_flat_map(|(s, d)| {
                let n = s.len();
                (input(s, d, Values::Range(9.0)), dim_of(n), 1i64..=5)
            })
            .prop_map(|(x, dim, size)| {
                let d = wrap(dim, x.host.dim());
                let n = x.host.shape[d];
                let mut outs = Vec::new();
                let mut at = 0usize;
                loop {
                    let len = (size as usize).min(n - at);
                    let mut shape = x.host.shape.clone();
                    shape[d] = len;
                    outs.push(Out::exact(HostTensor::from_fn(&shape, x.host.dtype, |i| {
                        let mut src = i.to_vec();
                        src[d] += at;
                        x.host.at(&src)
                    })));
                    at += len;
                    if at >= n {
                        break;
                    }
                }
                Sample::new(vec![t(x), v(Value::Int(size)), v(Value::Int(dim))], outs)
            }),
    );
}

#[test]
fn index_select() {
    check(
        "aten::index_select",
        (
            shape_rank(0, 4),
            any_dtype(),
            index_dtype(),
            0usize..6,
            any::<bool>(),
        )
            .prop_flat_map(|(s, d, id, count, scalar)| {
                let n = s.len();
                (
                    Just(s.clone()),
                    input(s, d, Values::Range(9.0)),
                    dim_of(n),
                    Just((id, count, scalar)),
                )
            })
            .prop_flat_map(|(s, x, dim, (id, count, scalar))| {
                let size = if s.is_empty() {
                    1
                } else {
                    s[wrap(dim, s.len())]
                };
                // A 0-dim index (one value), or a vector; none when the dim is empty.
                let ishape = if scalar || s.is_empty() {
                    vec![]
                } else if size == 0 {
                    vec![0]
                } else {
                    vec![count]
                };
                let ishape = if size == 0 && ishape.is_empty() {
                    vec![0]
                } else {
                    ishape
                };
                (Just(x), Just(dim), indices(ishape, id, 0, size as i64 - 1))
            })
            .prop_map(|(x, dim, idx)| {
                let h = &x.host;
                let want = if h.dim() == 0 {
                    h.clone()
                } else {
                    let d = wrap(dim, h.dim());
                    let mut shape = h.shape.clone();
                    shape[d] = idx.host.numel();
                    HostTensor::from_fn(&shape, h.dtype, |i| {
                        let mut src = i.to_vec();
                        src[d] = idx.host.data[i[d]] as usize;
                        h.at(&src)
                    })
                };
                Sample::new(
                    vec![t(x), v(Value::Int(dim)), t(idx)],
                    vec![Out::exact(want)],
                )
            }),
    );
}

#[test]
fn gather() {
    check(
        "aten::gather",
        (shape_rank(1, 4), any_dtype(), index_dtype())
            .prop_map(|(s, d, id)| (s.into_iter().map(|k| k.max(1)).collect::<Vec<_>>(), d, id))
            .prop_flat_map(|(s, d, id)| {
                let n = s.len();
                let per: Vec<_> = s.iter().map(|k| 0..=*k).collect();
                (
                    input(s, d, Values::Range(9.0)),
                    dim_of(n),
                    per,
                    0usize..5,
                    Just(id),
                )
            })
            .prop_flat_map(|(x, dim, mut ishape, len_d, id)| {
                let d = wrap(dim, x.host.dim());
                ishape[d] = len_d;
                let size = x.host.shape[d] as i64;
                (Just(x), Just(dim), indices(ishape, id, 0, size - 1))
            })
            .prop_map(|(x, dim, idx)| {
                let d = wrap(dim, x.host.dim());
                let want = HostTensor::from_fn(&idx.host.shape, x.host.dtype, |i| {
                    let mut src = i.to_vec();
                    src[d] = idx.host.at(i) as usize;
                    x.host.at(&src)
                });
                Sample::new(
                    vec![t(x), v(Value::Int(dim)), t(idx)],
                    vec![Out::exact(want)],
                )
            }),
    );
}

#[test]
fn embedding() {
    check(
        "aten::embedding",
        (
            1usize..8,
            0usize..6,
            shape_rank(0, 3),
            any_dtype(),
            index_dtype(),
            any::<bool>(),
        )
            .prop_flat_map(|(rows, dim, ishape, d, id, extra)| {
                (
                    input(vec![rows, dim], d, Values::Range(9.0)),
                    indices(ishape, id, 0, rows as i64 - 1),
                    Just(extra),
                )
            })
            .prop_map(|(w, idx, extra)| {
                let dim = w.host.shape[1];
                let mut shape = idx.host.shape.clone();
                shape.push(dim);
                let want = HostTensor::from_fn(&shape, w.host.dtype, |i| {
                    let n = i.len();
                    w.host.at(&[idx.host.at(&i[..n - 1]) as usize, i[n - 1]])
                });
                let mut args = vec![t(w), t(idx)];
                if extra {
                    // The backward-only arguments, as PyTorch passes them.
                    args.extend([
                        v(Value::Int(-1)),
                        v(Value::Bool(false)),
                        v(Value::Bool(false)),
                    ]);
                }
                Sample::new(args, vec![Out::exact(want)])
            }),
    );
}

fn masked_pair() -> impl Strategy<Value = (Input, Input)> {
    (super::strategies::broadcast_pair(), any_dtype()).prop_flat_map(|((sx, sm), d)| {
        (
            input(sx, d, Values::Special(9.0)),
            input(sm, DType::Bool, Values::Range(1.0)),
        )
    })
}

fn masked_ref(x: &HostTensor, mask: &HostTensor, value: f64) -> HostTensor {
    let fill = round(value, x.dtype);
    zip_map(
        &[x, mask],
        x.dtype,
        |e| if e[1] != 0.0 { fill } else { e[0] },
    )
}

#[test]
fn masked_fill() {
    check(
        "aten::masked_fill.Scalar",
        (masked_pair(), number()).prop_map(|((x, m), n)| {
            let want = masked_ref(&x.host, &m.host, n.to_f64());
            Sample::new(vec![t(x), t(m), v(scalar_value(n))], vec![Out::exact(want)])
        }),
    );
    check(
        "aten::masked_fill.Tensor",
        (masked_pair(), any_dtype())
            .prop_flat_map(|(xm, d)| (Just(xm), input(vec![], d, Values::Range(9.0))))
            .prop_map(|((x, m), val)| {
                let want = masked_ref(&x.host, &m.host, val.host.data[0]);
                Sample::new(vec![t(x), t(m), t(val)], vec![Out::exact(want)])
            }),
    );
}

#[test]
fn triangles() {
    for (op, lower) in [("aten::tril", true), ("aten::triu", false)] {
        check(
            op,
            (
                shape_rank(2, 4),
                any_dtype(),
                prop_oneof![Just(None), (-6i64..=6).prop_map(Some)],
            )
                .prop_flat_map(|(s, d, k)| (input(s, d, Values::Range(9.0)), Just(k)))
                .prop_map(move |(x, k)| {
                    let kk = k.unwrap_or(0);
                    let n = x.host.dim();
                    let want = HostTensor::from_fn(&x.host.shape, x.host.dtype, |i| {
                        let diff = i[n - 1] as i64 - i[n - 2] as i64;
                        let keep = if lower { diff <= kk } else { diff >= kk };
                        if keep { x.host.at(i) } else { 0.0 }
                    });
                    let mut args = vec![t(x)];
                    args.extend(k.map(|k| v(Value::Int(k))));
                    Sample::new(args, vec![Out::exact(want)])
                }),
        );
    }
}

#[test]
fn constant_pad_nd() {
    check(
        "aten::constant_pad_nd",
        (shape_rank(1, 4), any_dtype())
            .prop_flat_map(|(s, d)| {
                let n = s.len();
                (
                    input(s, d, Values::Range(9.0)),
                    vec((-2i64..=3, -2i64..=3), 0..=n),
                    prop_oneof![Just(None), number().prop_map(Some)],
                )
            })
            .prop_map(|(x, pairs, value)| {
                let n = x.host.dim();
                // Crops no deeper than the dim is long.
                let mut pad = Vec::new();
                let mut shape = x.host.shape.clone();
                let mut lo = vec![0i64; n];
                for (k, (a, b)) in pairs.iter().enumerate() {
                    let d = n - 1 - k;
                    let size = shape[d] as i64;
                    let a = (*a).max(-size);
                    let b = (*b).max(-(size + a));
                    pad.extend([a, b]);
                    lo[d] = a;
                    shape[d] = (size + a + b) as usize;
                }
                let fill = value.map_or(0.0, |s| s.to_f64());
                let want = HostTensor::from_fn(&shape, x.host.dtype, |i| {
                    let src: Vec<i64> = i.iter().zip(&lo).map(|(a, l)| *a as i64 - l).collect();
                    let inside = src
                        .iter()
                        .zip(&x.host.shape)
                        .all(|(s, n)| *s >= 0 && *s < *n as i64);
                    if inside {
                        x.host
                            .at(&src.iter().map(|s| *s as usize).collect::<Vec<_>>())
                    } else {
                        fill
                    }
                });
                let mut args = vec![t(x), v(ints(&pad))];
                args.extend(value.map(|s| v(scalar_value(s))));
                Sample::new(args, vec![Out::exact(want)])
            }),
    );
}

#[test]
fn flip() {
    check(
        "aten::flip",
        (shape(), any_dtype())
            .prop_flat_map(|(s, d)| {
                let n = s.len();
                (input(s, d, Values::Range(9.0)), dims_of(n))
            })
            .prop_map(|(x, dims)| {
                let n = x.host.dim();
                let ds: Vec<usize> = dims.iter().map(|d| wrap(*d, n)).collect();
                let want = HostTensor::from_fn(&x.host.shape, x.host.dtype, |i| {
                    let src: Vec<usize> = i
                        .iter()
                        .enumerate()
                        .map(|(k, a)| {
                            if ds.contains(&k) {
                                x.host.shape[k] - 1 - a
                            } else {
                                *a
                            }
                        })
                        .collect();
                    x.host.at(&src)
                });
                Sample::new(vec![t(x), v(ints(&dims))], vec![Out::exact(want)])
            }),
    );
}
