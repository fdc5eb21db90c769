//! What a check's cell must be ([`Expect`]) and what it was ([`Verdict`]), shared by the finding
//! gallery, the loop checks and scenario files.

use crate::machine::oracle::Violation;
use std::fmt;

/// The verdict a cell should have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The check must catch the bug.
    Caught,
    /// The check must pass.
    Clean,
    /// The variant does not have the mechanism (v5 has no `bio_complete_in_task()`).
    NotApplicable,
}

/// The verdict of one cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The oracle reported the finding's violation.
    Caught(Vec<Violation>),
    /// No violation of the finding's kind.
    Clean,
    /// Not applicable to this variant.
    NotApplicable(&'static str),
}

impl Verdict {
    /// The matrix word.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Caught(_) => "caught",
            Verdict::Clean => "clean",
            Verdict::NotApplicable(_) => "n/a",
        }
    }

    /// Caught with `v`, or clean if `v` is empty.
    pub fn of(v: Vec<Violation>) -> Verdict {
        if v.is_empty() {
            Verdict::Clean
        } else {
            Verdict::Caught(v)
        }
    }

    /// Whether this verdict is the expected one.
    pub fn matches(&self, e: Expect) -> bool {
        matches!(
            (self, e),
            (Verdict::Caught(_), Expect::Caught)
                | (Verdict::Clean, Expect::Clean)
                | (Verdict::NotApplicable(_), Expect::NotApplicable)
        )
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}
