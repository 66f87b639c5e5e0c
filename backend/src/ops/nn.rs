//! (Being written: operator family `nn`.)

use super::registry::OpDef;

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    Vec::new()
}
