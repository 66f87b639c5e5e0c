//! The isa crate's one integration test binary.
//!
//! - `strategies`: proptest generators for every instruction variant and for whole valid
//!   programs;
//! - `roundtrip`: text and binary round trips of generated instructions and programs;
//! - `hostile`: decoding arbitrary and mutated bytes, assembling arbitrary text (never a panic);
//! - `handwritten`: one program per instruction class, the examples, and error messages;
//! - `builder`: every `ProgramBuilder` instruction method against the assembler.

mod builder;
mod handwritten;
mod hostile;
mod roundtrip;
mod strategies;
mod trace_input;
