//! The operator registry: every overload with its schema, dtypes, implementation, sharding
//! rule, and the in-place and `out=` forms derived from the functional ones.
//!
//! Every operator is an `#[aten("aten::name.overload", dtypes = ..., shard = ...)]` function
//! (the `tpuemu-macros` crate): the attribute generates its typed argument struct from
//! PyTorch's schema (looked up in [`super::schema::aten`], never typed by hand) and its
//! [`OpDef`], and `build.rs` lists every such function ([`super::typed`]). For every functional
//! operator the registry also registers the in-place form (`add_.Tensor`) and the `out=` forms
//! (`add.out`) that PyTorch has, whose arguments are the functional's (plus the outputs): see
//! [`super::derive`].

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::derive::Derivation;
use super::schema::{self, Schema};
use super::sharding::Sharding;
use super::{Args, Value};
use crate::dtype::DType;
use crate::error::Result;
use crate::runtime::Runtime;

/// How an operator is implemented.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpImpl {
    /// Its own ISA kernel(s).
    Kernel,
    /// A composition of other registered operators.
    Decomposition,
    /// A view: changes only the layout, no kernel.
    View,
    /// The in-place form of a functional operator: computes it, then copies the result into
    /// its first argument.
    InPlace,
    /// The `out=` form of a functional operator: computes it, then copies each result into its
    /// `out` argument (resizing an empty one).
    Out,
}

/// A function running an operator on bound arguments.
pub type RunFn = fn(&Runtime, &Args) -> Result<Vec<Value>>;

/// What running an operator does.
#[derive(Clone, Copy)]
pub enum Run {
    /// Its own implementation.
    Direct(RunFn),
    /// A functional operator, then a copy into the first argument.
    InPlace(&'static Derivation),
    /// A functional operator, then a copy into the `out` arguments.
    Out(&'static Derivation),
}

/// A registered overload.
#[derive(Clone)]
pub struct OpDef {
    /// `aten::add.Tensor`.
    pub name: &'static str,
    /// PyTorch's schema.
    pub schema: &'static Schema,
    /// Kernel, decomposition, view, or a derived form.
    pub implementation: OpImpl,
    /// The input dtypes it supports.
    pub dtypes: &'static [DType],
    /// Runs it.
    pub run: Run,
    /// How it runs on sharded tensors.
    pub sharding: Sharding,
}

impl OpDef {
    /// The operator `name` (an ATen overload: its schema is PyTorch's), sharded replicated
    /// until [`OpDef::shard`] says otherwise.
    ///
    /// # Panics
    /// When PyTorch has no overload of that name: the registry is static code, and a test
    /// builds it.
    pub fn new(
        name: &'static str,
        implementation: OpImpl,
        dtypes: &'static [DType],
        run: RunFn,
    ) -> Self {
        let schema = schema::aten::get(name)
            .unwrap_or_else(|| panic!("{name} is not an ATen overload of PyTorch 2.15.0"));
        OpDef {
            name,
            schema,
            implementation,
            dtypes,
            run: Run::Direct(run),
            sharding: Sharding::Replicate("no rule declared"),
        }
    }

    /// Declares the sharding rule.
    pub fn shard(mut self, sharding: Sharding) -> Self {
        self.sharding = sharding;
        self
    }

    /// How a derived (in-place or `out=`) form runs, if this is one.
    pub fn derivation(&self) -> Option<&'static Derivation> {
        match self.run {
            Run::Direct(_) => None,
            Run::InPlace(d) | Run::Out(d) => Some(d),
        }
    }

    /// The functional operator a derived form runs, if this is one.
    pub fn derived_from(&self) -> Option<&'static str> {
        match self.run {
            Run::Direct(_) => None,
            Run::InPlace(d) | Run::Out(d) => Some(d.functional),
        }
    }
}

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
    use crate::ops::ArgSource;

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
