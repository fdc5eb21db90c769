//! Measurements of the completion paths and benchmarks on real files.
pub mod bench;
pub mod measure;
