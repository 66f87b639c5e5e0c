//! (Being written: operator family `unary`.)

use super::registry::OpDef;

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    Vec::new()
}
