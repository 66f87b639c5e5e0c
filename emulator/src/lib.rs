//! The emulator (being built).
