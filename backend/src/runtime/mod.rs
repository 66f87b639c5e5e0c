//! The runtime: a device, its kernel cache, the host clock, the executors and their metrics.

pub mod storage;
