//! The operator registry's entries: every overload with its schema, dtypes, implementation,
//! sharding rule, and for the in-place and `out=` forms derived from the functional ones their
//! [`Derivation`]. The table itself is built by [`super::table`].
//!
//! Every operator is an `#[aten("aten::name.overload", dtypes = ..., shard = ...)]` function
//! (the `tpuemu-macros` crate): the attribute generates its typed argument struct from
//! PyTorch's schema (looked up in [`super::schema::aten`], never typed by hand) and its
//! [`OpDef`], and `build.rs` lists every such function ([`super::typed`]). For every functional
//! operator the registry also registers the in-place form (`add_.Tensor`) and the `out=` forms
//! (`add.out`) that PyTorch has, whose arguments are the functional's (plus the outputs): see
//! [`super::derive`].

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

/// Where a derived form's functional operator takes one of its arguments from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ArgSource {
    /// The derived form's argument at this position.
    Arg(usize),
    /// Not given: an optional argument, `None`.
    Default,
    /// The dtype of the first written tensor (`zeros.out` creates in `out`'s dtype).
    OutDtype,
}

impl ArgSource {
    /// The bridge's encoding: the position, -1 for [`ArgSource::Default`], -2 for
    /// [`ArgSource::OutDtype`].
    pub fn code(self) -> i64 {
        match self {
            ArgSource::Arg(i) => i as i64,
            ArgSource::Default => -1,
            ArgSource::OutDtype => -2,
        }
    }
}

/// How a derived (in-place or `out=`) form runs.
#[derive(Debug, PartialEq, Eq)]
pub struct Derivation {
    /// The functional operator it computes (`aten::add.Tensor`).
    pub functional: &'static str,
    /// Where each of the functional's arguments comes from.
    pub args: Vec<ArgSource>,
    /// The arguments that receive the results, in result order (`Tensor[]` lists included).
    pub writes: Vec<usize>,
}
