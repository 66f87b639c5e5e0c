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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::schema;
    use crate::ops::{ArgSource, OpImpl};

    /// Every derived form passes its functional operator each argument by the same name and
    /// type, leaves only optional ones `None` and takes only a `dtype` from its output: a form
    /// matched to the wrong functional (`scatter.src_out` to `scatter.reduce`, whose `reduce`
    /// it lacks) fails here.
    #[test]
    fn derived_forms_pass_their_functional_the_arguments_it_names() {
        let reg = registry();
        let mut n = 0;
        for d in reg.values() {
            let Some(how) = d.derivation() else { continue };
            let f = reg[how.functional].schema;
            assert_eq!(how.args.len(), f.args.len(), "{}", d.name);
            for (fa, src) in f.args.iter().zip(&how.args) {
                match *src {
                    ArgSource::Arg(i) => {
                        let a = &d.schema.args[i];
                        assert_eq!(a.name, fa.name, "{}: argument {i}", d.name);
                        // An in-place form computes from the `self` it writes.
                        assert!(
                            d.implementation == OpImpl::InPlace || !a.is_written(),
                            "{}: {} is written",
                            d.name,
                            a.name
                        );
                    }
                    ArgSource::Default => assert!(
                        matches!(fa.ty, schema::Type::Optional(_)),
                        "{}: {} left None",
                        d.name,
                        fa.name
                    ),
                    ArgSource::OutDtype => assert_eq!(fa.name, "dtype", "{}", d.name),
                }
            }
            for &w in &how.writes {
                assert!(d.schema.args[w].is_written(), "{}: {w} not written", d.name);
            }
            n += 1;
        }
        // PyTorch 2.15 has in-place or out= forms for most of the ~600 functional operators.
        assert!(n > 500, "only {n} derived forms");
    }

    /// Writes every registration (name, kind, dtypes, sharding rule, derived-from) one per line
    /// to `$TPUEMU_REGISTRY_DUMP`: two trees' dumps compared show that a change to how
    /// operators are written (the `#[aten]` conversion) registered exactly the same operators.
    #[test]
    #[ignore = "a tool: run with TPUEMU_REGISTRY_DUMP=FILE"]
    fn dump_registry() {
        let path = std::env::var("TPUEMU_REGISTRY_DUMP").expect("TPUEMU_REGISTRY_DUMP=FILE");
        let mut out = String::new();
        for d in registry().values() {
            let mut dtypes: Vec<DType> = d.dtypes.to_vec();
            dtypes.sort();
            out += &format!(
                "{} {:?} {:?} {:?} {:?}\n",
                d.name,
                d.implementation,
                dtypes,
                d.sharding,
                d.derivation()
            );
        }
        std::fs::write(path, out).unwrap();
    }
}
