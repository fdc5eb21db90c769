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
            let old = path.symlink_metadata();
            if old.as_ref().is_ok_and(|m| !m.file_type().is_file()) {
                return Err(format!(
                    "{} {}: not a regular file (--force replaces regular files only)",
                    self.flag,
                    path.display()
                ));
            }
            if let Ok(m) = &old {
                keep_mode_and_owner(tmp.path(), m).map_err(fail)?;
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

/// Where `path` would be written: its directory canonicalized (symlinks and `.`/`..` resolved)
/// joined with its file name; `None` when the directory does not resolve.
fn identity(path: &Path) -> Option<PathBuf> {
    match path.file_name() {
        Some(name) => Some(parent(path).canonicalize().ok()?.join(name)),
        None => path.canonicalize().ok(),
    }
}

/// Whether two output paths name one file (see the module docs).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    if let (Some(x), Some(y)) = (identity(a), identity(b)) {
        if x == y {
            return true;
        }
    }
    match (a.metadata(), b.metadata()) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Gives the temporary file `tmp` the permission bits of `old`, the file it is about to replace,
/// and as root its owner and group (see the module docs).
fn keep_mode_and_owner(tmp: &Path, old: &std::fs::Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(tmp, Some(old.uid()), Some(old.gid()))?;
    }
    // After chown, which clears setuid/setgid anyway; only the permission bits are kept.
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(old.mode() & 0o777))
}

/// Checks that no two of a command's outputs (`(flag, path)`, `-` standing for standard output
/// whatever the flag) write to one place: the same file however it is named ([`same_file`]:
/// one canonical path, or one inode), or both standard output, where one stream would be the
/// two outputs interleaved. Checked before anything runs, beside each output's own
/// [`Output::check`].
pub fn check_distinct(outputs: &[(&str, &Path)]) -> Result<(), String> {
    for (i, (fa, a)) in outputs.iter().enumerate() {
        for (fb, b) in &outputs[i + 1..] {
            let (out_a, out_b) = (a.as_os_str() == "-", b.as_os_str() == "-");
            if out_a && out_b {
                return Err(format!(
                    "{fa} and {fb} both write to standard output: give one of them a file"
                ));
            }
            if !out_a && !out_b && (a == b || same_file(a, b)) {
                return Err(format!(
                    "{fa} and {fb} both name {}: give each its own file",
                    a.display()
                ));
            }
        }
    }
    Ok(())
}

/// Checks a command's `--trace` and `--perfetto` together: each as [`Output::check`], and not
/// both the same file nor both stdout ([`check_distinct`]).
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
    let given: Vec<(&str, &Path)> = [("--trace", trace), ("--perfetto", perfetto)]
        .into_iter()
        .filter_map(|(f, p)| Some((f, p?)))
        .collect();
    check_distinct(&given)?;
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

    #[test]
    fn no_two_outputs_share_a_file_or_standard_output() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (a, a2, b) = (d.join("a"), d.join("./a"), d.join("b"));
        let e = check_distinct(&[("--json", &a), ("--trace", &a2)]).unwrap_err();
        assert_eq!(
            e,
            format!(
                "--json and --trace both name {}: give each its own file",
                a.display()
            )
        );
        let dash = Path::new("-");
        let e = check_distinct(&[("--out", &b), ("--trace", dash), ("--json", dash)]).unwrap_err();
        assert_eq!(
            e,
            "--trace and --json both write to standard output: give one of them a file"
        );
        // Any pair, not only neighbours.
        let e = check_distinct(&[("--trace", &a), ("--perfetto", &b), ("--json", &a)]).unwrap_err();
        assert!(e.starts_with("--trace and --json both name"), "{e}");
        // One of them on standard output, or different files: fine.
        assert_eq!(check_distinct(&[("--json", dash), ("--trace", &a)]), Ok(()));
        assert_eq!(check_distinct(&[("--json", &a), ("--trace", &b)]), Ok(()));
        assert_eq!(check_distinct(&[]), Ok(()));
        let e = check_pair(Some(dash), Some(dash), &[]).unwrap_err();
        assert!(e.contains("both write to standard output"), "{e}");
    }

    #[test]
    fn two_spellings_of_one_output_are_refused_and_force_keeps_the_mode() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::os::unix::fs::symlink(d.join("sub"), d.join("alias")).unwrap();
        let same = [
            (d.join("sub/a"), d.join("sub/./a")),
            (d.join("sub/a"), d.join("alias/a")),
            (d.join("sub/a"), d.join("sub/../sub/a")),
        ];
        for (t, p) in &same {
            let e = check_pair_with(Some(t), Some(p), &[], true).unwrap_err();
            assert!(e.contains("give each its own file"), "{t:?} {p:?}: {e}");
        }
        // Bare `a` and `./a` relative to the working directory are one file too.
        assert!(same_file(Path::new("a"), Path::new("./a")));
        // A hard link: two names, one inode.
        std::fs::write(d.join("sub/h"), "x").unwrap();
        std::fs::hard_link(d.join("sub/h"), d.join("sub/h2")).unwrap();
        assert!(
            check_pair_with(Some(&d.join("sub/h")), Some(&d.join("sub/h2")), &[], true).is_err()
        );
        // Different names stay accepted.
        assert!(
            check_pair_with(Some(&d.join("sub/a")), Some(&d.join("alias/b")), &[], true).is_ok()
        );
        // --force keeps the replaced file's permission bits.
        let out = d.join("sub/m.trace");
        std::fs::write(&out, "old\n").unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
        Output::check_with("--trace", &out, &[], true)
            .unwrap()
            .write("new\n")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new\n");
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640, "{mode:o}");
        // As root the owner is kept too (only root can give a file away).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            use std::os::unix::fs::MetadataExt as _;
            std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
            Output::check_with("--trace", &out, &[], true)
                .unwrap()
                .write("newer\n")
                .unwrap();
            let m = std::fs::metadata(&out).unwrap();
            assert_eq!((m.uid(), m.gid()), (65534, 65534));
        }
    }
}
