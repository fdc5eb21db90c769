//! fio job files as biosim's workload language: the subset of fio's INI syntax (`fio(1)`, HOWTO
//! "Job file format") a storage engineer writes every day, read into [`JobSpec`]s that
//! `biosim bench JOBFILE` runs on a simulated device, on the backing file directly (`raw`) and
//! on the kernel's own loop device. An option outside the subset is refused by name: a job file
//! that says something biosim would not do must not run as if it had.
//!
//! - [`job`]: what one job asks for (the parsed options, fio's defaults filled in).
//! - [`parse`]: the INI reader (`[global]`, job sections, `key=value`, comments).
//! - [`verify`]: `verify=crc32c`'s self-describing blocks (offset, generation, checksum).

pub mod job;
pub mod parse;
pub mod verify;

pub use job::{FallocateMode, IoEngine, JobFile, JobSpec, RwPattern, VerifyKind};

#[cfg(test)]
mod tests;
