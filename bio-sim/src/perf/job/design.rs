//! What a job runs on: the designs `biosim bench JOBFILE` puts side by side, chosen with
//! `--variant` (the loop model's posted versions), `--compare` (the baselines) and `--device`,
//! and the simulated kernel's configuration (`--kernel-config`).

use bio_core::drivers::block::loop_drv::LoopVariant;
use std::fmt;

/// One design a job runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    /// biosim's loop model (`drivers/block/loop.c` with the NOWAIT series at this version) on
    /// the threaded runtime over the job's file.
    Loop(LoopVariant),
    /// The same job directly on the file, with the same engine and depth.
    Raw,
    /// The running kernel's own loop device over the same file (`LOOP_CONFIGURE` with
    /// `LO_FLAGS_DIRECT_IO`), the raw job through `/dev/loopN`.
    KernelLoop,
    /// biosim's null_blk model (`drivers/block/null_blk/main.c`) on the threaded runtime.
    NullBlk,
}

impl Design {
    /// The name in the table and in `--json`.
    pub fn name(&self) -> &'static str {
        match self {
            Design::Loop(v) => v.name,
            Design::Raw => "raw",
            Design::KernelLoop => "kernel-loop",
            Design::NullBlk => "null_blk",
        }
    }

    /// Whether it runs on biosim's simulated machine (its counters are the model's).
    pub fn is_simulated(&self) -> bool {
        matches!(self, Design::Loop(_) | Design::NullBlk)
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The loop versions a job runs on by default (v4 differs from v5 only in what its splat and
/// its FMODE_NOWAIT check cost, which a regular file does not show).
pub const DEFAULT_VARIANTS: [LoopVariant; 3] =
    [LoopVariant::BASE, LoopVariant::V5_NO_HINT, LoopVariant::V5];

/// `--variant`: comma-separated loop versions, or `all` (base, v5-no-hint, v5).
pub fn parse_variants(s: &str) -> Result<Vec<LoopVariant>, String> {
    if s == "all" {
        return Ok(DEFAULT_VARIANTS.to_vec());
    }
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim) {
        let v = LoopVariant::by_name(name).ok_or_else(|| {
            format!(
                "--variant: unknown loop version `{name}` (expected {} or all)",
                LoopVariant::names().collect::<Vec<_>>().join(", ")
            )
        })?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

/// A baseline `--compare` can add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// `raw`.
    Raw,
    /// `kernel-loop`.
    KernelLoop,
}

/// `--compare`: comma-separated `raw`, `kernel-loop`, or `none`.
pub fn parse_compare(s: &str) -> Result<Vec<Compare>, String> {
    if s == "none" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim) {
        let c = match name {
            "raw" => Compare::Raw,
            "kernel-loop" => Compare::KernelLoop,
            _ => {
                return Err(format!(
                    "--compare: unknown baseline `{name}` (expected raw, kernel-loop or none)"
                ))
            }
        };
        if !out.contains(&c) {
            out.push(c);
        }
    }
    Ok(out)
}

/// `--device`: what the simulated design is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// `loop`: the loop model over the job's file.
    Loop,
    /// `null_blk`: the null_blk model (no file).
    NullBlk,
}

/// Parses `--device`.
pub fn parse_device(s: &str) -> Result<DeviceKind, String> {
    match s {
        "loop" => Ok(DeviceKind::Loop),
        "null_blk" | "nullb" => Ok(DeviceKind::NullBlk),
        _ => Err(format!(
            "--device: unknown device `{s}` (expected loop or null_blk)"
        )),
    }
}

/// `--kernel-config`: the configuration the simulated machine boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BenchKernel {
    /// `debug`: biosim's default kernel ([`bio_core::KernelConfig::default`]: lockdep and
    /// `DEBUG_ATOMIC_SLEEP` on), as every scenario and `explore` boot.
    Debug,
    /// `machine` (the default): the bench machine's own kernel without its debug options
    /// ([`bio_core::KernelConfig::distro_6_18`]), the one `raw` and `kernel-loop` run on, so
    /// that like is compared with like.
    #[default]
    Machine,
}

impl BenchKernel {
    /// The name on the command line, in the header and in `--json`.
    pub fn name(self) -> &'static str {
        match self {
            BenchKernel::Debug => "debug",
            BenchKernel::Machine => "machine",
        }
    }

    /// The configuration booted.
    pub fn config(self) -> bio_core::KernelConfig {
        match self {
            BenchKernel::Debug => bio_core::KernelConfig::default(),
            BenchKernel::Machine => bio_core::KernelConfig::distro_6_18(),
        }
    }
}

/// Parses `--kernel-config`.
pub fn parse_kernel_config(s: &str) -> Result<BenchKernel, String> {
    match s {
        "debug" => Ok(BenchKernel::Debug),
        "machine" => Ok(BenchKernel::Machine),
        _ => Err(format!(
            "--kernel-config: unknown configuration `{s}` (expected debug or machine)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_unknown_ones_are_refused_by_name() {
        assert_eq!(parse_variants("all").unwrap().len(), 3);
        assert_eq!(parse_variants("v5,base,v5").unwrap().len(), 2);
        let e = parse_variants("v9").unwrap_err();
        assert!(e.contains("`v9`") && e.contains("base"), "{e}");
        assert_eq!(
            parse_compare("raw,kernel-loop").unwrap(),
            vec![Compare::Raw, Compare::KernelLoop]
        );
        assert!(parse_compare("none").unwrap().is_empty());
        assert!(parse_compare("fio").unwrap_err().contains("`fio`"));
        assert_eq!(parse_device("null_blk"), Ok(DeviceKind::NullBlk));
        assert!(parse_device("nvme").unwrap_err().contains("`nvme`"));
        assert_eq!(parse_kernel_config("debug"), Ok(BenchKernel::Debug));
        assert!(parse_kernel_config("debug").unwrap().config().prove_locking);
        assert!(
            !parse_kernel_config("machine")
                .unwrap()
                .config()
                .prove_locking
        );
        assert!(parse_kernel_config("lockdep")
            .unwrap_err()
            .contains("`lockdep`"));
    }
}
