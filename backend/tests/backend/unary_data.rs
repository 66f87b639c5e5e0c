//! (Being written: tests for `unary_data`.)
