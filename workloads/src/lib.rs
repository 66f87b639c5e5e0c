//! # tpuemu-workloads — models written with the backend's operators
//!
//! Forward and backward steps of small models, written once against the backend's public API
//! (as a user's program would be): the MLP and transformer block of `tpuemu demo` and
//! `tpuemu bench eager` ([`run_workload`]), and the MLP step written over DTensors run data-,
//! tensor- and fully-sharded-parallel ([`sharded_mlp`]), and one collective simulated on a
//! slice ([`collective`]). They are benchmarks and examples, not
//! part of the backend library.

pub mod collective;
pub mod llm;
pub mod mlp;
pub mod sharded_mlp;
pub mod transformer;
pub mod workload;

use tpuemu_backend::dtype::{DType, Scalar};
use tpuemu_backend::error::Result;
use tpuemu_backend::runtime::Runtime;
use tpuemu_backend::tensor::Tensor;

pub use mlp::{Mlp, MlpConfig};
pub use transformer::{StepResult, Transformer, TransformerConfig};
pub use workload::{BenchReport, RunMode, Size, Workload, run_workload};

/// `x @ w^T` (a linear layer without bias; `w` is `[out, in]`).
pub fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    x.mm(&w.t()?)
}

/// Deterministic random parameters and inputs.
pub struct Init {
    state: u64,
}

impl Init {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Init {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    fn next(&mut self) -> u64 {
        // xorshift64*
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A tensor of normal values with standard deviation `std`.
    pub fn normal(
        &mut self,
        rt: &Runtime,
        shape: &[usize],
        std: f64,
        dtype: DType,
    ) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let vals = (0..n).map(|_| {
            let (u, v) = (self.uniform(), self.uniform());
            std * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        });
        Tensor::from_f64s(rt, vals, n, shape, dtype)
    }

    /// `n` token ids below `vocab` (int64).
    pub fn tokens(&mut self, rt: &Runtime, n: usize, vocab: usize) -> Result<Tensor> {
        let vals = (0..n).map(|_| (self.next() % vocab as u64) as f64);
        Tensor::from_f64s(rt, vals, n, &[n], DType::I64)
    }
}

/// A scalar 1 of `dtype` (the seed gradient of a loss).
pub fn one(rt: &Runtime, dtype: DType) -> Result<Tensor> {
    tpuemu_backend::ops::creation::scalar_tensor(rt, Scalar::Float(1.0), dtype)
}
