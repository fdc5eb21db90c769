//! The guide cannot go stale: every command output quoted in `README.md` and `docs/` (recursively)
//! is run against the built programs and compared with the quoted text.
//!
//! The convention (docs/design.md, "Checked examples"):
//!
//! * A quoted output is a fenced block tagged `console`. Its first line is `$ COMMAND`, the rest is
//!   what the command prints (stdout, then stderr). The command is `biosim ARGS` (the binary of this
//!   crate) or `cargo run -p PKG --example NAME [-- ARGS]` (the example, built fresh), with
//!   optional `VAR=VALUE` prefixes. It runs in the workspace root with `RUST_LOG` unset unless the
//!   block sets it.
//! * A line that is exactly `...` stands for any number of lines (none included); `[..]` inside a
//!   line stands for any run of characters. Everything else must match line for line (trailing
//!   blanks ignored), so an excerpt without `...` is the whole output and lines between two `...`
//!   are a contiguous run of it.
//! * `console status=N` expects exit status N (default 0).
//! * `$SCRATCH` in a command is a directory made fresh for each markdown file and shared by its
//!   blocks in order (a tour writes a file in one block and runs it in the next); the file
//!   says `export SCRATCH=$(mktemp -d)` for its reader. The directory's path is written back as
//!   `$SCRATCH` in the output, and the directory is removed after the file's blocks ran.
//! * A block tagged `LANG file=PATH` (e.g. ```` ```scn file=docs/scenarios/x.scn ````) quotes a
//!   file of the repository: its body must be that file's text, line for line.
//! * `console unchecked: REASON` is a quoted output that is not run (needs root, a live kernel, or
//!   shows real timings); the reason is required and the list is kept short (`MAX_UNCHECKED`).
//! * Every other fenced block must say what it is (`sh` for instructions, `text`, `c`, `rust`, ...),
//!   and may not contain a `$ ` prompt line: a bare fence, or a quoted run outside `console`, fails.
//!
//! Bless: `BIOSIM_BLESS=1 cargo test -p bio-sim --test doc_examples` rewrites every quoted output
//! that differs in place, keeping its `...` and `[..]` elisions where they still match.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Quoted outputs that are deliberately not run. Raising this needs a reason in the review.
const MAX_UNCHECKED: usize = 6;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bio-sim lives in the workspace")
        .to_path_buf()
}

fn markdown_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let mut files = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut files);
    files
}

#[derive(Debug)]
enum Kind {
    Checked {
        status: i32,
    },
    /// A quoted file (`LANG file=PATH`): the body is the file's text.
    File {
        path: String,
    },
    Unchecked {
        reason: String,
    },
    Other,
}

#[derive(Debug)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    indent: String,
    info: String,
    kind: Kind,
    /// Index (0-based, in the file's lines) of the first body line and one past the last.
    body: std::ops::Range<usize>,
}

fn parse_blocks(text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let trimmed = l.trim_start();
        if !trimmed.starts_with("```") {
            i += 1;
            continue;
        }
        let indent = l[..l.len() - trimmed.len()].to_owned();
        let info = trimmed.trim_start_matches('`').trim().to_owned();
        let open = i;
        let mut close = open + 1;
        while close < lines.len() && lines[close].trim() != "```" {
            close += 1;
        }
        if close == lines.len() {
            return Err(format!("line {}: unclosed fence", open + 1));
        }
        let kind = if let Some(rest) = info.strip_prefix("console") {
            let rest = rest.trim();
            if let Some(reason) = rest.strip_prefix("unchecked:") {
                Kind::Unchecked {
                    reason: reason.trim().to_owned(),
                }
            } else if rest.is_empty() {
                Kind::Checked { status: 0 }
            } else if let Some(n) = rest.strip_prefix("status=") {
                Kind::Checked {
                    status: n
                        .parse()
                        .map_err(|_| format!("line {}: bad `status=` in `{info}`", open + 1))?,
                }
            } else {
                return Err(format!(
                    "line {}: unknown console attribute `{rest}` (status=N or unchecked: REASON)",
                    open + 1
                ));
            }
        } else if let Some((_, path)) = info.split_once(" file=") {
            Kind::File {
                path: path.trim().to_owned(),
            }
        } else {
            Kind::Other
        };
        blocks.push(Block {
            line: open + 1,
            indent,
            info,
            kind,
            body: open + 1..close,
        });
        i = close + 1;
    }
    Ok(blocks)
}

/// One line of an expected excerpt against one line of output: `[..]` matches any characters.
fn line_matches(pattern: &str, actual: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == actual;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !actual.starts_with(first) || actual.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    if !actual.ends_with(last) {
        return false;
    }
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(p) => rest = &rest[p + mid.len()..],
            None => return false,
        }
    }
    true
}

fn is_elision(l: &str) -> bool {
    l.trim() == "..."
}

/// The expected lines (with `...`) against the actual lines.
fn excerpt_matches(expected: &[String], actual: &[String]) -> bool {
    // memo[(i, j)]: expected[i..] matches actual[j..]
    fn go(
        e: &[String],
        a: &[String],
        i: usize,
        j: usize,
        memo: &mut HashMap<(usize, usize), bool>,
    ) -> bool {
        if let Some(&r) = memo.get(&(i, j)) {
            return r;
        }
        let r = if i == e.len() {
            j == a.len()
        } else if is_elision(&e[i]) {
            (j..=a.len()).any(|k| go(e, a, i + 1, k, memo))
        } else {
            j < a.len() && line_matches(&e[i], &a[j]) && go(e, a, i + 1, j + 1, memo)
        };
        memo.insert((i, j), r);
        r
    }
    go(expected, actual, 0, 0, &mut HashMap::new())
}

/// How alike two lines are, for placing an excerpt's lines in a changed output.
fn similarity(pattern: &str, actual: &str) -> u64 {
    if line_matches(pattern, actual) {
        return 10_000;
    }
    let mut words: HashMap<&str, i32> = HashMap::new();
    for w in pattern.split_whitespace() {
        *words.entry(w).or_default() += 1;
    }
    let mut common = 0u64;
    for w in actual.split_whitespace() {
        if let Some(n) = words.get_mut(w) {
            if *n > 0 {
                *n -= 1;
                common += 1;
            }
        }
    }
    let total = (pattern.split_whitespace().count() + actual.split_whitespace().count()) as u64;
    if total == 0 {
        return 0;
    }
    common * 2000 / total
}

/// The excerpt rewritten for a new output: each run of lines between `...` markers is placed where
/// it fits the output best (in order, not overlapping, anchored to the start or end where there is
/// no `...`), and a line that no longer matches is replaced by the output's line there. Without
/// `...`, or when the runs no longer fit, the whole output.
fn bless_excerpt(expected: &[String], actual: &[String]) -> Vec<String> {
    if excerpt_matches(expected, actual) {
        return expected.to_vec();
    }
    let mut segments: Vec<Vec<String>> = vec![Vec::new()];
    for l in expected {
        if is_elision(l) {
            if !segments.last().expect("non-empty").is_empty() {
                segments.push(Vec::new());
            }
        } else {
            segments.last_mut().expect("non-empty").push(l.clone());
        }
    }
    if segments.last().is_some_and(Vec::is_empty) {
        segments.pop();
    }
    let lead_gap = expected.first().is_some_and(|l| is_elision(l));
    let trail_gap = expected.last().is_some_and(|l| is_elision(l));
    let total: usize = segments.iter().map(Vec::len).sum();
    if segments.is_empty()
        || (!lead_gap && !trail_gap && segments.len() == 1)
        || total > actual.len()
    {
        return actual.to_vec();
    }
    let m = actual.len();
    let k = segments.len();
    let score = |seg: &[String], s: usize| -> u64 {
        seg.iter()
            .zip(&actual[s..s + seg.len()])
            .map(|(p, a)| similarity(p, a))
            .sum()
    };
    // best[s] for segment `idx`: the best total with segment idx starting at s.
    let mut prev: Vec<Option<(u64, usize)>> = Vec::new(); // (score, start of the previous segment)
    let mut choices: Vec<Vec<Option<(u64, usize)>>> = Vec::new();
    for (idx, seg) in segments.iter().enumerate() {
        let len = seg.len();
        let mut cur = vec![None; m + 1];
        // prefix maximum of prev over starts s' with s' + prev_len <= s
        let prev_len = if idx > 0 { segments[idx - 1].len() } else { 0 };
        let mut best_prev: Option<(u64, usize)> = None;
        let mut next_prev = 0usize;
        for (s, slot) in cur.iter_mut().enumerate() {
            if s + len > m {
                break;
            }
            let last_fits = idx + 1 < k || trail_gap || s + len == m;
            if idx == 0 {
                if (lead_gap || s == 0) && last_fits {
                    *slot = Some((score(seg, s), usize::MAX));
                }
                continue;
            }
            while next_prev + prev_len <= s && next_prev <= m {
                if let Some((sc, _)) = prev[next_prev] {
                    if best_prev.is_none_or(|(b, _)| sc > b) {
                        best_prev = Some((sc, next_prev));
                    }
                }
                next_prev += 1;
            }
            if let Some((b, from)) = best_prev.filter(|_| last_fits) {
                *slot = Some((b + score(seg, s), from));
            }
        }
        choices.push(cur.clone());
        prev = cur;
    }
    let Some((mut s, _)) = prev
        .iter()
        .enumerate()
        .filter_map(|(s, c)| c.map(|(sc, _)| (s, sc)))
        .max_by_key(|&(s, sc)| (sc, std::cmp::Reverse(s)))
    else {
        return actual.to_vec();
    };
    let mut starts = vec![0; k];
    for idx in (0..k).rev() {
        starts[idx] = s;
        s = choices[idx][s].expect("chosen").1;
    }
    let mut out = Vec::new();
    if lead_gap {
        out.push("...".to_owned());
    }
    for (idx, seg) in segments.iter().enumerate() {
        if idx > 0 {
            out.push("...".to_owned());
        }
        for (p, a) in seg.iter().zip(&actual[starts[idx]..]) {
            out.push(if line_matches(p, a) {
                p.clone()
            } else {
                a.clone()
            });
        }
    }
    if trail_gap {
        out.push("...".to_owned());
    }
    out
}

/// Splits a shell-like command line (no quoting needed by the guide; single and double quotes
/// group words).
fn words(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    let mut any = false;
    for c in cmd.chars() {
        match (quote, c) {
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (_, c) => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// The program and arguments a checked block's command stands for.
/// `VAR=VALUE` settings, the program, its arguments.
type Invocation = (Vec<(String, String)>, PathBuf, Vec<String>);

fn program(cmd: &str) -> Result<Invocation, String> {
    let mut w = words(cmd);
    let mut env = Vec::new();
    while let Some(first) = w.first() {
        match first.split_once('=') {
            Some((k, v))
                if !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_') =>
            {
                env.push((k.to_owned(), v.to_owned()));
                w.remove(0);
            }
            _ => break,
        }
    }
    match w.first().map(String::as_str) {
        Some("biosim") => Ok((
            env,
            PathBuf::from(env!("CARGO_BIN_EXE_biosim")),
            w[1..].to_vec(),
        )),
        Some("cargo") if w.get(1).map(String::as_str) == Some("run") => {
            let (cargo_args, args) = match w.iter().position(|a| a == "--") {
                Some(p) => (&w[2..p], w[p + 1..].to_vec()),
                None => (&w[2..], Vec::new()),
            };
            let name = cargo_args
                .iter()
                .position(|a| a == "--example")
                .and_then(|p| cargo_args.get(p + 1))
                .ok_or_else(|| format!("`{cmd}`: only `cargo run --example NAME` is supported"))?;
            if cargo_args.iter().any(|a| a.starts_with("--release")) {
                return Err(format!("`{cmd}`: quote the debug form (no --release)"));
            }
            Ok((env, example_binary(name)?, args))
        }
        _ => Err(format!(
            "`{cmd}`: a checked block runs `biosim …` or `cargo run -p PKG --example NAME`"
        )),
    }
}

/// The example's binary, built fresh once per run (`cargo build --workspace --examples` in the
/// test's own profile: a no-op after `cargo test --workspace`, which builds them too), so a
/// targeted run or a bless never reads a stale example.
fn example_binary(name: &str) -> Result<PathBuf, String> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .ok_or("test binary outside target/")?;
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-q", "--workspace", "--examples"])
            .current_dir(workspace_root());
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            c.arg("--release");
        }
        let st = c.status().map_err(|e| format!("cannot run cargo: {e}"))?;
        if !st.success() {
            return Err(format!("cargo build --workspace --examples: {st}"));
        }
        Ok(profile_dir.join("examples"))
    });
    let bin = dir
        .clone()?
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!("no example `{name}` ({})", bin.display()))
    }
}

struct Outcome {
    status: i32,
    lines: Vec<String>,
}

fn run(cmd: &str, scratch: &Path) -> Result<Outcome, String> {
    let dir = scratch.display().to_string();
    let cmd = &cmd.replace("$SCRATCH", &dir);
    let (env, bin, args) = program(cmd)?;
    let mut c = Command::new(&bin);
    c.args(&args)
        .current_dir(workspace_root())
        .env_remove("RUST_LOG")
        .env_remove("BIOSIM_BLESS")
        .env("NO_COLOR", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c
        .output()
        .map_err(|e| format!("`{cmd}`: cannot run {}: {e}", bin.display()))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| l.replace(&dir, "$SCRATCH").trim_end().to_owned())
        .collect();
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    Ok(Outcome {
        status: out.status.code().unwrap_or(-1),
        lines,
    })
}

fn show(prefix: &str, lines: &[String], out: &mut String) {
    for l in lines {
        let _ = writeln!(out, "    {prefix} {l}");
    }
}

#[test]
fn every_quoted_output_matches_the_program() {
    let root = workspace_root();
    let bless = std::env::var_os("BIOSIM_BLESS").is_some_and(|v| v != "0" && !v.is_empty());
    let mut failures = Vec::new();
    let mut unchecked = Vec::new();
    let mut checked = 0;
    for path in markdown_files(&root) {
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let blocks = match parse_blocks(&text) {
            Ok(b) => b,
            Err(e) => {
                failures.push(format!("{rel}: {e}"));
                continue;
            }
        };
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        // `$SCRATCH`: fresh for this file, removed when it is dropped after its blocks ran.
        let scratch = tempfile::tempdir().expect("a scratch directory");
        let mut edits: Vec<(std::ops::Range<usize>, Vec<String>, Option<String>)> = Vec::new();
        for b in &blocks {
            let here = format!("{rel}:{}", b.line);
            let body: Vec<String> = lines[b.body.clone()]
                .iter()
                .map(|l| {
                    l.strip_prefix(b.indent.as_str())
                        .unwrap_or(l)
                        .trim_end()
                        .to_owned()
                })
                .collect();
            match &b.kind {
                Kind::Other => {
                    if b.info.is_empty() {
                        failures.push(format!(
                            "{here}: a bare ``` fence: tag it `sh` (instructions), `console` (a quoted output, checked) or `text`"
                        ));
                    } else if let Some(l) = body.iter().find(|l| l.starts_with("$ ")) {
                        failures.push(format!(
                            "{here}: `{l}` in a ```{} block: a quoted command and its output go in a ```console block",
                            b.info
                        ));
                    }
                }
                Kind::File { path } => match std::fs::read_to_string(root.join(path)) {
                    Ok(t) => {
                        let want: Vec<&str> = t.lines().map(str::trim_end).collect();
                        if want != body {
                            failures.push(format!(
                                    "{here}: the block quoting {path} differs from the file\n  quoted:\n{}\n  the file:\n{}",
                                    body.join("\n"),
                                    want.join("\n")
                                ));
                        }
                    }
                    Err(e) => failures.push(format!("{here}: {path}: {e}")),
                },
                Kind::Unchecked { reason } => {
                    if reason.is_empty() {
                        failures.push(format!("{here}: `console unchecked:` needs a reason"));
                    }
                    unchecked.push(format!(
                        "{here}: {} ({reason})",
                        body.first().map_or("", |s| s)
                    ));
                }
                Kind::Checked { status } => {
                    let Some(cmd) = body.first().and_then(|l| l.strip_prefix("$ ")) else {
                        failures.push(format!("{here}: a console block starts with `$ COMMAND`"));
                        continue;
                    };
                    checked += 1;
                    let expected = &body[1..];
                    let got = match run(cmd, scratch.path()) {
                        Ok(o) => o,
                        Err(e) => {
                            failures.push(format!("{here}: {e}"));
                            continue;
                        }
                    };
                    let status_ok = got.status == *status;
                    if status_ok && excerpt_matches(expected, &got.lines) {
                        continue;
                    }
                    let blessed = bless_excerpt(expected, &got.lines);
                    if bless {
                        let info = (!status_ok).then(|| {
                            if got.status == 0 {
                                "console".to_owned()
                            } else {
                                format!("console status={}", got.status)
                            }
                        });
                        edits.push((b.body.start + 1..b.body.end, blessed, info));
                        continue;
                    }
                    let mut msg = format!("{here}: `$ {cmd}`");
                    if !status_ok {
                        let _ = write!(msg, " exited {} (the block expects {status})", got.status);
                    }
                    msg.push_str(" differs from the quoted output\n  quoted:\n");
                    show("|", expected, &mut msg);
                    msg.push_str("  what BIOSIM_BLESS=1 would write:\n");
                    show("|", &blessed, &mut msg);
                    failures.push(msg);
                }
            }
        }
        if bless && !edits.is_empty() {
            let blocks_by_body: HashMap<usize, &Block> =
                blocks.iter().map(|b| (b.body.start, b)).collect();
            for (range, new, info) in edits.into_iter().rev() {
                let b = blocks_by_body[&(range.start - 1)];
                let new: Vec<String> = new
                    .into_iter()
                    .map(|l| {
                        if l.is_empty() {
                            l
                        } else {
                            format!("{}{l}", b.indent)
                        }
                    })
                    .collect();
                lines.splice(range, new);
                if let Some(info) = info {
                    lines[b.line - 1] = format!("{}```{info}", b.indent);
                }
            }
            let mut out = lines.join("\n");
            if text.ends_with('\n') {
                out.push('\n');
            }
            std::fs::write(&path, out).unwrap_or_else(|e| panic!("{rel}: {e}"));
            eprintln!("blessed {rel}");
        }
    }
    eprintln!(
        "doc_examples: {checked} quoted outputs checked, {} not checked:",
        unchecked.len()
    );
    for u in &unchecked {
        eprintln!("  {u}");
    }
    assert!(
        checked > 0,
        "no ```console block found: the convention changed?"
    );
    if unchecked.len() > MAX_UNCHECKED {
        failures.push(format!(
            "{} unchecked quoted outputs (at most {MAX_UNCHECKED}): check them instead",
            unchecked.len()
        ));
    }
    assert!(
        failures.is_empty(),
        "{} problem(s) in the guide's quoted outputs (BIOSIM_BLESS=1 cargo test -p bio-sim --test doc_examples rewrites the outputs):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn elision_rules() {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let out = s(&["a", "b", "c", "d"]);
    assert!(excerpt_matches(&s(&["a", "b", "c", "d"]), &out));
    assert!(
        !excerpt_matches(&s(&["a", "b", "c"]), &out),
        "no `...`: the whole output"
    );
    assert!(excerpt_matches(&s(&["a", "...", "d"]), &out));
    assert!(excerpt_matches(&s(&["...", "b", "c", "..."]), &out));
    assert!(
        !excerpt_matches(&s(&["...", "b", "d", "..."]), &out),
        "runs are contiguous"
    );
    assert!(
        excerpt_matches(&s(&["a", "b", "...", "c", "d"]), &out),
        "`...` may be empty"
    );
    assert!(excerpt_matches(&s(&["[..]", "...", "d"]), &out));
    assert!(line_matches("x [..] z", "x y y z"));
    assert!(line_matches("x[..]", "x"));
    assert!(!line_matches("x [..] z", "x y y"));
    assert!(!line_matches("ab[..]ba", "aba"));
    // Bless keeps the elisions and fixes the lines that changed where they are.
    let new = s(&["a", "B changed", "c", "d", "e"]);
    assert_eq!(
        bless_excerpt(&s(&["...", "B", "c", "..."]), &new),
        s(&["...", "B changed", "c", "..."])
    );
    assert_eq!(
        bless_excerpt(&s(&["a", "...", "e"]), &new),
        s(&["a", "...", "e"])
    );
    assert_eq!(
        bless_excerpt(&s(&["a", "...", "x"]), &new),
        s(&["a", "...", "e"])
    );
    assert_eq!(
        bless_excerpt(&s(&["a", "b"]), &new),
        new,
        "no `...`: the whole output"
    );
    for e in [
        s(&["...", "B", "c", "..."]),
        s(&["a", "...", "x"]),
        s(&["...", "q", "...", "d", "e"]),
    ] {
        assert!(excerpt_matches(&bless_excerpt(&e, &new), &new), "{e:?}");
    }
}
