//! The random operators' registry entries (argument positions are PyTorch's schemas').

use super::super::Value;
use super::super::args::Args;
use super::super::registry::{OpDef, OpImpl};
use super::super::sharding::Sharding;
use super::*;

const NOTE: &str = "random values depend on the global element index and the stream";

fn dtype_or(a: &Args, i: usize, d: DType) -> Result<DType> {
    Ok(a.opt_dtype(i)?.unwrap_or(d))
}

fn size(a: &Args, i: usize) -> Result<Vec<usize>> {
    shape_of(&a.ints(i)?)
}

fn kernel(name: &'static str, dtypes: &'static [DType], run: super::super::RunFn) -> OpDef {
    OpDef::new(name, OpImpl::Kernel, dtypes, run).shard(Sharding::Replicate(NOTE))
}

fn distributions() -> Vec<OpDef> {
    vec![
        kernel("aten::uniform", FLOAT, |_, a| {
            let x = Dest::Like(a.tensor(0)?);
            t1(uniform(
                "aten::uniform",
                x,
                a.float(1)?,
                a.float(2)?,
                generator(a, 3),
            ))
        }),
        kernel("aten::uniform_", FLOAT, |_, a| {
            let x = Dest::Into(a.tensor(0)?);
            t1(uniform(
                "aten::uniform_",
                x,
                a.float(1)?,
                a.float(2)?,
                generator(a, 3),
            ))
        }),
        kernel("aten::normal_functional", FLOAT, |rt, a| {
            let x = a.tensor(0)?;
            let (m, s) = (Ok(a.float(1)?), Ok(a.float(2)?));
            let g = generator(a, 3);
            t1(normal(
                "aten::normal_functional",
                rt,
                x.shape(),
                x.dtype(),
                m,
                s,
                None,
                g,
            ))
        }),
        kernel("aten::normal_", FLOAT, |rt, a| {
            let x = a.tensor(0)?;
            let (m, s) = (Ok(a.float(1)?), Ok(a.float(2)?));
            let g = generator(a, 3);
            t1(normal(
                "aten::normal_",
                rt,
                x.shape(),
                x.dtype(),
                m,
                s,
                Some(x),
                g,
            ))
        }),
        kernel("aten::normal.Tensor_float", FLOAT, |rt, a| {
            let m = a.tensor(0)?;
            let s = Ok(a.float(1)?);
            let name = "aten::normal.Tensor_float";
            t1(normal(
                name,
                rt,
                m.shape(),
                m.dtype(),
                Err(m),
                s,
                None,
                generator(a, 2),
            ))
        }),
        kernel("aten::normal.float_Tensor", FLOAT, |rt, a| {
            let s = a.tensor(1)?;
            let m = Ok(a.float(0)?);
            let name = "aten::normal.float_Tensor";
            t1(normal(
                name,
                rt,
                s.shape(),
                s.dtype(),
                m,
                Err(s),
                None,
                generator(a, 2),
            ))
        }),
        kernel("aten::normal.Tensor_Tensor", FLOAT, |rt, a| {
            let (m, s) = (a.tensor(0)?, a.tensor(1)?);
            let shape = broadcast_shapes(m.shape(), s.shape())?;
            let name = "aten::normal.Tensor_Tensor";
            t1(normal(
                name,
                rt,
                &shape,
                m.dtype(),
                Err(m),
                Err(s),
                None,
                generator(a, 2),
            ))
        }),
        kernel("aten::normal.float_float", FLOAT, |rt, a| {
            let (m, s) = (Ok(a.float(0)?), Ok(a.float(1)?));
            let d = dtype_or(a, 4, DType::F32)?;
            let name = "aten::normal.float_float";
            t1(normal(
                name,
                rt,
                &size(a, 2)?,
                d,
                m,
                s,
                None,
                generator(a, 3),
            ))
        }),
        kernel("aten::bernoulli", FLOAT, |_, a| {
            let x = a.tensor(0)?;
            t1(bernoulli(
                "aten::bernoulli",
                Dest::Like(x),
                Err(x),
                generator(a, 1),
            ))
        }),
        kernel("aten::bernoulli.p", ALL, |_, a| {
            let x = Dest::Like(a.tensor(0)?);
            t1(bernoulli(
                "aten::bernoulli.p",
                x,
                Ok(a.float(1)?),
                generator(a, 2),
            ))
        }),
        kernel("aten::bernoulli.Tensor", ALL, |_, a| {
            let x = Dest::Like(a.tensor(0)?);
            let p = Err(a.tensor(1)?);
            t1(bernoulli("aten::bernoulli.Tensor", x, p, generator(a, 2)))
        }),
        kernel("aten::bernoulli_.float", ALL, |_, a| {
            let x = Dest::Into(a.tensor(0)?);
            t1(bernoulli(
                "aten::bernoulli_.float",
                x,
                Ok(a.float(1)?),
                generator(a, 2),
            ))
        }),
        kernel("aten::bernoulli_.Tensor", ALL, |_, a| {
            let x = Dest::Into(a.tensor(0)?);
            let p = Err(a.tensor(1)?);
            t1(bernoulli("aten::bernoulli_.Tensor", x, p, generator(a, 2)))
        }),
    ]
}

fn transforms() -> Vec<OpDef> {
    vec![
        kernel("aten::exponential", FLOAT, |_, a| {
            t1(exponential(
                Dest::Like(a.tensor(0)?),
                a.float(1)?,
                generator(a, 2),
            ))
        }),
        kernel("aten::exponential_", FLOAT, |_, a| {
            t1(exponential(
                Dest::Into(a.tensor(0)?),
                a.float(1)?,
                generator(a, 2),
            ))
        }),
        kernel("aten::geometric", FLOAT, |_, a| {
            t1(geometric(
                Dest::Like(a.tensor(0)?),
                a.float(1)?,
                generator(a, 2),
            ))
        }),
        kernel("aten::geometric_", FLOAT, |_, a| {
            t1(geometric(
                Dest::Into(a.tensor(0)?),
                a.float(1)?,
                generator(a, 2),
            ))
        }),
        kernel("aten::log_normal", FLOAT, |_, a| {
            let x = Dest::Like(a.tensor(0)?);
            t1(log_normal(x, a.float(1)?, a.float(2)?, generator(a, 3)))
        }),
        kernel("aten::log_normal_", FLOAT, |_, a| {
            let x = Dest::Into(a.tensor(0)?);
            t1(log_normal(x, a.float(1)?, a.float(2)?, generator(a, 3)))
        }),
        kernel("aten::cauchy", FLOAT, |_, a| {
            let x = Dest::Like(a.tensor(0)?);
            t1(cauchy(x, a.float(1)?, a.float(2)?, generator(a, 3)))
        }),
        kernel("aten::cauchy_", FLOAT, |_, a| {
            let x = Dest::Into(a.tensor(0)?);
            t1(cauchy(x, a.float(1)?, a.float(2)?, generator(a, 3)))
        }),
    ]
}

fn integers() -> Vec<OpDef> {
    vec![
        kernel("aten::random", ALL, |_, a| {
            let x = Dest::Like(a.tensor(0)?);
            t1(random_from("aten::random", x, 0, None, generator(a, 1)))
        }),
        kernel("aten::random_", ALL, |_, a| {
            let x = Dest::Into(a.tensor(0)?);
            t1(random_from("aten::random_", x, 0, None, generator(a, 1)))
        }),
        kernel("aten::random.from", ALL, |_, a| {
            let x = Dest::Like(a.tensor(0)?);
            let (f, t) = (a.int(1)?, a.opt_int(2)?);
            t1(random_from("aten::random.from", x, f, t, generator(a, 3)))
        }),
        kernel("aten::random_.from", ALL, |_, a| {
            let x = Dest::Into(a.tensor(0)?);
            let (f, t) = (a.int(1)?, a.opt_int(2)?);
            t1(random_from("aten::random_.from", x, f, t, generator(a, 3)))
        }),
        kernel("aten::random.to", ALL, |_, a| {
            let x = Dest::Like(a.tensor(0)?);
            t1(random_range(
                "aten::random.to",
                x,
                0,
                a.int(1)?,
                generator(a, 2),
            ))
        }),
        kernel("aten::random_.to", ALL, |_, a| {
            let x = Dest::Into(a.tensor(0)?);
            t1(random_range(
                "aten::random_.to",
                x,
                0,
                a.int(1)?,
                generator(a, 2),
            ))
        }),
    ]
}

/// A fresh tensor of `size` and `dtype` filled by `f`.
fn fresh(
    rt: &Runtime,
    size: &[usize],
    dtype: DType,
    f: impl FnOnce(Dest) -> Result<Tensor>,
) -> Result<Vec<Value>> {
    let x = empty(rt, size, dtype)?;
    t1(f(Dest::Into(&x)))
}

fn factories() -> Vec<OpDef> {
    vec![
        kernel("aten::rand", FLOAT, |rt, a| {
            fresh(rt, &size(a, 0)?, dtype_or(a, 1, DType::F32)?, |x| {
                uniform("aten::rand", x, 0.0, 1.0, None)
            })
        }),
        kernel("aten::rand.generator", FLOAT, |rt, a| {
            let g = generator(a, 1);
            fresh(rt, &size(a, 0)?, dtype_or(a, 2, DType::F32)?, |x| {
                uniform("aten::rand.generator", x, 0.0, 1.0, g)
            })
        }),
        kernel("aten::randn", FLOAT, |rt, a| {
            let d = dtype_or(a, 1, DType::F32)?;
            t1(normal(
                "aten::randn",
                rt,
                &size(a, 0)?,
                d,
                Ok(0.0),
                Ok(1.0),
                None,
                None,
            ))
        }),
        kernel("aten::randn.generator", FLOAT, |rt, a| {
            let d = dtype_or(a, 2, DType::F32)?;
            let (s, g) = (size(a, 0)?, generator(a, 1));
            t1(normal(
                "aten::randn.generator",
                rt,
                &s,
                d,
                Ok(0.0),
                Ok(1.0),
                None,
                g,
            ))
        }),
        kernel("aten::randint", ALL, |rt, a| {
            let high = a.int(0)?;
            fresh(rt, &size(a, 1)?, dtype_or(a, 2, DType::I64)?, |x| {
                random_range("aten::randint", x, 0, high, None)
            })
        }),
        kernel("aten::randint.generator", ALL, |rt, a| {
            let (high, g) = (a.int(0)?, generator(a, 2));
            fresh(rt, &size(a, 1)?, dtype_or(a, 3, DType::I64)?, |x| {
                random_range("aten::randint.generator", x, 0, high, g)
            })
        }),
        kernel("aten::randint.low", ALL, |rt, a| {
            let (low, high) = (a.int(0)?, a.int(1)?);
            fresh(rt, &size(a, 2)?, dtype_or(a, 3, DType::I64)?, |x| {
                random_range("aten::randint.low", x, low, high, None)
            })
        }),
        kernel("aten::randint.low_generator", ALL, |rt, a| {
            let (low, high, g) = (a.int(0)?, a.int(1)?, generator(a, 3));
            fresh(rt, &size(a, 2)?, dtype_or(a, 4, DType::I64)?, |x| {
                random_range("aten::randint.low_generator", x, low, high, g)
            })
        }),
        kernel("aten::rand_like", FLOAT, |rt, a| {
            let x = a.tensor(0)?;
            fresh(rt, x.shape(), dtype_or(a, 1, x.dtype())?, |x| {
                uniform("aten::rand_like", x, 0.0, 1.0, None)
            })
        }),
        kernel("aten::randn_like", FLOAT, |rt, a| {
            let x = a.tensor(0)?;
            let d = dtype_or(a, 1, x.dtype())?;
            t1(normal(
                "aten::randn_like",
                rt,
                x.shape(),
                d,
                Ok(0.0),
                Ok(1.0),
                None,
                None,
            ))
        }),
        kernel("aten::randint_like", ALL, |rt, a| {
            let (x, high) = (a.tensor(0)?, a.int(1)?);
            fresh(rt, x.shape(), dtype_or(a, 2, x.dtype())?, |x| {
                random_range("aten::randint_like", x, 0, high, None)
            })
        }),
        kernel("aten::randint_like.low_dtype", ALL, |rt, a| {
            let (x, low, high) = (a.tensor(0)?, a.int(1)?, a.int(2)?);
            fresh(rt, x.shape(), dtype_or(a, 3, x.dtype())?, |x| {
                random_range("aten::randint_like.low_dtype", x, low, high, None)
            })
        }),
    ]
}

fn dropout() -> Vec<OpDef> {
    vec![
        kernel("aten::native_dropout", FLOAT, |_, a| {
            let train = !matches!(a.get(2), Some(Value::Bool(false)));
            let (o, m) = native_dropout(a.tensor(0)?, a.float(1)?, train)?;
            Ok(vec![Value::Tensor(o), Value::Tensor(m)])
        }),
        OpDef::new(
            "aten::native_dropout_backward",
            OpImpl::Kernel,
            ALL,
            |_, a| {
                t1(native_dropout_backward(
                    a.tensor(0)?,
                    a.tensor(1)?,
                    a.float(2)?,
                ))
            },
        )
        .shard(Sharding::pointwise(super::super::sharding::Lin::No)),
        OpDef::new("aten::dropout", OpImpl::Decomposition, FLOAT, |_, a| {
            let (o, _) = native_dropout(a.tensor(0)?, a.float(1)?, a.bool(2)?)?;
            Ok(vec![Value::Tensor(o)])
        })
        .shard(Sharding::Replicate(NOTE)),
    ]
}

/// The registered overloads.
pub(in crate::ops) fn defs() -> Vec<OpDef> {
    let mut v = distributions();
    v.extend(transforms());
    v.extend(integers());
    v.extend(factories());
    v.extend(dropout());
    v
}
