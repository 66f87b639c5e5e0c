//! The backward kernel (see the [module docs](super)).

use tpuemu_isa::{ChipInfo, Program};

use super::AttnSpec;
use crate::kernels::KernelError;

/// Where everything lives in VMEM.
pub(crate) struct Layout {
    pub end: u32,
}

impl Layout {
    pub(crate) fn new(_spec: &AttnSpec, _chip: &ChipInfo) -> Self {
        Layout { end: 0 }
    }
}

/// Builds the backward kernel.
pub fn build(_spec: &AttnSpec, _chip: &ChipInfo, _name: &str) -> Result<Program, KernelError> {
    Err(KernelError::Unsupported("WIP".into()))
}
