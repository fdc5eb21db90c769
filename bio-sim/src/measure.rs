//! Measurements of the bio completion paths on the threaded runtime (deferral throughput, completion
//! latency and worker wake-ups per bio), shared by `biosim findings` and the benchmarks.
