//! (Being written: tests for `reduce_nn`.)
