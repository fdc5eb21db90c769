//! The job-file reader: fio's INI syntax (HOWTO "Job file format"). Written in the parser task;
//! this seam only names its entry points.

use super::job::JobFile;
use std::path::Path;

/// A job file that could not be read: the file, the 1-based line, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{line}: {message}")]
pub struct JobFileError {
    /// The file (`<string>` for text).
    pub path: String,
    /// The line (0 when the error is about the whole file).
    pub line: usize,
    /// What is wrong, naming the option or section.
    pub message: String,
}

/// Reads and parses the job file at `path`.
pub fn parse_file(path: &Path) -> Result<JobFile, JobFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| JobFileError {
        path: path.display().to_string(),
        line: 0,
        message: format!("cannot read the job file: {e}"),
    })?;
    parse_str(&text, path)
}

/// Parses job-file `text` (read from `path`, for messages).
pub fn parse_str(text: &str, path: &Path) -> Result<JobFile, JobFileError> {
    let _ = text;
    Err(JobFileError {
        path: path.display().to_string(),
        line: 0,
        message: "the job-file parser is not written yet".into(),
    })
}
