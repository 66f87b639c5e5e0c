//! Golden cases (being built).
