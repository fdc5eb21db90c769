//! An event's `format` file (`events/<system>/<event>/format`, written by
//! `kernel/trace/trace_events.c`'s `f_show()`): its `name`, `ID` and the `print fmt` whose
//! format string renders the event's fields in a `trace` line. [`EventFormat::parse_fields`]
//! reads a line's fields back with that format string, so a test can check that what biosim
//! prints for an event is what the kernel's `print fmt` can produce.
//!
//! The matcher knows the conversions the block, cpuhp, irq, sched, timer and workqueue formats
//! use: `%d %u %ld %lu %llu` with an optional width or zero padding (`%04u`, `%3d`, `%03d`),
//! `%x %lx %llx` (lowercase hex digits, no `0x`: filemap's `ino %lx pfn=0x%lx`),
//! `%s` (any text, the shortest that lets the rest match), `%p` (a hashed pointer: 16 hex digits)
//! `%ps` (a symbol name, or a pointer when the kernel has no symbol) and `%pS` (a symbol with
//! its offset, `func+0x1c/0x60`). Any other conversion is
//! an error, never silently accepted.

use std::path::Path;

/// A parsed `format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    /// `name:` (the event).
    pub name: String,
    /// `ID:`.
    pub id: u32,
    /// The format string of `print fmt:`, unescaped.
    pub print_fmt: String,
    pieces: Vec<Piece>,
}

/// Why a `format` file or its `print fmt` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}")]
pub struct FormatError {
    /// What is wrong, naming the file or the conversion.
    pub what: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(String),
    /// A number: signed?, minimum width, zero padded?
    Num {
        signed: bool,
        width: usize,
        zero: bool,
    },
    /// `%x`/`%lx`/`%llx`: lowercase hex digits, minimum width, zero padded?
    Hex {
        width: usize,
        zero: bool,
    },
    Str,
    Ptr,
    Sym,
}

impl EventFormat {
    /// Reads `path` (a `format` file).
    pub fn read(path: &Path) -> Result<EventFormat, FormatError> {
        let text = std::fs::read_to_string(path).map_err(|e| FormatError {
            what: format!("{}: {e}", path.display()),
        })?;
        Self::parse(&text).map_err(|e| FormatError {
            what: format!("{}: {}", path.display(), e.what),
        })
    }

    /// Parses the text of a `format` file.
    pub fn parse(text: &str) -> Result<EventFormat, FormatError> {
        let fail = |what: &str| FormatError {
            what: what.to_owned(),
        };
        let mut name = None;
        let mut id = None;
        let mut fmt = None;
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("name: ") {
                name = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("ID: ") {
                id = Some(v.trim().parse().map_err(|_| fail("ID is not a number"))?);
            } else if let Some(v) = line.strip_prefix("print fmt: ") {
                fmt = Some(unquote(v).ok_or_else(|| fail("print fmt has no quoted string"))?);
            }
        }
        let print_fmt = fmt.ok_or_else(|| fail("no print fmt line"))?;
        let pieces = compile(&print_fmt)?;
        Ok(EventFormat {
            name: name.ok_or_else(|| fail("no name line"))?,
            id: id.ok_or_else(|| fail("no ID line"))?,
            print_fmt,
            pieces,
        })
    }

    /// Reads `fields` (a trace line's text after `event: `) with the print fmt: the text of
    /// each conversion in order, or `None` if the print fmt cannot produce `fields`.
    pub fn parse_fields(&self, fields: &str) -> Option<Vec<String>> {
        let mut out = Vec::new();
        matches(&self.pieces, fields, &mut out).then_some(out)
    }
}

/// The first C string literal of a `print fmt:` value, with `\"`, `\\`, `\n`, `\t` unescaped.
fn unquote(v: &str) -> Option<String> {
    let mut chars = v.strip_prefix('"')?.chars();
    let mut out = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                c => out.push(c),
            },
            c => out.push(c),
        }
    }
}

fn compile(fmt: &str) -> Result<Vec<Piece>, FormatError> {
    let mut pieces = Vec::new();
    let mut lit = String::new();
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            lit.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            lit.push('%');
            continue;
        }
        if !lit.is_empty() {
            pieces.push(Piece::Lit(std::mem::take(&mut lit)));
        }
        let mut spec = String::new();
        while let Some(&d) = chars.peek() {
            if d.is_ascii_digit() || d == '-' {
                spec.push(d);
                chars.next();
            } else {
                break;
            }
        }
        let zero = spec.starts_with('0');
        let width = spec.trim_start_matches('-').parse().unwrap_or(0);
        let mut conv = String::new();
        while let Some(&d) = chars.peek() {
            if d.is_ascii_alphabetic() {
                conv.push(d);
                chars.next();
            } else {
                break;
            }
        }
        // `%ps`/`%pS` are `%p` with a symbol extension; `%px`, `%pK`, ... are not used by these formats.
        let piece = match conv.as_str() {
            "d" | "ld" | "lld" => Piece::Num {
                signed: true,
                width,
                zero,
            },
            "u" | "lu" | "llu" => Piece::Num {
                signed: false,
                width,
                zero,
            },
            "x" | "lx" | "llx" => Piece::Hex { width, zero },
            "s" => Piece::Str,
            "p" => Piece::Ptr,
            "ps" | "pS" => Piece::Sym,
            other => {
                return Err(FormatError {
                    what: format!("unsupported conversion %{spec}{other} in print fmt {fmt:?}"),
                })
            }
        };
        pieces.push(piece);
    }
    if !lit.is_empty() {
        pieces.push(Piece::Lit(lit));
    }
    Ok(pieces)
}

/// How many bytes at the start of `s` a number conversion can take, longest first.
fn number_len(s: &str, signed: bool, width: usize, zero: bool) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    if !zero {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
    }
    let pad = i;
    if signed && i < b.len() && b[i] == b'-' {
        i += 1;
    }
    let digits = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if i == digits {
        return None;
    }
    // Padding appears only to reach the width: a padded field is exactly `width` long.
    if pad > 0 && i != width {
        return None;
    }
    if zero && i < width {
        return None;
    }
    Some(i)
}

/// How many bytes at the start of `s` a `%x` conversion takes (`vsnprintf()` prints lowercase
/// digits), padding as in [`number_len`].
fn hex_len(s: &str, width: usize, zero: bool) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    if !zero {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
    }
    let (pad, digits) = (i, i);
    while i < b.len() && matches!(b[i], b'0'..=b'9' | b'a'..=b'f') {
        i += 1;
    }
    if i == digits || (pad > 0 && i != width) || (zero && i < width) {
        return None;
    }
    Some(i)
}

fn matches(pieces: &[Piece], s: &str, out: &mut Vec<String>) -> bool {
    let Some((first, rest)) = pieces.split_first() else {
        return s.is_empty();
    };
    let mark = out.len();
    let try_len = |n: usize, out: &mut Vec<String>| {
        out.push(s[..n].to_owned());
        if matches(rest, &s[n..], out) {
            return true;
        }
        out.truncate(mark);
        false
    };
    match first {
        Piece::Lit(l) => s
            .strip_prefix(l.as_str())
            .is_some_and(|r| matches(rest, r, out)),
        Piece::Num {
            signed,
            width,
            zero,
        } => number_len(s, *signed, *width, *zero).is_some_and(|n| try_len(n, out)),
        Piece::Hex { width, zero } => hex_len(s, *width, *zero).is_some_and(|n| try_len(n, out)),
        Piece::Ptr => {
            s.len() >= 16
                && s.as_bytes()[..16].iter().all(u8::is_ascii_hexdigit)
                && try_len(16, out)
        }
        Piece::Sym => {
            let n = s
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'+' | b'/'))
                .count();
            n > 0 && try_len(n, out)
        }
        Piece::Str => (0..=s.len())
            .filter(|&n| s.is_char_boundary(n))
            .any(|n| try_len(n, out)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(f: &str) -> EventFormat {
        EventFormat::parse(&format!(
            "name: e\nID: 1\nformat:\n\nprint fmt: \"{f}\", REC->x\n"
        ))
        .unwrap()
    }

    #[test]
    fn the_kernels_cpuhp_and_workqueue_fields_read_back() {
        let exit = fmt(" cpu: %04u  state: %3d step: %3d ret: %d");
        assert_eq!(
            exit.parse_fields(" cpu: 0001  state:   1 step:   1 ret: -11")
                .unwrap(),
            ["0001", "  1", "  1", "-11"]
        );
        assert!(exit
            .parse_fields("cpu: 0001  state: 1 step: 1 ret: 0")
            .is_none());
        assert!(exit
            .parse_fields(" cpu: 1  state: 234 step: 235 ret: 0")
            .is_none());
        let q = fmt("work struct=%p function=%ps workqueue=%s req_cpu=%d cpu=%d");
        let f = q
            .parse_fields("work struct=00000000785947f3 function=loop_rootcg_workfn workqueue=loop0 req_cpu=256 cpu=-1")
            .unwrap();
        assert_eq!(f[2], "loop0");
        assert!(q
            .parse_fields("work=1 function=f workqueue=w req_cpu=1 cpu=1")
            .is_none());
    }

    /// The `format` files the live 6.18 kernel printed (tests/data/tracefs-6.18/formats).
    fn committed_formats() -> Vec<EventFormat> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tracefs-6.18/formats");
        let mut out: Vec<EventFormat> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| EventFormat::read(&e.unwrap().path()).unwrap())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    #[test]
    fn every_committed_format_file_compiles_and_reads_the_live_traces() {
        let formats = committed_formats();
        assert!(formats.len() >= 25, "{}", formats.len());
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tracefs-6.18");
        let mut checked = 0;
        for trace in [
            "down-up-clean",
            "down-fail-187",
            "up-fail-61",
            "loop-dio-2writes-2reads",
        ] {
            let text = std::fs::read_to_string(dir.join(format!("{trace}.trace"))).unwrap();
            let lines: Vec<_> = if text.starts_with("# tracer: ") {
                crate::report::ftrace::parse_trace(&text).unwrap()
            } else {
                text.lines()
                    .map(|l| crate::report::ftrace::TraceLine::parse(l).unwrap())
                    .collect()
            };
            for l in lines {
                if let Some(f) = formats.iter().find(|f| f.name == l.event) {
                    assert!(f.parse_fields(&l.fields).is_some(), "{trace}: {l}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 200, "{checked}");
    }

    #[test]
    fn unknown_conversions_and_missing_lines_are_errors() {
        assert!(EventFormat::parse("name: e\nID: 1\nprint fmt: \"%o\", REC->a\n").is_err());
        assert!(EventFormat::parse("name: e\nID: 1\n").is_err());
    }

    /// filemap's `%lx`: lowercase hex, no prefix; upper case or an empty field does not match.
    #[test]
    fn hex_conversions_read_filemap_fields_back() {
        let f = fmt("dev %d:%d ino %lx pfn=0x%lx ofs=%lu order=%u");
        assert_eq!(
            f.parse_fields("dev 7:0 ino 700000 pfn=0x10a3f ofs=4096 order=0"),
            Some(
                vec!["7", "0", "700000", "10a3f", "4096", "0"]
                    .into_iter()
                    .map(String::from)
                    .collect()
            )
        );
        assert!(f
            .parse_fields("dev 7:0 ino 7000AB pfn=0x1 ofs=0 order=0")
            .is_none());
        assert!(f
            .parse_fields("dev 7:0 ino  pfn=0x1 ofs=0 order=0")
            .is_none());
        assert!(EventFormat::parse("name: e\nID: 1\n").is_err());
    }
}
