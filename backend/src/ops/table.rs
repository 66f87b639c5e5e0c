//! The registry: every `#[aten]` operator ([`super::typed`]) and the in-place and `out=`
//! forms derived from them ([`super::derive`]), built once. The types are
//! [`super::registry`]'s; this file only assembles the table, so that neither the types nor
//! the derivation import the other's user.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::registry::OpDef;

/// Every registered overload, by name.
pub fn registry() -> &'static BTreeMap<&'static str, OpDef> {
    static REG: OnceLock<BTreeMap<&'static str, OpDef>> = OnceLock::new();
    REG.get_or_init(|| {
        let mut m = BTreeMap::new();
        let mut twice = Vec::new();
        for d in super::typed::aten_defs() {
            let name = d.name;
            if m.insert(name, d).is_some() {
                twice.push(name);
            }
        }
        // A programming error caught by every test that touches the registry.
        assert!(twice.is_empty(), "registered twice: {}", twice.join(", "));
        for d in super::derive::forms(&m) {
            m.entry(d.name).or_insert(d);
        }
        m
    })
}
