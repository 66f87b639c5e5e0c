//! The operator registry: every overload, with its schema, dtypes and implementation kind.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::{Args, Value};
use crate::dtype::DType;
use crate::error::Result;
use crate::runtime::Runtime;

/// How an operator is implemented.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize)]
pub enum OpImpl {
    /// Its own ISA kernel(s).
    Kernel,
    /// A composition of other registered operators.
    Decomposition,
    /// A view: changes only the layout, no kernel.
    View,
}

/// A registered overload.
#[derive(Clone)]
pub struct OpDef {
    /// `aten::add.Tensor`.
    pub name: &'static str,
    /// The ATen schema.
    pub schema: &'static str,
    /// Kernel, decomposition or view.
    pub implementation: OpImpl,
    /// The input dtypes it supports.
    pub dtypes: &'static [DType],
    /// Runs it.
    pub run: fn(&Runtime, &Args) -> Result<Vec<Value>>,
}

/// Every registered overload, by name.
pub fn registry() -> &'static BTreeMap<&'static str, OpDef> {
    static REG: OnceLock<BTreeMap<&'static str, OpDef>> = OnceLock::new();
    REG.get_or_init(|| {
        let mut m = BTreeMap::new();
        for d in super::binary::defs()
            .into_iter()
            .chain(super::creation::defs())
            .chain(super::layout_ops::defs())
            .chain(super::unary::defs())
            .chain(super::data::defs())
            .chain(super::reduce::defs())
            .chain(super::nn::defs())
            .chain(super::matrix::defs())
            .chain(super::backward::defs())
        {
            m.insert(d.name, d);
        }
        m
    })
}
