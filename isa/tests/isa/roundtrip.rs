//! Round trips of generated instructions and programs through text and bytes.

use proptest::prelude::*;
use tpuemu_isa::encoding::decode_word;
use tpuemu_isa::verify::check_program;
use tpuemu_isa::*;

use crate::strategies::{fix_up, instr, program};

/// 64 buffer arguments and one marker, so that any single instruction's slots and marker index
/// resolve.
fn prelude() -> String {
    let mut s = String::from(".marker \"m\"\n");
    for i in 0..64 {
        s.push_str(&format!(".arg x{i} buffer\n"));
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn instr_display_assembles_back(i in instr()) {
        let all: Vec<u8> = (0..64).collect();
        let i = fix_up(i, 1, 1, &all);
        let p = assemble(&format!("{}{i}\n", prelude())).map_err(|e| TestCaseError::fail(format!("{i}: {e}")))?;
        prop_assert_eq!(p.instrs, vec![i]);
    }

    #[test]
    fn instr_word_round_trips(i in instr()) {
        let w = encode_instr(&i);
        prop_assert_eq!(decode_instr(&w), Ok(i));
        prop_assert_eq!(decode_word(&w).map(|i| encode_instr(&i)), Ok(w));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn program_text_round_trips(p in program()) {
        prop_assert_eq!(check_program(&p), Ok(()));
        let text = disassemble(&p);
        let back = assemble(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(back, p);
    }

    #[test]
    fn program_bytes_round_trip(p in program()) {
        let bytes = encode_program(&p);
        let back = decode_program(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &p);
        prop_assert_eq!(encode_program(&back), bytes);
    }
}
