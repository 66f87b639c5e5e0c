//! The operator registry (`ops::registry()`): every derived in-place and `out=` form passes its
//! functional operator the arguments it names; and a tool (ignored) that dumps the registry.

use tpuemu_backend::dtype::DType;
use tpuemu_backend::ops::registry;
use tpuemu_backend::ops::schema;
use tpuemu_backend::ops::{ArgSource, OpImpl};

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
