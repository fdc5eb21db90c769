//! Where `--trace FILE`, `--perfetto FILE` and `--json FILE` write, under one rule that loses no
//! data: a path that exists is refused unless `--force` is given (and then only a regular file
//! that is not one of the command's inputs: an input, such as the scenario file, is refused even
//! with `--force`), as is a path whose directory does not exist or the same path given twice, all
//! before anything runs (exit 2, nothing written). `-` is standard output. A file is written to a
//! temporary file in its own directory (registered with [`crate::dev::cleanup::TempFile`], so
//! Ctrl-C removes it) and then hard-linked to its name, which fails rather than replace a file
//! that appeared meanwhile (where the filesystem has no hard links it is renamed after one more
//! check); with `--force` it is renamed over the old file, which `rename(2)` replaces atomically,
//! so a reader sees the old file or the new one, never a part.

use crate::dev::cleanup::TempFile;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// One output a command was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The option that named it (`--trace`), for messages.
    flag: &'static str,
    /// `None`: standard output.
    path: Option<PathBuf>,
    /// `--force`: an existing regular file is replaced.
    force: bool,
}

impl Output {
    /// Checks `path` for `flag` before the run: `-` is stdout; anything else must not exist and
    /// its directory must. `inputs` are the command's input files (named as such when given).
    pub fn check(flag: &'static str, path: &Path, inputs: &[&Path]) -> Result<Output, String> {
        Self::check_with(flag, path, inputs, false)
    }

    /// [`Output::check`], and with `force` (`--force`) an existing regular file that is not one
    /// of `inputs` is accepted, to be replaced when written.
    pub fn check_with(
        flag: &'static str,
        path: &Path,
        inputs: &[&Path],
        force: bool,
    ) -> Result<Output, String> {
        if path.as_os_str() == "-" {
            return Ok(Output {
                flag,
                path: None,
                force,
            });
        }
        let shown = path.display();
        if let Ok(md) = path.symlink_metadata() {
            let same = |i: &&Path| match (i.canonicalize(), path.canonicalize()) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            };
            if inputs.iter().any(same) {
                return Err(format!(
                    "{flag} {shown}: that is the command's input file (biosim never writes over its input, even with --force)"
                ));
            }
            if !force {
                return Err(format!(
                    "{flag} {shown}: the file exists (biosim never overwrites a file without --force: remove it, name another or add --force)"
                ));
            }
            if !md.file_type().is_file() {
                return Err(format!(
                    "{flag} {shown}: not a regular file (--force replaces regular files only)"
                ));
            }
        }
        let dir = parent(path);
        if !dir.is_dir() {
            return Err(format!(
                "{flag} {shown}: {} is not a directory",
                dir.display()
            ));
        }
        Ok(Output {
            flag,
            path: Some(path.to_owned()),
            force,
        })
    }

    /// Whether this output is standard output.
    pub fn is_stdout(&self) -> bool {
        self.path.is_none()
    }

    /// Writes `text` (see the module docs).
    pub fn write(&self, text: &str) -> Result<(), String> {
        let Some(path) = &self.path else {
            let mut out = std::io::stdout().lock();
            return out
                .write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| format!("{} -: cannot write to standard output: {e}", self.flag));
        };
        let fail =
            |e: std::io::Error| format!("{} {}: cannot write: {e}", self.flag, path.display());
        let tmp = TempFile::create_in(parent(path), ".biosim-out").map_err(fail)?;
        std::fs::write(tmp.path(), text).map_err(fail)?;
        if self.force {
            // Re-checked: the path may have become something else than a regular file.
            if path
                .symlink_metadata()
                .is_ok_and(|m| !m.file_type().is_file())
            {
                return Err(format!(
                    "{} {}: not a regular file (--force replaces regular files only)",
                    self.flag,
                    path.display()
                ));
            }
            return std::fs::rename(tmp.path(), path).map_err(fail);
        }
        match std::fs::hard_link(tmp.path(), path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(format!(
                "{} {}: the file appeared while biosim ran (biosim never overwrites a file)",
                self.flag,
                path.display()
            )),
            Err(_) if path.symlink_metadata().is_err() => {
                std::fs::rename(tmp.path(), path).map_err(fail)
            }
            Err(e) => Err(fail(e)),
        }
    }
}

/// The directory `path` is in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Checks a command's `--trace` and `--perfetto` together: each as [`Output::check`], and not
/// both the same file nor both stdout.
pub fn check_pair(
    trace: Option<&Path>,
    perfetto: Option<&Path>,
    inputs: &[&Path],
) -> Result<(Option<Output>, Option<Output>), String> {
    check_pair_with(trace, perfetto, inputs, false)
}

/// [`check_pair`] with `--force` ([`Output::check_with`]).
pub fn check_pair_with(
    trace: Option<&Path>,
    perfetto: Option<&Path>,
    inputs: &[&Path],
    force: bool,
) -> Result<(Option<Output>, Option<Output>), String> {
    if let (Some(t), Some(p)) = (trace, perfetto) {
        if t == p {
            return Err(format!(
                "--trace and --perfetto both name {}: give each its own file",
                t.display()
            ));
        }
    }
    let t = trace
        .map(|p| Output::check_with("--trace", p, inputs, force))
        .transpose()?;
    let p = perfetto
        .map(|p| Output::check_with("--perfetto", p, inputs, force))
        .transpose()?;
    Ok((t, p))
}

/// Writes a run's outputs: its ftrace text with `verdict` as the closing markers to `trace`, and
/// the Perfetto timeline of the same records, titled `title`, to `perfetto`.
pub fn write_trace_outputs(
    ftrace: &crate::report::ftrace::Ftrace,
    verdict: &[String],
    trace: Option<&Output>,
    perfetto: Option<&Output>,
    title: &str,
) -> Result<(), String> {
    let ftrace = ftrace.clone().with_verdicts(verdict);
    if let Some(o) = trace {
        o.write(&ftrace.text())?;
    }
    if let Some(p) = perfetto {
        p.write(&crate::report::perfetto::chrome_trace_json(&ftrace, title))?;
    }
    Ok(())
}

/// Prints a command's report lines: to standard output, or to standard error when the trace
/// itself goes to standard output (`--trace -`), so that stream is a `trace` file and nothing
/// else.
#[derive(Debug, Clone, Copy)]
pub struct Say {
    /// Report lines go to stderr.
    pub to_stderr: bool,
}

impl Say {
    /// For a command whose trace output is `trace`.
    pub fn for_trace(trace: Option<&Output>) -> Say {
        Say {
            to_stderr: trace.is_some_and(Output::is_stdout),
        }
    }

    /// Prints `text` as is.
    pub fn text(&self, text: &str) {
        if self.to_stderr {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    }

    /// Prints one line.
    pub fn line(&self, line: &str) {
        self.text(&format!("{line}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_files_inputs_and_missing_directories_are_refused_and_a_new_file_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.scn");
        std::fs::write(&input, "tick\n").unwrap();
        let e = Output::check("--trace", &input, &[&input]).unwrap_err();
        assert!(e.contains("input file"), "{e}");
        let e = Output::check("--trace", &input, &[]).unwrap_err();
        assert!(e.contains("the file exists"), "{e}");
        let e = Output::check("--trace", &dir.path().join("no/x.trace"), &[]).unwrap_err();
        assert!(e.contains("is not a directory"), "{e}");
        let e = check_pair(Some(Path::new("a")), Some(Path::new("a")), &[]).unwrap_err();
        assert!(e.contains("both name a"), "{e}");
        assert!(Output::check("--trace", Path::new("-"), &[])
            .unwrap()
            .is_stdout());
        let out = dir.path().join("x.trace");
        let o = Output::check("--trace", &out, &[]).unwrap();
        o.write("hello\n").unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "hello\n");
        // Written once: a second write refuses, the file keeps its text, no temporary is left.
        assert!(o.write("again\n").unwrap_err().contains("appeared"));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "hello\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "tick\n");
    }

    #[test]
    fn force_replaces_an_existing_output_but_never_an_input_nor_a_non_file() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.scn");
        std::fs::write(&input, "tick\n").unwrap();
        let e = Output::check_with("--perfetto", &input, &[&input], true).unwrap_err();
        assert!(
            e.contains("input file") && e.contains("even with --force"),
            "{e}"
        );
        // The same input through another name (a symlink) is still the input.
        let link = dir.path().join("link.scn");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        assert!(Output::check_with("--trace", &link, &[&input], true)
            .unwrap_err()
            .contains("input file"));
        assert!(Output::check_with("--trace", &link, &[], true)
            .unwrap_err()
            .contains("not a regular file"));
        assert!(Output::check_with("--trace", dir.path(), &[], true)
            .unwrap_err()
            .contains("not a regular file"));
        let out = dir.path().join("x.trace");
        std::fs::write(&out, "old\n").unwrap();
        assert!(Output::check_with("--trace", &out, &[&input], false)
            .unwrap_err()
            .contains("--force"));
        let o = Output::check_with("--trace", &out, &[&input], true).unwrap();
        o.write("new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new\n");
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "tick\n");
        // in.scn, link.scn, x.trace: no temporary left.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
        let (t, p) = check_pair_with(Some(&out), None, &[&input], true).unwrap();
        assert!(t.is_some() && p.is_none());
    }
}
