//! (Being written: tests for `matrix_backward`.)
