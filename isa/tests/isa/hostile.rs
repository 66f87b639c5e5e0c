//! Hostile input: arbitrary and mutated bytes for the decoder, arbitrary text for the assembler.
//! Nothing may panic; whatever is accepted must be canonical (re-encodes to the same bytes, or
//! survives a text round trip).

use proptest::prelude::*;
use tpuemu_isa::*;

use crate::strategies::program;

fn check_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(p) = decode_program(bytes) {
        prop_assert_eq!(encode_program(&p), bytes);
    }
    Ok(())
}

/// Fragments that make text look enough like assembly to get past the first token.
const FRAGMENTS: &[&str] = &[
    "vadd.f32",
    "vld.bf16",
    "dma",
    "mxu.mm.bf16.p1",
    "mark.begin",
    "sem.wait",
    "br",
    "brz",
    "smov",
    "vcmp.ltu.f32",
    "vred.add.f32.lane",
    ".arg",
    ".smem",
    ".marker",
    ".program",
    "s1",
    "v2",
    "m3",
    "mxu0",
    "sem4",
    "a0",
    "hbm.a0",
    "hbm.x",
    "vmem",
    "[",
    "]",
    "+",
    "-",
    ",",
    ":",
    "=",
    "@",
    "#",
    "0x7fc00000",
    "1.5e-3",
    "inf",
    "-1",
    "4294967296",
    "\"q\\\"\"",
    "\"",
    "sub=",
    "rows=",
    "len=",
    "sem=",
    "remote=",
    "rsem=",
    "loop",
    "loop:",
    "\n",
    " ",
    ";",
    "//",
    "\t",
    "é",
    "\r\n",
    "buffer",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_words_decode_or_fail(w in any::<[u8; 16]>()) {
        if let Ok(i) = decode_instr(&w) {
            prop_assert_eq!(encode_instr(&i), w);
        }
    }

    #[test]
    fn random_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..200), magic in any::<bool>()) {
        if magic && bytes.len() >= 12 {
            bytes[..8].copy_from_slice(tpuemu_isa::encoding::MAGIC);
            bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        }
        check_bytes(&bytes)?;
    }

    #[test]
    fn mutated_programs_never_panic(
        p in program(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..4),
    ) {
        let mut bytes = encode_program(&p);
        for (at, value, kind) in edits {
            if bytes.is_empty() { break; }
            let i = at.index(bytes.len());
            match kind {
                0 => bytes[i] = value,
                1 => bytes[i] ^= 1 << (value % 8),
                2 => bytes.truncate(i),
                _ => bytes.insert(i, value),
            }
        }
        check_bytes(&bytes)?;
    }

    #[test]
    fn random_text_never_panics(s in "\\PC{0,60}") {
        let _ = assemble(&s);
    }

    #[test]
    fn assembly_like_text_never_panics(parts in proptest::collection::vec(proptest::sample::select(FRAGMENTS), 0..30)) {
        let text = parts.join(" ");
        if let Ok(p) = assemble(&text) {
            prop_assert_eq!(assemble(&disassemble(&p)), Ok(p));
        }
    }
}

#[test]
fn edge_inputs_are_rejected() {
    assert_eq!(decode_program(b""), Err(DecodeError::BadMagic));
    let mut b = encode_program(&Program::new("x"));
    b.push(0);
    assert!(matches!(
        decode_program(&b),
        Err(DecodeError::Trailing { count: 1, .. })
    ));
    let mut b = encode_program(&Program::new("x"));
    b[8] = 2;
    assert_eq!(decode_program(&b), Err(DecodeError::Version(2)));
    // A huge declared count is refused before anything is allocated.
    let mut b = encode_program(&Program::new(""));
    let n = b.len();
    b[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_program(&b),
        Err(DecodeError::Truncated { .. })
    ));
    // Invalid UTF-8 in the name.
    let mut b = encode_program(&Program::new("ab"));
    b[20] = 0xff;
    assert!(matches!(decode_program(&b), Err(DecodeError::Utf8 { .. })));
    // A nonzero reserved byte in a `nop`.
    let mut w = encode_instr(&Instr::Nop);
    w[9] = 1;
    assert!(decode_instr(&w).is_err());
    assert!(decode_instr(&[0xff; 16]).is_err());
}
