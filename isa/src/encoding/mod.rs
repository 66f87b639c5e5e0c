//! The binary encoding: fixed 16-byte instruction words ([`encode_instr`], [`decode_instr`],
//! layout in [`word`]) and the program file format ([`encode_program`], [`decode_program`]).
//!
//! Program file, all integers little-endian, strings as a `u32` byte length and UTF-8 bytes:
//!
//! | field | type |
//! |---|---|
//! | magic | 8 bytes, [`MAGIC`] (`TPUEMU\0P`) |
//! | version | `u32`, [`FORMAT_VERSION`] |
//! | flags | `u32`: bit 0 `source_op` present, bit 1 `fusion_group` present; others zero |
//! | name | string |
//! | argument count, then per argument | `u32`; `u8` kind (0 buffer, 1 scalar), string name |
//! | marker count, then per marker | `u32`; string |
//! | SMEM preload count, then per preload | `u32`; `u32` byte address, `u32` word count, words as `u32` |
//! | source op | string, when flag bit 0 |
//! | fusion group | `u64`, when flag bit 1 |
//! | instruction count, then the words | `u32`; 16 bytes each, to the end of the file |
//!
//! Decoding is strict: it accepts only what [`encode_program`] writes for a program that passes
//! [`check_program`], so `encode_program(&decode_program(b)?) == b`. It never panics, and it
//! never allocates more than the input's size: every count is checked against the bytes left.

pub mod word;
mod word_decode;

pub use word::{INSTR_BYTES, OPCODES, WordError, encode_instr, opcode_name};
pub use word_decode::decode_word;

use crate::instr::Instr;
use crate::program::{ArgDecl, ArgKind, Program, SmemInit};
use crate::verify::{ProgramError, check_program};

/// The first 8 bytes of a program file.
pub const MAGIC: &[u8; 8] = b"TPUEMU\0P";
/// The format version this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;

const FLAG_SOURCE_OP: u32 = 1;
const FLAG_FUSION_GROUP: u32 = 2;

/// Why bytes are not a valid instruction or program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The file does not start with [`MAGIC`].
    #[error("not a tpuemu program: the file does not start with the magic `TPUEMU\\0P`")]
    BadMagic,
    /// A format version this build does not read.
    #[error(
        "program format version {0} is not supported (this build reads version {FORMAT_VERSION})"
    )]
    Version(u32),
    /// The input ends inside a field.
    #[error("at byte {offset}: {what} needs {need} bytes but only {have} are left")]
    Truncated {
        /// Where the field starts.
        offset: usize,
        /// The field.
        what: &'static str,
        /// Bytes it needs.
        need: u64,
        /// Bytes left.
        have: usize,
    },
    /// A string is not UTF-8.
    #[error("at byte {offset}: {what} is not valid UTF-8")]
    Utf8 {
        /// Where the string's bytes start.
        offset: usize,
        /// The field.
        what: &'static str,
    },
    /// A field holds a value it may not.
    #[error("at byte {offset}: {what}")]
    Field {
        /// Where the field starts.
        offset: usize,
        /// What is wrong.
        what: String,
    },
    /// Bytes after the last instruction.
    #[error("at byte {offset}: {count} bytes follow the last instruction")]
    Trailing {
        /// Where they start.
        offset: usize,
        /// How many.
        count: usize,
    },
    /// An instruction word is invalid.
    #[error("instruction {index} (byte {offset}): {error}")]
    Instr {
        /// Its index in the program (0 for [`decode_instr`]).
        index: usize,
        /// Its byte offset in the input.
        offset: usize,
        /// What is wrong.
        error: WordError,
    },
    /// The program decodes but is not valid.
    #[error("invalid program: {0}")]
    Program(#[from] ProgramError),
}

/// Decodes one instruction word.
pub fn decode_instr(bytes: &[u8; INSTR_BYTES]) -> Result<Instr, DecodeError> {
    decode_word(bytes).map_err(|error| DecodeError::Instr {
        index: 0,
        offset: 0,
        error,
    })
}

/// Encodes a program in the file format. The program should pass [`check_program`]; one that
/// does not encodes all the same, but [`decode_program`] will refuse it.
pub fn encode_program(p: &Program) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + p.instrs.len() * INSTR_BYTES);
    out.extend_from_slice(MAGIC);
    put_u32(&mut out, FORMAT_VERSION);
    let flags = if p.source_op.is_some() {
        FLAG_SOURCE_OP
    } else {
        0
    } | if p.fusion_group.is_some() {
        FLAG_FUSION_GROUP
    } else {
        0
    };
    put_u32(&mut out, flags);
    put_str(&mut out, &p.name);
    put_u32(&mut out, p.args.len() as u32);
    for a in &p.args {
        out.push(match a.kind {
            ArgKind::Buffer => 0,
            ArgKind::Scalar => 1,
        });
        put_str(&mut out, &a.name);
    }
    put_u32(&mut out, p.markers.len() as u32);
    for m in &p.markers {
        put_str(&mut out, m);
    }
    put_u32(&mut out, p.smem_init.len() as u32);
    for b in &p.smem_init {
        put_u32(&mut out, b.addr);
        put_u32(&mut out, b.words.len() as u32);
        for w in &b.words {
            put_u32(&mut out, *w);
        }
    }
    if let Some(op) = &p.source_op {
        put_str(&mut out, op);
    }
    if let Some(g) = p.fusion_group {
        out.extend_from_slice(&g.to_le_bytes());
    }
    put_u32(&mut out, p.instrs.len() as u32);
    for i in &p.instrs {
        out.extend_from_slice(&encode_instr(i));
    }
    out
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s.as_bytes());
}

/// Decodes a program file; the result passes [`check_program`].
pub fn decode_program(bytes: &[u8]) -> Result<Program, DecodeError> {
    let mut r = Reader { b: bytes, pos: 0 };
    if r.take(8, "magic").ok() != Some(&MAGIC[..]) {
        return Err(DecodeError::BadMagic);
    }
    let version = r.u32("format version")?;
    if version != FORMAT_VERSION {
        return Err(DecodeError::Version(version));
    }
    let at = r.pos;
    let flags = r.u32("flags")?;
    if flags & !(FLAG_SOURCE_OP | FLAG_FUSION_GROUP) != 0 {
        return Err(DecodeError::Field {
            offset: at,
            what: format!("reserved flag bits are set (flags {flags:#x})"),
        });
    }
    let mut p = Program::new(r.str("program name")?);
    let n = r.count("argument count", 5)?;
    for _ in 0..n {
        let at = r.pos;
        let kind = match r.take(1, "argument kind")?[0] {
            0 => ArgKind::Buffer,
            1 => ArgKind::Scalar,
            k => {
                return Err(DecodeError::Field {
                    offset: at,
                    what: format!("argument kind {k} (expected 0 for buffer or 1 for scalar)"),
                });
            }
        };
        let name = r.str("argument name")?;
        p.args.push(ArgDecl { name, kind });
    }
    let n = r.count("marker count", 4)?;
    for _ in 0..n {
        p.markers.push(r.str("marker name")?);
    }
    let n = r.count("SMEM preload count", 8)?;
    for _ in 0..n {
        let addr = r.u32("SMEM preload address")?;
        let words = r.count("SMEM preload word count", 4)?;
        let mut block = SmemInit {
            addr,
            words: Vec::with_capacity(words),
        };
        for _ in 0..words {
            block.words.push(r.u32("SMEM preload word")?);
        }
        p.smem_init.push(block);
    }
    if flags & FLAG_SOURCE_OP != 0 {
        p.source_op = Some(r.str("source op")?);
    }
    if flags & FLAG_FUSION_GROUP != 0 {
        let b = r.take(8, "fusion group")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        p.fusion_group = Some(u64::from_le_bytes(a));
    }
    let n = r.count("instruction count", INSTR_BYTES)?;
    let left = bytes.len() - r.pos;
    if left > n * INSTR_BYTES {
        return Err(DecodeError::Trailing {
            offset: r.pos + n * INSTR_BYTES,
            count: left - n * INSTR_BYTES,
        });
    }
    p.instrs.reserve_exact(n);
    for index in 0..n {
        let offset = r.pos;
        let mut word = [0u8; INSTR_BYTES];
        word.copy_from_slice(r.take(INSTR_BYTES, "instruction")?);
        let instr = decode_word(&word).map_err(|error| DecodeError::Instr {
            index,
            offset,
            error,
        })?;
        p.instrs.push(instr);
    }
    check_program(&p)?;
    Ok(p)
}

/// A cursor over the input that checks every length against what is left.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let have = self.b.len() - self.pos;
        if n > have {
            return Err(DecodeError::Truncated {
                offset: self.pos,
                what,
                need: n as u64,
                have,
            });
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A count of items of at least `min_bytes` each, refused when they cannot fit in the rest.
    fn count(&mut self, what: &'static str, min_bytes: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.u32(what)? as usize;
        let have = self.b.len() - self.pos;
        let need = n as u64 * min_bytes as u64;
        if need > have as u64 {
            return Err(DecodeError::Truncated {
                offset: at,
                what,
                need,
                have,
            });
        }
        Ok(n)
    }

    fn str(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let n = self.count(what, 1)?;
        let at = self.pos;
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError::Utf8 { offset: at, what })
    }
}
