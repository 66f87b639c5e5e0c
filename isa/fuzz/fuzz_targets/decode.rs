//! Fuzz target: decoding arbitrary bytes as a program file and as instruction words never
//! panics, and whatever decodes re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tpuemu_isa::{decode_instr, decode_program, disassemble, encode_instr, encode_program};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = decode_program(data) {
        assert_eq!(encode_program(&p), data);
        assert_eq!(tpuemu_isa::assemble(&disassemble(&p)).as_ref(), Ok(&p));
    }
    for chunk in data.chunks_exact(16) {
        let mut word = [0u8; 16];
        word.copy_from_slice(chunk);
        if let Ok(i) = decode_instr(&word) {
            assert_eq!(encode_instr(&i), word);
        }
    }
});
