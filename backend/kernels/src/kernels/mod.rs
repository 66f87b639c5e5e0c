//! Kernel generators: ISA programs for each family of operations.

pub mod attention;
#[cfg(test)]
pub mod checksums;
pub mod collective;
pub mod gather;
pub mod gemm;
pub mod index_add;
pub mod matmul;
pub mod pallas;
pub mod tile;

pub use crate::error::KernelError;

/// A scalar register from `pool`, or an error when the kernel needs more than it has.
pub fn sreg(pool: &mut crate::codegen::RegPool) -> Result<tpuemu_isa::SReg, KernelError> {
    pool.take()
        .ok_or_else(|| KernelError::Unsupported("out of scalar registers".into()))
}

/// A byte offset into an HBM buffer as an immediate; `what` names the operand in the error
/// when it does not fit 31 bits.
pub fn hbm_offset(off: i64, what: &str) -> Result<i32, KernelError> {
    i32::try_from(off).map_err(|_| KernelError::TooLarge(format!("{what} above 2 GiB")))
}

/// The data-dependent row kernel a [`gather::GatherSpec`] asks for: an index-add when `add` is
/// set, else a gather. Arguments: table (or destination), index, rows (output, or source), then
/// their element offsets.
pub fn rows(
    spec: &gather::GatherSpec,
    chip: &tpuemu_isa::ChipInfo,
    name: &str,
) -> Result<tpuemu_isa::Program, KernelError> {
    if spec.add {
        index_add::build(spec, chip, name)
    } else {
        gather::build(spec, chip, name)
    }
}
