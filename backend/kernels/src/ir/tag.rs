//! The operator call a node came from: its name, its call id and its input shapes, for traces
//! and error messages.
//!
//! Every operator call makes one tag, so a tag costs no formatting: the name is shared (one
//! [`OpName`] per operator name, interned by the runtime) and the shapes are kept as numbers
//! ([`Shapes`]) and written out only when shown.

use std::fmt;
use std::sync::Arc;

use crate::dtype::DType;

/// An operator name, shared by every call of the operator.
pub type OpName = Arc<str>;

/// The operator a node belongs to.
#[derive(Clone, Debug)]
pub struct OpTag {
    /// The overload name.
    pub name: OpName,
    /// The operator call's id.
    pub id: u64,
    /// Input shapes, for error messages.
    pub shapes: Shapes,
}

/// An operator call's input shapes and dtypes, shown as `[[2, 3], [3]:bf16]` (float32 is not
/// named), or a description given as text (`[5, 7, 2]` for a factory's arguments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shapes {
    /// Per input: its rank, its sizes, and its dtype's index in [`DType::ALL`].
    Inputs(Box<[u64]>),
    /// Written out already.
    Text(Box<str>),
}

impl Default for Shapes {
    fn default() -> Self {
        Shapes::Text("".into())
    }
}

impl Shapes {
    /// The shapes and dtypes of the inputs (`words`: their ranks summed, plus two each).
    pub fn of<'a>(words: usize, inputs: impl IntoIterator<Item = (&'a [usize], DType)>) -> Shapes {
        let mut w = Vec::with_capacity(words);
        for (shape, dtype) in inputs {
            w.push(shape.len() as u64);
            w.extend(shape.iter().map(|d| *d as u64));
            w.push(dtype_index(dtype));
        }
        Shapes::Inputs(w.into_boxed_slice())
    }

    /// The sizes a factory was asked for, shown as one input's: `[[2, 3]]`.
    pub fn sizes(sizes: &[usize]) -> Shapes {
        Shapes::of(sizes.len() + 2, [(sizes, DType::F32)])
    }

    /// A description already written.
    pub fn text(s: impl Into<Box<str>>) -> Shapes {
        Shapes::Text(s.into())
    }
}

/// `dtype`'s index in [`DType::ALL`].
fn dtype_index(dtype: DType) -> u64 {
    DType::ALL
        .iter()
        .position(|d| *d == dtype)
        .expect("every dtype is in DType::ALL") as u64
}

impl fmt::Display for Shapes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words = match self {
            Shapes::Text(s) => return f.write_str(s),
            Shapes::Inputs(w) => w,
        };
        f.write_str("[")?;
        let mut at = 0;
        let mut first = true;
        while at < words.len() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            let rank = words[at] as usize;
            f.write_str("[")?;
            for (j, d) in words[at + 1..at + 1 + rank].iter().enumerate() {
                if j > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{d}")?;
            }
            f.write_str("]")?;
            let dtype = DType::ALL[words[at + 1 + rank] as usize];
            if dtype != DType::F32 {
                write!(f, ":{}", dtype.name())?;
            }
            at += rank + 2;
        }
        f.write_str("]")
    }
}

/// The runtime's operator names: one shared [`OpName`] per name.
#[derive(Default)]
pub struct Names(std::collections::HashMap<Box<str>, OpName>);

impl Names {
    /// The shared name `name`.
    pub fn get(&mut self, name: &str) -> OpName {
        if let Some(n) = self.0.get(name) {
            return n.clone();
        }
        let n: OpName = name.into();
        self.0.insert(name.into(), n.clone());
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dtype(d: DType) -> u64 {
        DType::ALL.iter().position(|x| *x == d).unwrap() as u64
    }

    #[test]
    fn shapes_read_as_the_error_messages_always_wrote_them() {
        let s = Shapes::Inputs(
            vec![2, 2, 3, dtype(DType::F32), 1, 3, dtype(DType::BF16)].into_boxed_slice(),
        );
        assert_eq!(
            s.to_string(),
            "[[2, 3], [3]:bfloat16]".replace("bfloat16", DType::BF16.name())
        );
        let scalar = Shapes::Inputs(vec![0, dtype(DType::I64)].into_boxed_slice());
        assert_eq!(scalar.to_string(), format!("[[]:{}]", DType::I64.name()));
        assert_eq!(Shapes::Inputs(Box::new([])).to_string(), "[]");
        assert_eq!(Shapes::text("[5, 7]").to_string(), "[5, 7]");
        assert_eq!(Shapes::default().to_string(), "");
    }

    #[test]
    fn a_name_is_shared_by_every_call() {
        let mut names = Names::default();
        let a = names.get("aten::add.Tensor");
        let b = names.get("aten::add.Tensor");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*names.get("aten::mul.Tensor"), "aten::mul.Tensor");
    }
}
