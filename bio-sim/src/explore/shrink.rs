//! Shrinking a failing case: proptest's own loop on the case's value tree (`simplify()` while the
//! candidate still fails, `complicate()` when it stops failing), where "fails" means breaks the
//! same invariant as the case found. The vec tree first removes transitions, then simplifies each
//! (an earlier arm of the generator, a lower CPU, no `hotplug/fail`). Then single transitions are
//! removed while the case still fails, past proptest's local minimum.

use super::campaign::{run_case, Campaign, CaseFailure, Drawer, Found};
use crate::machine::oracle::Invariant;
use crate::machine::sim::SimError;
use crate::machine::transition::Transition;

/// The most candidates one shrink runs (proptest's default `max_shrink_iters` is unbounded; the
/// state machine test used 10,000).
pub const MAX_SHRINK_ITERS: u32 = 10_000;

/// A shrunk case.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// The transitions, cut after the step at which the violation was seen.
    pub case: Vec<Transition>,
    /// What the oracle said of it.
    pub failure: CaseFailure,
    /// The invariant kept broken while shrinking.
    pub invariant: Invariant,
    /// Candidates run.
    pub iterations: u32,
}

/// Shrinks `found` (a failing case of `campaign`) while it breaks the invariant of its first
/// violation.
pub fn shrink(campaign: &Campaign, found: &Found) -> Result<Shrunk, SimError> {
    let invariant = found.failure.violations[0].invariant;
    let config = campaign.machine(&found.seed);
    let fails = |ts: &[Transition]| -> Result<Option<CaseFailure>, SimError> {
        Ok(run_case(&config, campaign.loop_dev, ts)?
            .err()
            .filter(|f| f.breaks(invariant)))
    };
    let mut drawer = Drawer::new(&campaign.space(), campaign.steps);
    let mut tree = drawer.tree(&found.seed);
    let mut best = (found.case.clone(), found.failure.clone());
    let mut iterations = 0;
    if tree.simplify() {
        while iterations < MAX_SHRINK_ITERS {
            iterations += 1;
            let candidate = tree.current();
            match fails(&candidate)? {
                Some(f) => {
                    best = (candidate, f);
                    if !tree.simplify() {
                        break;
                    }
                }
                None => {
                    if !tree.complicate() {
                        break;
                    }
                }
            }
        }
    }
    let (mut case, mut failure) = best;
    case.truncate(failure.at_step.max(1));
    // proptest's vec shrinking stops at a local minimum: removing one transition can change the
    // seeded settle's interleaving, and the loop above never retries a removal it rejected once.
    // Finish with removals of one transition at a time until none still fails.
    let mut i = 0;
    while i < case.len() && case.len() > 1 && iterations < MAX_SHRINK_ITERS {
        iterations += 1;
        let mut candidate = case.clone();
        candidate.remove(i);
        match fails(&candidate)? {
            Some(f) => {
                candidate.truncate(f.at_step.max(1));
                (case, failure) = (candidate, f);
                i = 0;
            }
            None => i += 1,
        }
    }
    Ok(Shrunk {
        case,
        failure,
        invariant,
        iterations,
    })
}
