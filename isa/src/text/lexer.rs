//! Splits one line of assembly into tokens.
//!
//! The assembler works line by line: an instruction, a directive or a label never spans lines.
//! Tokens carry their 1-based column (in characters) so errors can point at them.
//!
//! Comment rule: `;` and `//` start a comment anywhere outside a string; `#` starts one too,
//! except when a digit follows it directly: `#3` is a marker index (`mark.begin #3`).

use super::error::{AsmError, AsmErrorKind};

/// What a token is.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TokKind {
    /// A name: a mnemonic, register, directive (`.arg`), keyword or label. May contain dots.
    Ident,
    /// A numeric literal as written, without a sign (`12`, `0x1f`, `1.5e-3`).
    Num,
    /// A string literal; the unescaped contents.
    Str(String),
    /// One punctuation character: `, [ ] + - = : @ #`.
    Punct(char),
}

/// A token and where it is.
#[derive(Clone, Debug)]
pub(crate) struct Token<'a> {
    pub kind: TokKind,
    /// The source text of the token.
    pub text: &'a str,
    /// 1-based column of its first character.
    pub col: usize,
}

impl Token<'_> {
    /// The token as an error message shows it: `` `s1` ``.
    pub fn shown(&self) -> String {
        format!("`{}`", self.text)
    }

    /// Whether the token is the punctuation `c`.
    pub fn is(&self, c: char) -> bool {
        self.kind == TokKind::Punct(c)
    }
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == '.'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

/// Splits `line` (line number `lineno`, 1-based) into tokens, dropping the comment.
pub(crate) fn lex_line(line: &str, lineno: usize) -> Result<Vec<Token<'_>>, AsmError> {
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    let end_of = |j: usize| chars.get(j).map_or(line.len(), |(b, _)| *b);
    while let Some(&(start, c)) = chars.get(i) {
        let col = i + 1;
        let next = chars.get(i + 1).map(|x| x.1);
        if c.is_whitespace() {
            i += 1;
        } else if c == ';'
            || (c == '/' && next == Some('/'))
            || (c == '#' && !next.is_some_and(|n| n.is_ascii_digit()))
        {
            break;
        } else if is_ident_start(c) {
            let mut j = i + 1;
            while chars.get(j).is_some_and(|x| is_ident_char(x.1)) {
                j += 1;
            }
            toks.push(Token {
                kind: TokKind::Ident,
                text: &line[start..end_of(j)],
                col,
            });
            i = j;
        } else if c.is_ascii_digit() {
            let hex = c == '0' && matches!(next, Some('x' | 'X'));
            let mut j = i + 1;
            while let Some(&(_, d)) = chars.get(j) {
                let prev = chars[j - 1].1;
                let sign = (d == '+' || d == '-') && !hex && (prev == 'e' || prev == 'E');
                if d.is_ascii_alphanumeric() || d == '_' || d == '.' || sign {
                    j += 1;
                } else {
                    break;
                }
            }
            toks.push(Token {
                kind: TokKind::Num,
                text: &line[start..end_of(j)],
                col,
            });
            i = j;
        } else if c == '"' {
            let (value, j) = lex_string(&chars, i, lineno)?;
            toks.push(Token {
                kind: TokKind::Str(value),
                text: &line[start..end_of(j)],
                col,
            });
            i = j;
        } else if ",[]+-=:@#".contains(c) {
            toks.push(Token {
                kind: TokKind::Punct(c),
                text: &line[start..end_of(i + 1)],
                col,
            });
            i += 1;
        } else {
            return Err(AsmError {
                line: lineno,
                col,
                token: c.to_string(),
                kind: AsmErrorKind::Expected {
                    expected: "an instruction, operand or comment".into(),
                    found: format!("the character {c:?}"),
                },
            });
        }
    }
    Ok(toks)
}

/// Reads a string literal whose opening quote is at `chars[i]`; returns its value and the index
/// after the closing quote. Escapes: `\" \\ \n \t \r \0 \u{hex}`.
fn lex_string(
    chars: &[(usize, char)],
    i: usize,
    lineno: usize,
) -> Result<(String, usize), AsmError> {
    let err = |col: usize, token: String, what: &str| AsmError {
        line: lineno,
        col,
        token: token.clone(),
        kind: AsmErrorKind::Invalid(format!("{what}: {token}")),
    };
    let mut out = String::new();
    let mut j = i + 1;
    loop {
        let Some(&(_, c)) = chars.get(j) else {
            return Err(err(i + 1, "\"".into(), "unterminated string"));
        };
        match c {
            '"' => return Ok((out, j + 1)),
            '\\' => {
                let e = chars.get(j + 1).map(|x| x.1);
                let simple = match e {
                    Some('"') => Some('"'),
                    Some('\\') => Some('\\'),
                    Some('n') => Some('\n'),
                    Some('t') => Some('\t'),
                    Some('r') => Some('\r'),
                    Some('0') => Some('\0'),
                    _ => None,
                };
                if let Some(s) = simple {
                    out.push(s);
                    j += 2;
                } else if e == Some('u') && chars.get(j + 2).map(|x| x.1) == Some('{') {
                    let mut k = j + 3;
                    let mut hex = String::new();
                    while let Some(&(_, h)) = chars.get(k) {
                        if h == '}' {
                            break;
                        }
                        hex.push(h);
                        k += 1;
                    }
                    let ch = (hex.len() <= 6)
                        .then(|| u32::from_str_radix(&hex, 16).ok())
                        .flatten()
                        .and_then(char::from_u32);
                    match (ch, chars.get(k)) {
                        (Some(ch), Some(_)) => {
                            out.push(ch);
                            j = k + 1;
                        }
                        _ => {
                            let text: String =
                                chars[j..k.min(chars.len())].iter().map(|x| x.1).collect();
                            return Err(err(j + 1, text, "bad unicode escape"));
                        }
                    }
                } else {
                    let text: String = chars[j..(j + 2).min(chars.len())]
                        .iter()
                        .map(|x| x.1)
                        .collect();
                    return Err(err(j + 1, text, "unknown escape"));
                }
            }
            c => {
                out.push(c);
                j += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<String> {
        lex_line(s, 1)
            .unwrap()
            .into_iter()
            .map(|t| t.text.to_string())
            .collect()
    }

    #[test]
    fn splits_operands_and_drops_comments() {
        assert_eq!(
            kinds("loop: vadd.f32 v1, v2, -1.5e-3 ; c"),
            ["loop", ":", "vadd.f32", "v1", ",", "v2", ",", "-", "1.5e-3"]
        );
        assert_eq!(kinds("mark.begin #3 # comment"), ["mark.begin", "#", "3"]);
        assert_eq!(kinds("dma vmem[s1] // x"), ["dma", "vmem", "[", "s1", "]"]);
        assert_eq!(kinds("[s2 - 8]"), ["[", "s2", "-", "8", "]"]);
        assert_eq!(kinds("0x1e-5"), ["0x1e", "-", "5"]);
    }

    #[test]
    fn strings_unescape() {
        let t = lex_line(r#".marker "a\"b\u{1f}\n""#, 1).unwrap();
        assert_eq!(t[1].kind, TokKind::Str("a\"b\u{1f}\n".into()));
        assert!(lex_line("\"abc", 1).is_err());
        assert!(lex_line(r#""\u{110000}""#, 1).is_err());
        assert!(lex_line(r#""\q""#, 1).is_err());
    }
}
