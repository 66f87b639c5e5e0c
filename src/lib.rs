//! tpuemu facade.
pub use tpuemu_isa as isa;
