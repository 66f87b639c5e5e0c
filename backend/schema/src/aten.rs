//! Every ATen operator schema of PyTorch 2.15.0, parsed on first use.
//!
//! `aten-2.15.0.txt` is what `torch._C._jit_get_all_schemas()` lists for the `aten`
//! namespace (3,765 overloads, including TorchScript's scalar forms such as `aten::add.int`),
//! written by `generate.py` with the pinned PyTorch; `golden/regenerate.sh --check` checks it
//! is reproducible. Lines that fail to parse are a bug in the parser (a test parses all).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::{ParseError, Schema, parse};

/// The schema file.
pub const TEXT: &str = include_str!("aten-2.15.0.txt");

/// Every ATen schema by full name (`aten::add.Tensor`).
pub fn all() -> &'static BTreeMap<String, Schema> {
    static ALL: OnceLock<BTreeMap<String, Schema>> = OnceLock::new();
    ALL.get_or_init(|| {
        TEXT.lines()
            .filter_map(|l| parse(l).ok())
            .map(|s| (s.full_name(), s))
            .collect()
    })
}

/// PyTorch's schema of the overload `name` (`aten::add.Tensor`), if PyTorch has it.
pub fn get(name: &str) -> Option<&'static Schema> {
    all().get(name)
}

/// The lines of the schema file that do not parse (empty unless the parser has a bug).
pub fn unparsed() -> Vec<ParseError> {
    TEXT.lines().filter_map(|l| parse(l).err()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_aten_schema_parses() {
        let bad = unparsed();
        assert!(bad.is_empty(), "{} unparsed, first: {}", bad.len(), bad[0]);
        assert_eq!(all().len(), TEXT.lines().count());
    }

    #[test]
    fn printing_and_parsing_again_gives_the_same_schema() {
        for s in all().values() {
            let again = parse(&s.to_string()).unwrap_or_else(|e| panic!("{s}: {e}"));
            // NaN defaults are not equal to themselves.
            if s.to_string().contains("NaN") {
                continue;
            }
            assert_eq!(&again, s, "{s}");
        }
    }

    #[test]
    fn known_overloads() {
        let add = get("aten::add.Tensor").unwrap();
        assert_eq!(add.args[2].name, "alpha");
        assert!(get("aten::add_.Tensor").unwrap().is_inplace());
        assert!(get("aten::add.out").unwrap().is_out());
        assert!(get("aten::no_such_op").is_none());
    }
}
