//! The tokens every scenario line is made of, shared by the header, transition and expectation
//! parsers: a line's words with their columns, its place in the file, the `try` prefix, and the
//! argument readers that name all of it in their errors.

/// The most characters of the input an error quotes in one place (longer words are cut with `…`).
pub const QUOTE_MAX: usize = 100;

/// A parse or validation error, naming the file, the line, the column and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {message}", place(*line, *column))]
pub struct ScenarioError {
    /// The file (or `<string>`).
    pub file: String,
    /// The 1-based line (0 for the file as a whole).
    pub line: usize,
    /// The 1-based column (in characters) of the word at fault (0: the line as a whole).
    pub column: usize,
    /// What was wrong.
    pub message: String,
}

fn place(line: usize, column: usize) -> String {
    match (line, column) {
        (0, _) => String::new(),
        (l, 0) => format!(":{l}"),
        (l, c) => format!(":{l}:{c}"),
    }
}

/// One non-empty line, comment stripped, split into words.
#[derive(Debug)]
pub(super) struct Line<'a> {
    file: &'a str,
    /// The 1-based line number.
    pub number: usize,
    /// Its words; the first is the keyword (after a `try` prefix, which is not a word here).
    pub words: Vec<&'a str>,
    /// The 1-based column of each word.
    cols: Vec<usize>,
    /// The column just past the last word (where a missing word was expected).
    end_col: usize,
    /// The column of a `try` prefix, if the line has one.
    pub try_col: Option<usize>,
}

impl<'a> Line<'a> {
    /// Line `number` of `file`, or `None` if it is empty or only a comment.
    pub fn new(file: &'a str, number: usize, raw: &'a str) -> Option<Self> {
        let content = raw.split('#').next().unwrap_or("");
        let col_of = |w: &str| {
            let off = w.as_ptr() as usize - raw.as_ptr() as usize;
            raw[..off].chars().count() + 1
        };
        let mut words: Vec<&str> = content.split_whitespace().collect();
        if words.is_empty() {
            return None;
        }
        let mut try_col = None;
        if words[0] == "try" && words.len() > 1 {
            try_col = Some(col_of(words[0]));
            words.remove(0);
        }
        let cols = words.iter().map(|w| col_of(w)).collect();
        let last = words[words.len() - 1];
        let end_col = col_of(last) + last.chars().count();
        Some(Line {
            file,
            number,
            words,
            cols,
            end_col,
            try_col,
        })
    }

    /// The first word.
    pub fn keyword(&self) -> &'a str {
        self.words[0]
    }

    /// The column of word `n` (past the end of the line if there is none).
    pub fn col(&self, n: usize) -> usize {
        self.cols.get(n).copied().unwrap_or(self.end_col)
    }

    /// An error on this line, at its keyword.
    pub fn err(&self, message: String) -> ScenarioError {
        self.err_at(0, message)
    }

    /// An error at word `n` of this line.
    pub fn err_at(&self, n: usize, message: String) -> ScenarioError {
        let mut e = error_at(self.file, self.number, message);
        e.column = self.col(n);
        e
    }

    /// Refuses words from `n` on: the line is complete with `n` words; `takes` says what the
    /// keyword takes.
    pub fn done(&self, n: usize, takes: &str) -> Result<(), ScenarioError> {
        match self.words.get(n) {
            None => Ok(()),
            Some(w) => Err(self.err_at(
                n,
                format!(
                    "unexpected `{w}`: expected the end of the line (`{}` takes {takes})",
                    self.keyword()
                ),
            )),
        }
    }

    /// Word `n`, which must be there (`what` says what it should be).
    pub fn arg(&self, n: usize, what: &str) -> Result<&'a str, ScenarioError> {
        self.words
            .get(n)
            .copied()
            .ok_or_else(|| self.err_at(n, format!("`{}` needs {what}", self.keyword())))
    }

    /// Word `n` as a number.
    pub fn num(&self, n: usize, what: &str) -> Result<u64, ScenarioError> {
        let w = self.arg(n, what)?;
        w.parse().map_err(|_| {
            self.err_at(
                n,
                format!("`{}`: {what} must be a number, got `{w}`", self.keyword()),
            )
        })
    }

    /// Word `n` as a CPU of a machine of `nr_cpus` CPUs.
    pub fn cpu(&self, n: usize, nr_cpus: u32) -> Result<u32, ScenarioError> {
        let c = self.num(n, "a CPU number")?;
        let nr = u64::from(nr_cpus);
        if c >= nr {
            return Err(self.err_at(
                n,
                format!(
                    "CPU{c} does not exist (the machine has {nr} CPUs: 0..{})",
                    nr - 1
                ),
            ));
        }
        Ok(c as u32)
    }
}

/// Cuts `s` to [`QUOTE_MAX`] characters, marking the cut with `…`.
pub fn truncate(s: &str) -> String {
    match s.char_indices().nth(QUOTE_MAX) {
        None => s.to_owned(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// An error at line `line` of `file` (0: the file as a whole). Every space-free run of the
/// message (a word of the input is one) is cut to [`QUOTE_MAX`] characters, so a 50 MB line is
/// not echoed whole.
pub(super) fn error_at(file: &str, line: usize, message: String) -> ScenarioError {
    let message = if message.len() > QUOTE_MAX {
        // The input's words hold no whitespace, so each quote of one is inside one token.
        // A cut keeps the token's closing punctuation (the quote's closing backtick).
        message
            .split(' ')
            .map(|t| {
                let cut = truncate(t);
                if cut.len() == t.len() {
                    return cut;
                }
                let tail: Vec<char> = t
                    .chars()
                    .rev()
                    .take_while(char::is_ascii_punctuation)
                    .take(3)
                    .collect();
                cut + &tail.into_iter().rev().collect::<String>()
            })
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        message
    };
    ScenarioError {
        file: file.to_owned(),
        line,
        column: 0,
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
