//! Kernel generators: ISA programs for each family of operations.

#[cfg(test)]
pub(crate) mod checksums;
pub mod collective;
pub mod gather;
pub mod gemm;
pub mod index_add;
pub mod matmul;
pub mod tile;

/// Why a kernel could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// The problem needs more on-chip memory than the core has.
    #[error("kernel does not fit: {0}")]
    TooLarge(String),
    /// The generator does not handle this case.
    #[error("unsupported kernel: {0}")]
    Unsupported(String),
    /// The generated program is malformed (a bug in the generator).
    #[error("kernel generation failed: {0}")]
    Build(#[from] tpuemu_isa::BuildError),
}
