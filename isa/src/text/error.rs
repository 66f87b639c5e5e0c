//! Assembly errors: where (line and column, 1-based), the offending text, and what was expected.

use std::fmt;

/// An assembly error at a place in the source.
///
/// `Display` prints `LINE:COL: message`; a command line tool prefixes the file name and may show
/// the source line with a caret under column `col`, `token.chars().count()` wide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: {kind}")]
pub struct AsmError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub col: usize,
    /// The offending token or text (empty at the end of a line).
    pub token: String,
    /// What is wrong.
    pub kind: AsmErrorKind,
}

/// What is wrong, without the place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AsmErrorKind {
    /// Something else was expected here.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What would have been accepted (`a vector register like v3`).
        expected: String,
        /// What was there (`` `s1` ``, `end of line`).
        found: String,
    },
    /// The mnemonic names no instruction.
    #[error("unknown instruction `{name}`{}", Suggest(suggestions))]
    UnknownMnemonic {
        /// The mnemonic.
        name: String,
        /// Close spellings that exist.
        suggestions: Vec<String>,
    },
    /// A directive the assembler does not know.
    #[error(
        "unknown directive `{name}`; expected one of .program, .arg, .source_op, .fusion_group, .smem, .marker"
    )]
    UnknownDirective {
        /// The directive.
        name: String,
    },
    /// A name used but never defined.
    #[error("{what} `{name}` is not defined")]
    Undefined {
        /// `label`, `argument`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A name defined twice.
    #[error("{what} `{name}` is defined twice")]
    Duplicate {
        /// `label`, `argument`, `operand`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// The text is well formed but not valid (a type an operation does not take, a value out of
    /// range, a misplaced SMEM preload, ...).
    #[error("{0}")]
    Invalid(String),
}

struct Suggest<'a>(&'a [String]);

impl fmt::Display for Suggest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            let sep = if i == 0 { "; did you mean " } else { " or " };
            write!(f, "{sep}`{s}`")?;
        }
        if !self.0.is_empty() {
            f.write_str("?")?;
        }
        Ok(())
    }
}

impl AsmError {
    /// The message without the place.
    pub fn message(&self) -> String {
        self.kind.to_string()
    }
}
