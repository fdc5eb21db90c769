//! The tokens every scenario line is made of, shared by the header, transition and expectation
//! parsers: a line's words, its place in the file, and the argument readers that name both in
//! their errors.

/// A parse or validation error, naming the file, the line and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {message}", if *line > 0 { format!(":{line}") } else { String::new() })]
pub struct ScenarioError {
    /// The file (or `<string>`).
    pub file: String,
    /// The 1-based line (0 for the file as a whole).
    pub line: usize,
    /// What was wrong.
    pub message: String,
}

/// One non-empty line, comment stripped, split into words.
#[derive(Debug)]
pub(super) struct Line<'a> {
    file: &'a str,
    /// The 1-based line number.
    pub number: usize,
    /// Its words; the first is the keyword.
    pub words: Vec<&'a str>,
}

impl<'a> Line<'a> {
    /// Line `number` of `file`, or `None` if it is empty or only a comment.
    pub fn new(file: &'a str, number: usize, raw: &'a str) -> Option<Self> {
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            return None;
        }
        Some(Line {
            file,
            number,
            words: content.split_whitespace().collect(),
        })
    }

    /// The first word.
    pub fn keyword(&self) -> &'a str {
        self.words[0]
    }

    /// The words from `n` on.
    pub fn rest(&self, n: usize) -> &[&'a str] {
        self.words.get(n..).unwrap_or(&[])
    }

    /// An error on this line.
    pub fn err(&self, message: String) -> ScenarioError {
        error_at(self.file, self.number, message)
    }

    /// Word `n`, which must be there (`what` says what it should be).
    pub fn arg(&self, n: usize, what: &str) -> Result<&'a str, ScenarioError> {
        self.words
            .get(n)
            .copied()
            .ok_or_else(|| self.err(format!("`{}` needs {what}", self.keyword())))
    }

    /// Word `n` as a number.
    pub fn num(&self, n: usize, what: &str) -> Result<u64, ScenarioError> {
        let w = self.arg(n, what)?;
        w.parse().map_err(|_| {
            self.err(format!(
                "`{}`: {what} must be a number, got `{w}`",
                self.keyword()
            ))
        })
    }

    /// Word `n` as a CPU of a machine of `nr_cpus` CPUs.
    pub fn cpu(&self, n: usize, nr_cpus: u32) -> Result<u32, ScenarioError> {
        let c = self.num(n, "a CPU number")?;
        let nr = u64::from(nr_cpus);
        if c >= nr {
            return Err(self.err(format!(
                "CPU{c} does not exist (the machine has {nr} CPUs: 0..{})",
                nr - 1
            )));
        }
        Ok(c as u32)
    }
}

/// An error at line `line` of `file` (0: the file as a whole).
pub(super) fn error_at(file: &str, line: usize, message: String) -> ScenarioError {
    ScenarioError {
        file: file.to_owned(),
        line,
        message,
    }
}

/// `y`/`yes`/`true`/`1` or `n`/`no`/`false`/`0`.
pub(super) fn yes_no(v: &str) -> Option<bool> {
    match v {
        "y" | "yes" | "true" | "1" => Some(true),
        "n" | "no" | "false" | "0" => Some(false),
        _ => None,
    }
}
