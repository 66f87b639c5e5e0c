//! (Being written: operator family `reduce`.)

use super::registry::OpDef;

/// The registered overloads.
pub(super) fn defs() -> Vec<OpDef> {
    Vec::new()
}
