//! Fuzz target: assembling arbitrary text never panics, and whatever assembles survives the
//! disassemble -> assemble and encode -> decode round trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tpuemu_isa::{assemble, decode_program, disassemble, encode_program};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = assemble(text) {
        assert_eq!(assemble(&disassemble(&p)).as_ref(), Ok(&p));
        assert_eq!(decode_program(&encode_program(&p)).as_ref(), Ok(&p));
    }
});
