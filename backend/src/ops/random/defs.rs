//! The random operators' registrations: one `#[aten]` function per overload (the struct comes
//! from PyTorch's schema). A trailing `_` of an in-place overload is spelled `inplace` in the
//! function's and the struct's names (`uniform_` → `uniform_inplace_op`, `UniformInplace`).

use super::super::aten;
use super::super::sharding::{Lin, Sharding};
use super::*;

const NOTE: &str = "random values depend on the global element index and the stream";

// Distributions.

#[aten("aten::uniform", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn uniform_op(a: Uniform<'_>) -> Result<Tensor> {
    let x = Dest::Like(a.self_);
    uniform(Uniform::NAME, x, a.from, a.to, generator(a.generator))
}

#[aten("aten::uniform_", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn uniform_inplace_op(a: UniformInplace<'_>) -> Result<Tensor> {
    let x = Dest::Into(a.self_);
    uniform(
        UniformInplace::NAME,
        x,
        a.from,
        a.to,
        generator(a.generator),
    )
}

#[aten("aten::normal_functional", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn normal_functional_op(rt: &Runtime, a: NormalFunctional<'_>) -> Result<Tensor> {
    let x = a.self_;
    let (m, s, g) = (Ok(a.mean), Ok(a.std), generator(a.generator));
    normal(
        NormalFunctional::NAME,
        rt,
        x.shape(),
        x.dtype(),
        m,
        s,
        None,
        g,
    )
}

#[aten("aten::normal_", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn normal_inplace_op(rt: &Runtime, a: NormalInplace<'_>) -> Result<Tensor> {
    let x = a.self_;
    let (m, s, g) = (Ok(a.mean), Ok(a.std), generator(a.generator));
    normal(
        NormalInplace::NAME,
        rt,
        x.shape(),
        x.dtype(),
        m,
        s,
        Some(x),
        g,
    )
}

#[aten("aten::normal.Tensor_float", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn normal_tensor_float_op(rt: &Runtime, a: NormalTensorFloat<'_>) -> Result<Tensor> {
    let (m, g) = (a.mean, generator(a.generator));
    let name = NormalTensorFloat::NAME;
    normal(name, rt, m.shape(), m.dtype(), Err(m), Ok(a.std), None, g)
}

#[aten("aten::normal.float_Tensor", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn normal_float_tensor_op(rt: &Runtime, a: NormalFloatTensor<'_>) -> Result<Tensor> {
    let (s, g) = (a.std, generator(a.generator));
    let name = NormalFloatTensor::NAME;
    normal(name, rt, s.shape(), s.dtype(), Ok(a.mean), Err(s), None, g)
}

#[aten("aten::normal.Tensor_Tensor", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn normal_tensor_tensor_op(rt: &Runtime, a: NormalTensorTensor<'_>) -> Result<Tensor> {
    let (m, s, g) = (a.mean, a.std, generator(a.generator));
    let shape = broadcast_shapes(m.shape(), s.shape())?;
    let name = NormalTensorTensor::NAME;
    normal(name, rt, &shape, m.dtype(), Err(m), Err(s), None, g)
}

#[aten("aten::normal.float_float", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn normal_float_float_op(rt: &Runtime, a: NormalFloatFloat<'_>) -> Result<Tensor> {
    let (m, s, g) = (Ok(a.mean), Ok(a.std), generator(a.generator));
    let d = a.dtype.unwrap_or(DType::F32);
    let name = NormalFloatFloat::NAME;
    normal(name, rt, &shape_of(&a.size)?, d, m, s, None, g)
}

#[aten("aten::bernoulli", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn bernoulli_op(a: Bernoulli<'_>) -> Result<Tensor> {
    let x = a.self_;
    bernoulli(
        Bernoulli::NAME,
        Dest::Like(x),
        Err(x),
        generator(a.generator),
    )
}

#[aten("aten::bernoulli.p", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn bernoulli_p_op(a: BernoulliP<'_>) -> Result<Tensor> {
    let x = Dest::Like(a.self_);
    bernoulli(BernoulliP::NAME, x, Ok(a.p), generator(a.generator))
}

#[aten("aten::bernoulli.Tensor", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn bernoulli_tensor_op(a: BernoulliTensor<'_>) -> Result<Tensor> {
    let x = Dest::Like(a.self_);
    bernoulli(BernoulliTensor::NAME, x, Err(a.p), generator(a.generator))
}

#[aten("aten::bernoulli_.float", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn bernoulli_inplace_float_op(a: BernoulliInplaceFloat<'_>) -> Result<Tensor> {
    let x = Dest::Into(a.self_);
    bernoulli(
        BernoulliInplaceFloat::NAME,
        x,
        Ok(a.p),
        generator(a.generator),
    )
}

#[aten("aten::bernoulli_.Tensor", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn bernoulli_inplace_tensor_op(a: BernoulliInplaceTensor<'_>) -> Result<Tensor> {
    let x = Dest::Into(a.self_);
    bernoulli(
        BernoulliInplaceTensor::NAME,
        x,
        Err(a.p),
        generator(a.generator),
    )
}

// Transforms of a uniform or normal value.

#[aten("aten::exponential", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn exponential_op(a: Exponential<'_>) -> Result<Tensor> {
    exponential(Dest::Like(a.self_), a.lambd, generator(a.generator))
}

#[aten("aten::exponential_", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn exponential_inplace_op(a: ExponentialInplace<'_>) -> Result<Tensor> {
    exponential(Dest::Into(a.self_), a.lambd, generator(a.generator))
}

#[aten("aten::geometric", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn geometric_op(a: Geometric<'_>) -> Result<Tensor> {
    geometric(Dest::Like(a.self_), a.p, generator(a.generator))
}

#[aten("aten::geometric_", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn geometric_inplace_op(a: GeometricInplace<'_>) -> Result<Tensor> {
    geometric(Dest::Into(a.self_), a.p, generator(a.generator))
}

#[aten("aten::log_normal", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn log_normal_op(a: LogNormal<'_>) -> Result<Tensor> {
    let x = Dest::Like(a.self_);
    log_normal(x, a.mean, a.std, generator(a.generator))
}

#[aten("aten::log_normal_", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn log_normal_inplace_op(a: LogNormalInplace<'_>) -> Result<Tensor> {
    let x = Dest::Into(a.self_);
    log_normal(x, a.mean, a.std, generator(a.generator))
}

#[aten("aten::cauchy", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn cauchy_op(a: Cauchy<'_>) -> Result<Tensor> {
    let x = Dest::Like(a.self_);
    cauchy(x, a.median, a.sigma, generator(a.generator))
}

#[aten("aten::cauchy_", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn cauchy_inplace_op(a: CauchyInplace<'_>) -> Result<Tensor> {
    let x = Dest::Into(a.self_);
    cauchy(x, a.median, a.sigma, generator(a.generator))
}

// Integers.

#[aten("aten::random", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn random_op(a: Random<'_>) -> Result<Tensor> {
    let x = Dest::Like(a.self_);
    random_from(Random::NAME, x, 0, None, generator(a.generator))
}

#[aten("aten::random_", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn random_inplace_op(a: RandomInplace<'_>) -> Result<Tensor> {
    let x = Dest::Into(a.self_);
    random_from(RandomInplace::NAME, x, 0, None, generator(a.generator))
}

#[aten("aten::random.from", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn random_from_op(a: RandomFrom<'_>) -> Result<Tensor> {
    let x = Dest::Like(a.self_);
    random_from(RandomFrom::NAME, x, a.from, a.to, generator(a.generator))
}

#[aten("aten::random_.from", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn random_inplace_from_op(a: RandomInplaceFrom<'_>) -> Result<Tensor> {
    let x = Dest::Into(a.self_);
    let g = generator(a.generator);
    random_from(RandomInplaceFrom::NAME, x, a.from, a.to, g)
}

#[aten("aten::random.to", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn random_to_op(a: RandomTo<'_>) -> Result<Tensor> {
    let x = Dest::Like(a.self_);
    random_range(RandomTo::NAME, x, 0, a.to, generator(a.generator))
}

#[aten("aten::random_.to", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn random_inplace_to_op(a: RandomInplaceTo<'_>) -> Result<Tensor> {
    let x = Dest::Into(a.self_);
    random_range(RandomInplaceTo::NAME, x, 0, a.to, generator(a.generator))
}

// Factories.

/// A fresh tensor of `size` and `dtype` filled by `f`.
fn fresh(
    rt: &Runtime,
    size: &[usize],
    dtype: DType,
    f: impl FnOnce(Dest) -> Result<Tensor>,
) -> Result<Tensor> {
    let x = empty(rt, size, dtype)?;
    f(Dest::Into(&x))
}

#[aten("aten::rand", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn rand_op(rt: &Runtime, a: Rand<'_>) -> Result<Tensor> {
    let d = a.dtype.unwrap_or(DType::F32);
    fresh(rt, &shape_of(&a.size)?, d, |x| {
        uniform(Rand::NAME, x, 0.0, 1.0, None)
    })
}

#[aten("aten::rand.generator", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn rand_generator_op(rt: &Runtime, a: RandGenerator<'_>) -> Result<Tensor> {
    let (d, g) = (a.dtype.unwrap_or(DType::F32), generator(a.generator));
    fresh(rt, &shape_of(&a.size)?, d, |x| {
        uniform(RandGenerator::NAME, x, 0.0, 1.0, g)
    })
}

#[aten("aten::randn", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn randn_op(rt: &Runtime, a: Randn<'_>) -> Result<Tensor> {
    let (d, s) = (a.dtype.unwrap_or(DType::F32), shape_of(&a.size)?);
    normal(Randn::NAME, rt, &s, d, Ok(0.0), Ok(1.0), None, None)
}

#[aten("aten::randn.generator", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn randn_generator_op(rt: &Runtime, a: RandnGenerator<'_>) -> Result<Tensor> {
    let (d, s) = (a.dtype.unwrap_or(DType::F32), shape_of(&a.size)?);
    let (name, g) = (RandnGenerator::NAME, generator(a.generator));
    normal(name, rt, &s, d, Ok(0.0), Ok(1.0), None, g)
}

/// Integers in `[low, high)` in a fresh tensor of `size` (`dtype` defaults to int64).
fn randint_fresh(
    rt: &Runtime,
    name: &str,
    (low, high): (i64, i64),
    size: &[i64],
    dtype: Option<DType>,
    g: Option<u64>,
) -> Result<Tensor> {
    fresh(rt, &shape_of(size)?, dtype.unwrap_or(DType::I64), |x| {
        random_range(name, x, low, high, g)
    })
}

#[aten("aten::randint", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn randint_op(rt: &Runtime, a: Randint<'_>) -> Result<Tensor> {
    randint_fresh(rt, Randint::NAME, (0, a.high), &a.size, a.dtype, None)
}

#[aten("aten::randint.generator", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn randint_generator_op(rt: &Runtime, a: RandintGenerator<'_>) -> Result<Tensor> {
    let (name, g) = (RandintGenerator::NAME, generator(a.generator));
    randint_fresh(rt, name, (0, a.high), &a.size, a.dtype, g)
}

#[aten("aten::randint.low", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn randint_low_op(rt: &Runtime, a: RandintLow<'_>) -> Result<Tensor> {
    let name = RandintLow::NAME;
    randint_fresh(rt, name, (a.low, a.high), &a.size, a.dtype, None)
}

#[aten("aten::randint.low_generator", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn randint_low_generator_op(rt: &Runtime, a: RandintLowGenerator<'_>) -> Result<Tensor> {
    let (name, g) = (RandintLowGenerator::NAME, generator(a.generator));
    randint_fresh(rt, name, (a.low, a.high), &a.size, a.dtype, g)
}

#[aten("aten::rand_like", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn rand_like_op(rt: &Runtime, a: RandLike<'_>) -> Result<Tensor> {
    let x = a.self_;
    fresh(rt, x.shape(), a.dtype.unwrap_or(x.dtype()), |x| {
        uniform(RandLike::NAME, x, 0.0, 1.0, None)
    })
}

#[aten("aten::randn_like", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn randn_like_op(rt: &Runtime, a: RandnLike<'_>) -> Result<Tensor> {
    let x = a.self_;
    let d = a.dtype.unwrap_or(x.dtype());
    let name = RandnLike::NAME;
    normal(name, rt, x.shape(), d, Ok(0.0), Ok(1.0), None, None)
}

#[aten("aten::randint_like", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn randint_like_op(rt: &Runtime, a: RandintLike<'_>) -> Result<Tensor> {
    let (x, high) = (a.self_, a.high);
    fresh(rt, x.shape(), a.dtype.unwrap_or(x.dtype()), |x| {
        random_range(RandintLike::NAME, x, 0, high, None)
    })
}

#[aten("aten::randint_like.low_dtype", dtypes = DType::ALL_TPU, shard = Sharding::Replicate(NOTE))]
fn randint_like_low_dtype_op(rt: &Runtime, a: RandintLikeLowDtype<'_>) -> Result<Tensor> {
    let (x, low, high) = (a.self_, a.low, a.high);
    fresh(rt, x.shape(), a.dtype.unwrap_or(x.dtype()), |x| {
        random_range(RandintLikeLowDtype::NAME, x, low, high, None)
    })
}

// Dropout.

/// `train` left out (`None`) trains.
#[aten("aten::native_dropout", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn native_dropout_op(a: NativeDropout<'_>) -> Result<(Tensor, Tensor)> {
    native_dropout(a.input, a.p, a.train != Some(false))
}

#[aten(
    "aten::native_dropout_backward",
    dtypes = DType::ALL_TPU,
    shard = Sharding::pointwise(Lin::No)
)]
fn native_dropout_backward_op(a: NativeDropoutBackward<'_>) -> Result<Tensor> {
    native_dropout_backward(a.grad_output, a.mask, a.scale)
}

#[aten(
    "aten::dropout",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(NOTE),
    kind = Decomposition
)]
fn dropout_op(a: Dropout<'_>) -> Result<Tensor> {
    Ok(native_dropout(a.input, a.p, a.train)?.0)
}

// The randomized leaky ReLU (`rrelu.rs`).

#[aten("aten::rrelu_with_noise", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn rrelu_with_noise_op(a: RreluWithNoise<'_>) -> Result<Tensor> {
    let (lo, hi) = (a.lower.to_f64(), a.upper.to_f64());
    let g = generator(a.generator);
    rrelu::rrelu_with_noise(a.self_, a.noise, lo, hi, a.training, g)
}

#[aten(
    "aten::rrelu_with_noise_functional",
    dtypes = DType::FLOATING,
    shard = Sharding::Replicate(NOTE)
)]
fn rrelu_with_noise_functional_op(a: RreluWithNoiseFunctional<'_>) -> Result<(Tensor, Tensor)> {
    let (lo, hi) = (a.lower.to_f64(), a.upper.to_f64());
    let g = generator(a.generator);
    rrelu::rrelu_with_noise_functional(a.self_, a.noise, lo, hi, a.training, g)
}

#[aten(
    "aten::rrelu_with_noise_backward",
    dtypes = DType::FLOATING,
    shard = Sharding::pointwise(Lin::No)
)]
fn rrelu_with_noise_backward_op(a: RreluWithNoiseBackward<'_>) -> Result<Tensor> {
    let (lo, hi) = (a.lower.to_f64(), a.upper.to_f64());
    rrelu::rrelu_with_noise_backward(
        a.grad_output,
        a.self_,
        a.noise,
        lo,
        hi,
        a.training,
        a.self_is_result,
    )
}

#[aten("aten::rrelu_with_noise_", dtypes = DType::FLOATING, shard = Sharding::Replicate(NOTE))]
fn rrelu_with_noise_inplace_op(rt: &Runtime, a: RreluWithNoiseInplace<'_>) -> Result<Tensor> {
    let (lo, hi) = (a.lower.to_f64(), a.upper.to_f64());
    let g = generator(a.generator);
    let out = rrelu::rrelu_with_noise(a.self_, a.noise, lo, hi, a.training, g)?;
    let args = vec![
        Value::Tensor(a.self_.clone()),
        Value::Tensor(out),
        Value::Bool(false),
    ];
    crate::ops::compose::op(rt, "aten::copy_", args)
}
