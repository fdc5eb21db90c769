//! The `locks CPU CONTEXT KIND:NAME...` line: a lock sequence as `lib/locking-selftest.c` writes
//! one (the locks taken nested in one context, released in reverse), run through lockdep
//! (`kernel/locking/lockdep.c`); see [`crate::machine::locks`].

use super::line::{Line, ScenarioError};
use crate::machine::locks::{intern_name, intern_steps, LockContext, LockKind, LockStep};
use crate::machine::transition::Transition;

/// `MAX_LOCK_DEPTH` (`include/linux/sched.h`): the most locks a task holds at once; lockdep
/// stops with "BUG: MAX_LOCK_DEPTH too low!" beyond it, so a longer line is refused.
pub const MAX_LOCK_DEPTH: usize = 48;

fn contexts() -> String {
    let w: Vec<&str> = LockContext::ALL.iter().map(|(w, _)| *w).collect();
    w.join(", ")
}

fn kinds() -> String {
    let w: Vec<&str> = LockKind::ALL.iter().map(|(w, _)| *w).collect();
    w.join(", ")
}

/// Parses `locks CPU CONTEXT KIND:NAME...` on a machine of `nr_cpus` CPUs. Whether the CPU is
/// online is decided at run time (a refusal there, like every transition's).
pub(super) fn locks_line(l: &Line<'_>, nr_cpus: u32) -> Result<Transition, ScenarioError> {
    let cpu = l.cpu(1, nr_cpus)?;
    let what = format!("a context ({})", contexts());
    let c = l.arg(2, &what)?;
    let ctx = context(c).ok_or_else(|| {
        l.err_at(
            2,
            format!("locks: unknown context `{c}` (expected {})", contexts()),
        )
    })?;
    if l.words.len() < 4 {
        return Err(l.err_at(
            3,
            format!(
                "`locks` needs at least one lock, KIND:NAME (KIND: {})",
                kinds()
            ),
        ));
    }
    let mut steps = Vec::with_capacity(l.words.len() - 3);
    for (n, w) in l.words.iter().enumerate().skip(3) {
        if n - 3 == MAX_LOCK_DEPTH {
            return Err(l.err_at(
                n,
                format!("locks: more than {MAX_LOCK_DEPTH} locks held at once (MAX_LOCK_DEPTH)"),
            ));
        }
        if context(w).is_some() {
            return Err(l.err_at(
                n,
                format!("locks: a second context `{w}` (the line runs in `{c}`): write one `locks` line per context"),
            ));
        }
        let Some((k, name)) = w.split_once(':') else {
            return Err(l.err_at(
                n,
                format!("locks: `{w}` is not KIND:NAME (KIND: {})", kinds()),
            ));
        };
        let kind = LockKind::ALL
            .iter()
            .find(|(kw, _)| *kw == k)
            .map(|(_, kind)| *kind)
            .ok_or_else(|| {
                l.err_at(
                    n,
                    format!("locks: unknown lock kind `{k}` (expected {})", kinds()),
                )
            })?;
        if name.is_empty() {
            return Err(l.err_at(n, format!("locks: `{w}` names no lock")));
        }
        steps.push(LockStep {
            kind,
            name: intern_name(name),
        });
    }
    Ok(Transition::LockSeq {
        cpu,
        ctx,
        steps: intern_steps(&steps),
    })
}

fn context(w: &str) -> Option<LockContext> {
    LockContext::ALL
        .iter()
        .find(|(cw, _)| *cw == w)
        .map(|(_, c)| *c)
}
