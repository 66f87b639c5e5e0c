//! The golden crate's integration tests (one binary, one module per topic).

mod committed;
mod fuzz;
mod host;
mod malformed;
mod runner;
