//! Operator schemas in PyTorch's grammar, parsed, and argument binding against them.
//!
//! A schema is what `torch._C._jit_get_all_schemas()` prints:
//!
//! ```text
//! aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
//! aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)
//! aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
//! ```
//!
//! [`parse`] reads one into a [`Schema`]: names, types (`Tensor?`, `int[2]`, `SymInt[]`,
//! `ScalarType?`, `Layout?`, `Device?`, `MemoryFormat?`, `Generator?`, ...), defaults,
//! keyword-only arguments (after `*`) and alias annotations (`Tensor(a!)` is written in place,
//! `Tensor(a)` is a view of the input with the same letter).
//!
//! Nobody types a schema by hand: [`aten`] holds every ATen schema of PyTorch 2.15.0
//! (`aten-2.15.0.txt`, written by `generate.py` beside this crate's manifest). Two users read
//! it: the backend's operator registry (which binds a call's values against the schema) and
//! `tpuemu-macros`, whose `#[aten]` attribute generates each operator's typed argument struct
//! from it at compile time. It depends on nothing but `thiserror`, so a procedural macro can use it.

pub mod aten;
mod parse;

use std::fmt;

pub use parse::{ParseError, parse};

/// An argument or return type.
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    /// `Tensor`, with its alias annotation if any.
    Tensor(Option<Alias>),
    /// `int`.
    Int,
    /// `SymInt` (a symbolic-free int here).
    SymInt,
    /// `float`.
    Float,
    /// `bool`.
    Bool,
    /// `str`.
    Str,
    /// `Scalar`: an int, float or bool.
    Scalar,
    /// `ScalarType`: a dtype.
    ScalarType,
    /// `Layout`.
    Layout,
    /// `Device`.
    Device,
    /// `MemoryFormat`.
    MemoryFormat,
    /// `Generator`.
    Generator,
    /// `T?`.
    Optional(Box<Type>),
    /// `T[]` or `T[N]`.
    List(Box<Type>, Option<usize>),
    /// Anything else PyTorch's grammar has (`Dimname`, `complex`, `Dict(str, Tensor)`, type
    /// variables, ...), with an alias annotation if any: kept as written.
    Other(String, Option<Alias>),
}

impl Type {
    /// The alias annotation of this type or of its element.
    pub fn alias(&self) -> Option<&Alias> {
        match self {
            Type::Tensor(a) | Type::Other(_, a) => a.as_ref(),
            Type::Optional(t) | Type::List(t, _) => t.alias(),
            _ => None,
        }
    }

    /// Whether this is `Tensor` or `Tensor?` (not a list).
    pub fn is_tensor(&self) -> bool {
        match self {
            Type::Tensor(_) => true,
            Type::Optional(t) => t.is_tensor(),
            _ => false,
        }
    }

    /// Whether values of this type are tensors or lists of tensors.
    pub fn holds_tensors(&self) -> bool {
        match self {
            Type::Tensor(_) => true,
            Type::Optional(t) | Type::List(t, _) => t.holds_tensors(),
            _ => false,
        }
    }
}

/// An alias annotation: `(a)`, `(a!)`, `(a -> *)`, `(b|a)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alias {
    /// The alias sets (`a`, or `b|a`).
    pub sets: Vec<String>,
    /// `!`: the argument is written.
    pub write: bool,
    /// `-> *`: the value enters the wildcard set (lists of tensors).
    pub to_wildcard: bool,
}

/// A default value as written in the schema.
#[derive(Clone, Debug, PartialEq)]
pub enum DefaultValue {
    /// `None`.
    None,
    /// `True`, `False`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (`1.`, `1e-05`, `inf`).
    Float(f64),
    /// A string (`"none"`).
    Str(String),
    /// A list (`[]`, `[0, 1]`, `[1.5]`).
    List(Vec<DefaultValue>),
    /// A name (`contiguous_format`, `Mean`, `long`, `strided`).
    Ident(String),
}

/// One argument.
#[derive(Clone, Debug, PartialEq)]
pub struct Argument {
    /// Its name.
    pub name: String,
    /// Its type.
    pub ty: Type,
    /// Its default, if it has one.
    pub default: Option<DefaultValue>,
    /// Keyword-only (after `*`).
    pub kwarg_only: bool,
}

impl Argument {
    /// Whether the operator writes this argument (`Tensor(a!)`).
    pub fn is_written(&self) -> bool {
        self.ty.alias().is_some_and(|a| a.write)
    }
}

/// One return.
#[derive(Clone, Debug, PartialEq)]
pub struct Return {
    /// Its name (`values`), if it has one.
    pub name: Option<String>,
    /// Its type.
    pub ty: Type,
}

/// A parsed operator schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    /// Namespace and base name: `aten::add`.
    pub name: String,
    /// Overload name: `Tensor`, or empty.
    pub overload: String,
    /// Arguments in order.
    pub args: Vec<Argument>,
    /// Whether the argument list ends with `...` (varargs).
    pub varargs: bool,
    /// Returns in order.
    pub returns: Vec<Return>,
}

impl Schema {
    /// `aten::add.Tensor` (or `aten::exp` without an overload name).
    pub fn full_name(&self) -> String {
        if self.overload.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.name, self.overload)
        }
    }

    /// The base name without its namespace: `add`.
    pub fn base_name(&self) -> &str {
        self.name.rsplit("::").next().unwrap_or(&self.name)
    }

    /// The index of the argument called `name`.
    pub fn arg_index(&self, name: &str) -> Option<usize> {
        self.args.iter().position(|a| a.name == name)
    }

    /// Whether the operator writes its first argument in place (`add_`, `zero_`).
    pub fn is_inplace(&self) -> bool {
        self.base_name().ends_with('_')
            && self.args.first().is_some_and(Argument::is_written)
            && !self.is_out()
    }

    /// Whether the operator writes keyword-only `out` arguments (`add.out`, `max.dim_max`).
    pub fn is_out(&self) -> bool {
        self.args.iter().any(|a| a.kwarg_only && a.is_written())
    }

    /// The arguments the operator writes.
    pub fn written_args(&self) -> Vec<usize> {
        (0..self.args.len())
            .filter(|&i| self.args[i].is_written())
            .collect()
    }
}

impl fmt::Display for Alias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}", self.sets.join("|"))?;
        if self.write {
            write!(f, "!")?;
        }
        if self.to_wildcard {
            write!(f, " -> *")?;
        }
        write!(f, ")")
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let alias = |f: &mut fmt::Formatter<'_>, a: &Option<Alias>| match a {
            Some(a) => write!(f, "{a}"),
            None => Ok(()),
        };
        match self {
            Type::Tensor(a) => {
                write!(f, "Tensor")?;
                alias(f, a)
            }
            Type::Int => write!(f, "int"),
            Type::SymInt => write!(f, "SymInt"),
            Type::Float => write!(f, "float"),
            Type::Bool => write!(f, "bool"),
            Type::Str => write!(f, "str"),
            Type::Scalar => write!(f, "Scalar"),
            Type::ScalarType => write!(f, "ScalarType"),
            Type::Layout => write!(f, "Layout"),
            Type::Device => write!(f, "Device"),
            Type::MemoryFormat => write!(f, "MemoryFormat"),
            Type::Generator => write!(f, "Generator"),
            Type::Optional(t) => write!(f, "{t}?"),
            Type::List(t, None) => write!(f, "{t}[]"),
            Type::List(t, Some(n)) => write!(f, "{t}[{n}]"),
            Type::Other(s, a) => {
                write!(f, "{s}")?;
                alias(f, a)
            }
        }
    }
}

impl fmt::Display for DefaultValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DefaultValue::None => write!(f, "None"),
            DefaultValue::Bool(true) => write!(f, "True"),
            DefaultValue::Bool(false) => write!(f, "False"),
            DefaultValue::Int(i) => write!(f, "{i}"),
            DefaultValue::Float(x) => write!(f, "{x:?}"),
            DefaultValue::Str(s) => {
                write!(f, "\"")?;
                for c in s.chars() {
                    match c {
                        '\n' => write!(f, "\\n")?,
                        '\t' => write!(f, "\\t")?,
                        '\r' => write!(f, "\\r")?,
                        '\x0c' => write!(f, "\\f")?,
                        '\x0b' => write!(f, "\\v")?,
                        '"' | '\\' => write!(f, "\\{c}")?,
                        c => write!(f, "{c}")?,
                    }
                }
                write!(f, "\"")
            }
            DefaultValue::List(v) => {
                let parts: Vec<String> = v.iter().map(|d| d.to_string()).collect();
                write!(f, "[{}]", parts.join(", "))
            }
            DefaultValue::Ident(s) => write!(f, "{s}"),
        }
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.full_name())?;
        let mut first = true;
        let mut star = false;
        for a in &self.args {
            if !first {
                write!(f, ", ")?;
            }
            if a.kwarg_only && !star {
                write!(f, "*, ")?;
                star = true;
            }
            first = false;
            write!(f, "{} {}", a.ty, a.name)?;
            if let Some(d) = &a.default {
                write!(f, "={d}")?;
            }
        }
        if self.varargs {
            write!(f, "{}...", if first { "" } else { ", " })?;
        }
        write!(f, ") -> ")?;
        let ret = |r: &Return| match &r.name {
            Some(n) => format!("{} {n}", r.ty),
            None => r.ty.to_string(),
        };
        match self.returns.as_slice() {
            [r] if !ret(r).starts_with('(') => write!(f, "{}", ret(r)),
            rs => {
                let parts: Vec<String> = rs.iter().map(ret).collect();
                write!(f, "({})", parts.join(", "))
            }
        }
    }
}
