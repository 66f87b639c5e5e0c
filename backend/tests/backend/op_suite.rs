//! (Being written: tests for `op_suite`.)
