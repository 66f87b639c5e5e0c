//! The schema parser: PyTorch's function-schema grammar, as `torch._C.FunctionSchema` prints
//! it.
//!
//! ```text
//! schema   := name ['.' overload] '(' [arg (',' arg)*] ')' '->' returns
//! arg      := '*' | '...' | type NAME ['=' default]
//! type     := base [alias] ('[' [N] ']' | '?')*
//! base     := IDENT | CONTAINER '(' type (',' type)* ')'
//! alias    := '(' SET ('|' SET)* ['!'] ['->' '*'] ')'
//! returns  := '(' [ret (',' ret)*] ')' | ret
//! ret      := type [NAME]
//! default  := 'None' | 'True' | 'False' | NUMBER | STRING | IDENT | '[' [default (',' default)*] ']'
//! ```

use super::{Alias, Argument, DefaultValue, Return, Schema, Type};

/// Why a schema string could not be parsed: what was expected, at which byte.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("schema `{schema}`: {message} at byte {at}")]
pub struct ParseError {
    /// The schema text.
    pub schema: String,
    /// What went wrong.
    pub message: String,
    /// Byte offset.
    pub at: usize,
}

/// Parses one schema (with or without a namespace: `add.Tensor(...)` is `aten::add.Tensor`).
pub fn parse(text: &str) -> Result<Schema, ParseError> {
    let mut p = Parser { s: text, i: 0 };
    let schema = p.schema()?;
    p.ws();
    if p.i != text.len() {
        return Err(p.err("unexpected text after the returns"));
    }
    Ok(schema)
}

/// Type constructors that take type arguments in parentheses.
const CONTAINERS: &[&str] = &[
    "Dict", "Tuple", "Future", "RRef", "Union", "Await", "Optional",
];

struct Parser<'a> {
    s: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn err(&self, message: &str) -> ParseError {
        ParseError {
            schema: self.s.to_string(),
            message: message.to_string(),
            at: self.i,
        }
    }

    fn rest(&self) -> &str {
        &self.s[self.i..]
    }

    fn ws(&mut self) {
        while self.rest().starts_with([' ', '\t', '\n']) {
            self.i += 1;
        }
    }

    /// Consumes `tok` (after whitespace) if it comes next.
    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.rest().starts_with(tok) {
            self.i += tok.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &str) -> Result<(), ParseError> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err(self.err(&format!("expected `{tok}`")))
        }
    }

    fn peek(&mut self, tok: &str) -> bool {
        self.ws();
        self.rest().starts_with(tok)
    }

    fn ident(&mut self) -> Result<String, ParseError> {
        self.ws();
        let n = self
            .rest()
            .char_indices()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_'))
            .map_or(self.rest().len(), |(k, _)| k);
        if n == 0 || self.rest().starts_with(|c: char| c.is_ascii_digit()) {
            return Err(self.err("expected a name"));
        }
        let id = self.rest()[..n].to_string();
        self.i += n;
        Ok(id)
    }

    fn schema(&mut self) -> Result<Schema, ParseError> {
        let mut name = self.ident()?;
        if self.eat("::") {
            name = format!("{name}::{}", self.ident()?);
        } else {
            name = format!("aten::{name}");
        }
        let overload = if self.eat(".") {
            self.ident()?
        } else {
            String::new()
        };
        self.expect("(")?;
        let (args, varargs) = self.args()?;
        self.expect("->")?;
        let returns = self.returns()?;
        Ok(Schema {
            name,
            overload,
            args,
            varargs,
            returns,
        })
    }

    fn args(&mut self) -> Result<(Vec<Argument>, bool), ParseError> {
        let mut args = Vec::new();
        let mut kwarg_only = false;
        let mut varargs = false;
        if self.eat(")") {
            return Ok((args, varargs));
        }
        loop {
            if self.eat("...") {
                varargs = true;
            } else if self.eat("*") {
                kwarg_only = true;
            } else {
                let ty = self.ty()?;
                let name = self.ident()?;
                let default = if self.eat("=") {
                    Some(self.default()?)
                } else {
                    None
                };
                if args.iter().any(|a: &Argument| a.name == name) {
                    return Err(self.err(&format!("argument `{name}` appears twice")));
                }
                args.push(Argument {
                    name,
                    ty,
                    default,
                    kwarg_only,
                });
            }
            if self.eat(")") {
                return Ok((args, varargs));
            }
            self.expect(",")?;
        }
    }

    fn returns(&mut self) -> Result<Vec<Return>, ParseError> {
        if self.eat("(") {
            let mut rets = Vec::new();
            if self.eat(")") {
                return Ok(rets);
            }
            loop {
                rets.push(self.ret()?);
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
            // `-> (Tensor, t)[]`: one return of a tuple type, not several returns.
            if self.peek("[") || self.peek("?") {
                let parts: Vec<String> = rets.iter().map(|r| r.ty.to_string()).collect();
                let ty = self.suffixes(Type::Other(format!("({})", parts.join(", ")), None))?;
                return Ok(vec![Return { name: None, ty }]);
            }
            return Ok(rets);
        }
        if self.eat("...") {
            return Ok(Vec::new());
        }
        Ok(vec![self.ret()?])
    }

    fn ret(&mut self) -> Result<Return, ParseError> {
        let ty = self.ty()?;
        self.ws();
        let name = if self
            .rest()
            .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        {
            Some(self.ident()?)
        } else {
            None
        };
        Ok(Return { name, ty })
    }

    /// `(T, U, ...)` after the opening parenthesis, as text.
    fn type_args(&mut self) -> Result<String, ParseError> {
        let mut parts = Vec::new();
        loop {
            parts.push(self.ty()?.to_string());
            if self.eat(")") {
                return Ok(format!("({})", parts.join(", ")));
            }
            self.expect(",")?;
        }
    }

    fn ty(&mut self) -> Result<Type, ParseError> {
        // A tuple type: `(Tensor, tVal)`.
        if self.eat("(") {
            let args = self.type_args()?;
            return self.suffixes(Type::Other(args, None));
        }
        let mut base = self.ident()?;
        // Qualified class names: `__torch__.torch.classes.dist_rpc.WorkerInfo`.
        while self.eat(".") {
            base = format!("{base}.{}", self.ident()?);
        }
        let ty = if CONTAINERS.contains(&base.as_str()) && self.eat("(") {
            Type::Other(format!("{base}{}", self.type_args()?), None)
        } else {
            match base.as_str() {
                "Tensor" => Type::Tensor(None),
                "int" => Type::Int,
                "SymInt" => Type::SymInt,
                "float" => Type::Float,
                "bool" => Type::Bool,
                "str" => Type::Str,
                "Scalar" => Type::Scalar,
                "ScalarType" => Type::ScalarType,
                "Layout" => Type::Layout,
                "Device" => Type::Device,
                "MemoryFormat" => Type::MemoryFormat,
                "Generator" => Type::Generator,
                _ => Type::Other(base, None),
            }
        };
        self.suffixes(ty)
    }

    /// Alias annotations, `?` and `[N]` after a base type.
    fn suffixes(&mut self, mut ty: Type) -> Result<Type, ParseError> {
        loop {
            if self.peek("(") {
                let alias = self.alias()?;
                ty = match ty {
                    Type::Tensor(None) => Type::Tensor(Some(alias)),
                    Type::Other(s, None) => Type::Other(s, Some(alias)),
                    // TorchScript's list operators annotate lists of any type (`int[](a!)`):
                    // kept as written.
                    Type::Tensor(Some(_)) | Type::Other(_, Some(_)) => {
                        return Err(self.err("two alias annotations"));
                    }
                    other => Type::Other(other.to_string(), Some(alias)),
                };
            } else if self.eat("?") {
                ty = Type::Optional(Box::new(ty));
            } else if self.eat("[") {
                let n = if self.eat("]") {
                    None
                } else {
                    let n = self.number()?;
                    self.expect("]")?;
                    match n {
                        DefaultValue::Int(n) if n >= 0 => Some(n as usize),
                        _ => return Err(self.err("a list size must be a non-negative integer")),
                    }
                };
                ty = Type::List(Box::new(ty), n);
            } else {
                return Ok(ty);
            }
        }
    }

    fn alias(&mut self) -> Result<Alias, ParseError> {
        self.expect("(")?;
        let mut sets = Vec::new();
        loop {
            self.ws();
            if self.eat("*") {
                sets.push("*".to_string());
            } else {
                sets.push(self.ident()?);
            }
            if !self.eat("|") {
                break;
            }
        }
        let write = self.eat("!");
        let to_wildcard = if self.eat("->") {
            self.expect("*")?;
            true
        } else {
            false
        };
        self.expect(")")?;
        Ok(Alias {
            sets,
            write,
            to_wildcard,
        })
    }

    fn number(&mut self) -> Result<DefaultValue, ParseError> {
        self.ws();
        let n = self
            .rest()
            .char_indices()
            .find(|&(k, c)| {
                !(c.is_ascii_digit()
                    || c == '.'
                    || c == 'e'
                    || c == 'E'
                    || ((c == '-' || c == '+')
                        && (k == 0 || self.rest()[..k].ends_with(['e', 'E']))))
            })
            .map_or(self.rest().len(), |(k, _)| k);
        let text = &self.rest()[..n];
        let v = if let Ok(i) = text.parse::<i64>() {
            DefaultValue::Int(i)
        } else if let Ok(x) = text.parse::<f64>() {
            DefaultValue::Float(x)
        } else {
            return Err(self.err("expected a number"));
        };
        self.i += n;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.ws();
        let quote = self
            .rest()
            .chars()
            .next()
            .ok_or_else(|| self.err("expected a string"))?;
        self.i += 1;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((k, c)) = chars.next() {
            match c {
                '\\' => {
                    let (_, e) = chars
                        .next()
                        .ok_or_else(|| self.err("unterminated string"))?;
                    out.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        'f' => '\x0c',
                        'v' => '\x0b',
                        '0' => '\0',
                        other => other,
                    });
                }
                c if c == quote => {
                    self.i += k + 1;
                    return Ok(out);
                }
                c => out.push(c),
            }
        }
        Err(self.err("unterminated string"))
    }

    fn default(&mut self) -> Result<DefaultValue, ParseError> {
        self.ws();
        if self.rest().starts_with(['"', '\'']) {
            return self.string().map(DefaultValue::Str);
        }
        if self.eat("[") {
            let mut items = Vec::new();
            if self.eat("]") {
                return Ok(DefaultValue::List(items));
            }
            loop {
                items.push(self.default()?);
                if self.eat("]") {
                    return Ok(DefaultValue::List(items));
                }
                self.expect(",")?;
            }
        }
        if self
            .rest()
            .starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '.')
        {
            if self.eat("-inf") {
                return Ok(DefaultValue::Float(f64::NEG_INFINITY));
            }
            return self.number();
        }
        let id = self.ident()?;
        Ok(match id.as_str() {
            "None" => DefaultValue::None,
            "True" => DefaultValue::Bool(true),
            "False" => DefaultValue::Bool(false),
            "inf" => DefaultValue::Float(f64::INFINITY),
            "nan" => DefaultValue::Float(f64::NAN),
            _ => DefaultValue::Ident(id),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_tensor() {
        let s = parse("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
            .unwrap();
        assert_eq!(s.full_name(), "aten::add.Tensor");
        assert_eq!(s.args.len(), 3);
        assert!(s.args[2].kwarg_only && !s.args[1].kwarg_only);
        assert_eq!(s.args[2].default, Some(DefaultValue::Int(1)));
        assert_eq!(
            s.returns,
            vec![Return {
                name: None,
                ty: Type::Tensor(None)
            }]
        );
    }

    #[test]
    fn aliases_lists_and_optionals() {
        let s = parse(
            "aten::max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) max_values) -> (Tensor(a!) values, Tensor(b!) indices)",
        )
        .unwrap();
        assert!(s.is_out() && !s.is_inplace());
        assert_eq!(s.written_args(), vec![3, 4]);
        assert_eq!(s.returns[1].name.as_deref(), Some("indices"));
        let s = parse("aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor").unwrap();
        assert_eq!(
            s.args[1].ty,
            Type::List(Box::new(Type::Optional(Box::new(Type::Tensor(None)))), None)
        );
        let s = parse("aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor").unwrap();
        assert_eq!(
            s.args[1].ty,
            Type::Optional(Box::new(Type::List(Box::new(Type::Int), Some(1))))
        );
        let s = parse(
            "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
        )
        .unwrap();
        assert!(s.is_inplace());
        let s = parse(
            "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
        )
        .unwrap();
        assert!(s.args[0].ty.alias().unwrap().to_wildcard);
    }

    #[test]
    fn defaults() {
        let s = parse(r#"aten::f(float eps=1e-05, int[2] s=[1, -1], str m="a\"b", MemoryFormat? f=contiguous_format, float x=-inf, int[] e=[]) -> ()"#).unwrap();
        let d: Vec<_> = s.args.iter().map(|a| a.default.clone().unwrap()).collect();
        assert_eq!(d[0], DefaultValue::Float(1e-5));
        assert_eq!(
            d[1],
            DefaultValue::List(vec![DefaultValue::Int(1), DefaultValue::Int(-1)])
        );
        assert_eq!(d[2], DefaultValue::Str("a\"b".into()));
        assert_eq!(d[3], DefaultValue::Ident("contiguous_format".into()));
        assert_eq!(d[4], DefaultValue::Float(f64::NEG_INFINITY));
        assert_eq!(d[5], DefaultValue::List(vec![]));
        assert!(s.returns.is_empty());
    }

    #[test]
    fn errors_say_where() {
        for bad in [
            "aten::f(Tensor self",
            "aten::f(Tensor) -> Tensor",
            "aten::f(Tensor self, Tensor self) -> Tensor",
            "aten::f(int[x] a) -> Tensor",
            "aten::f(Tensor self) Tensor",
            "aten::f(str s=\"abc) -> Tensor",
            "",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.at <= bad.len(), "{bad}: {e}");
        }
    }
}
