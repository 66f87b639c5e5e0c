//! Plain GEMM, `C (M x N, f32) = A (M x K) @ B (K x N)` row-major: the benchmark's kernel,
//! a thin front over [`super::matmul`].

use tpuemu_isa::ops::{MxuFmt, Precision};
use tpuemu_isa::{ChipInfo, Program};

use super::KernelError;
use super::matmul::{self, MatOperand, MatPlan, MatSpec};
use crate::dtype::DType;

/// What to multiply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmSpec {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Format of A and B.
    pub fmt: MxuFmt,
    /// Passes for f32 inputs.
    pub prec: Precision,
}

/// How to tile it.
pub type GemmPlan = MatPlan;

impl GemmSpec {
    fn mat(&self) -> MatSpec {
        let dt = match self.fmt {
            MxuFmt::Bf16 => DType::BF16,
            MxuFmt::F32 => DType::F32,
        };
        MatSpec {
            batch: 1,
            m: self.m,
            n: self.n,
            k: self.k,
            fmt: self.fmt,
            prec: self.prec,
            a: MatOperand::contiguous(dt, self.m, self.k),
            w: MatOperand::contiguous(dt, self.k, self.n),
            extras: Vec::new(),
            out: MatOperand::contiguous(DType::F32, self.m, self.n),
            extra_outs: Vec::new(),
            twin: None,
            rows: None,
            epilogue: None,
        }
    }
}

/// Chooses tiles (see [`matmul::plan`]); `resident` keeps every operand in VMEM (SCALE-Sim
/// parity).
pub fn plan(spec: &GemmSpec, chip: &ChipInfo, resident: bool) -> Result<GemmPlan, KernelError> {
    matmul::plan(&spec.mat(), chip, resident)
}

/// Builds the GEMM program. Arguments: `a`, `b`, `c` buffers, then three scalar element
/// offsets (0 for whole buffers).
pub fn build(spec: &GemmSpec, plan: &GemmPlan, chip: &ChipInfo) -> Result<Program, KernelError> {
    let name = format!("gemm_{}x{}x{}_{}", spec.m, spec.n, spec.k, spec.fmt);
    let mut p = matmul::build(&spec.mat(), plan, chip, &name)?;
    p.source_op = Some("aten::mm".into());
    Ok(p)
}
