//! Alike threads as one finding: twenty `worker-N` threads with the same
//! behaviour are one cause.

use super::{Ev, Evidence, Finding, FindingKind, Severity, Subject, Thresholds, ev};
use crate::interval::groups::group_name;

/// One number of evidence, as the rules hold it until a finding is kept.
pub(super) trait Number {
    fn name(&self) -> &str;
    fn value(&self) -> f64;
    fn unit(&self) -> &str;
}

impl Number for Ev {
    fn name(&self) -> &str {
        self.name
    }
    fn value(&self) -> f64 {
        self.value
    }
    fn unit(&self) -> &str {
        self.unit
    }
}

impl Number for Evidence {
    fn name(&self) -> &str {
        &self.name
    }
    fn value(&self) -> f64 {
        self.value
    }
    fn unit(&self) -> &str {
        &self.unit
    }
}

/// Evidence that says how sure a rule is, not what the thread does: two
/// threads ticking at 90/s are alike whether one's per-second rates
/// spread by 2% and the other's by 9% (seven JVM threads sleeping 10 ms
/// each were split "4 + 3" by it).
const NOT_BEHAVIOUR: [&str; 1] = ["rate_variation"];

/// Whether two findings' numbers tell the same behaviour: every evidence
/// value within `tolerance` of the other's, relative to the larger, with
/// a floor for percentages (1 point) and ratios (0.05) so that 0.1% and
/// 0.15% CPU count as alike ([`NOT_BEHAVIOUR`] aside).
pub(super) fn alike<A: Number, B: Number>(a: &[A], b: &[B], tolerance: f64) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            if x.name() == y.name() && NOT_BEHAVIOUR.contains(&x.name()) {
                return true;
            }
            let floor = match x.unit() {
                "%" => 1.0,
                "ratio" => 0.05,
                _ => 0.0,
            };
            x.name() == y.name()
                && (x.value() - y.value()).abs()
                    <= (tolerance * x.value().abs().max(y.value().abs())).max(floor)
        })
}

/// At most this many TIDs are spelled out in a group's summary (all are in
/// its subject).
const GROUP_TIDS_SHOWN: usize = 8;

/// Threads with the same finding, kept as one: the first member's finding
/// (at `at` in the output) and every member's TID.
struct Group {
    at: usize,
    /// [`group_name`] of the members.
    pattern: String,
    tids: Vec<u64>,
}

/// Collects findings in order, grouping threads with the same kind,
/// group name and behaviour as they come: twenty `worker-N` threads
/// sleeping 5 ms each are one cause. Severity does not split a group
/// (seven alike threads at 99–101 wakes/s around a 100/s threshold are
/// one behaviour): the group takes its members' highest, which
/// hysteresis then holds ([`Ctx::grade`]). A finding that joins a group
/// is not built at all (its summary is never formatted): with hundreds of
/// alike threads, formatting and dropping their findings cost more than
/// the rules themselves.
#[derive(Default)]
pub(super) struct Grouper {
    out: Vec<Finding>,
    groups: Vec<Group>,
}

impl Grouper {
    /// Adds a finding, built by `build` unless it joins a group of alike threads.
    pub(super) fn offer<N: Number>(
        &mut self,
        kind: FindingKind,
        severity: Severity,
        subject: Subject,
        evidence: Vec<N>,
        tolerance: f64,
        build: impl FnOnce(Subject, Vec<N>) -> Finding,
    ) {
        if let Subject::Thread { tid, name } = &subject {
            let pattern = group_name(name);
            let out = &mut self.out;
            let found = self.groups.iter_mut().find(|g| {
                g.pattern == pattern
                    && out.get(g.at).is_some_and(|first| {
                        first.kind == kind && alike(&first.evidence, &evidence, tolerance)
                    })
            });
            if let Some(g) = found {
                g.tids.push(*tid);
                if let Some(first) = out.get_mut(g.at) {
                    first.severity = first.severity.max(severity);
                }
                return;
            }
            self.groups.push(Group {
                at: self.out.len(),
                pattern,
                tids: vec![*tid],
            });
        }
        self.out.push(build(subject, evidence));
    }

    /// The findings, each group of two or more threads as one: the first
    /// thread's summary, evidence and advice, with the subject listing
    /// every TID and an evidence `threads` count.
    pub(super) fn finish(mut self, t: &Thresholds) -> Vec<Finding> {
        for g in self.groups {
            if g.tids.len() < 2 {
                continue;
            }
            let Some(first) = self.out.get_mut(g.at) else {
                continue;
            };
            let Subject::Thread { tid, name } = first.subject.clone() else {
                continue;
            };
            let tids = g.tids;
            let mut shown: Vec<String> = tids
                .iter()
                .take(GROUP_TIDS_SHOWN)
                .map(u64::to_string)
                .collect();
            if tids.len() > GROUP_TIDS_SHOWN {
                shown.push(format!("and {} more", tids.len() - GROUP_TIDS_SHOWN));
            }
            // The rules start a thread's summary with its label.
            let own = format!("thread {tid} \"{name}\" ");
            let rest = first.summary.strip_prefix(&own).unwrap_or(&first.summary);
            first.summary = format!(
                "{} threads \"{}\" behave alike (TIDs {}); each {rest} (figures of TID {tid}, \
                 the others within {:.0}%)",
                tids.len(),
                g.pattern,
                shown.join(", "),
                t.group_max_difference * 100.0
            );
            first
                .evidence
                .push(ev("threads", tids.len() as f64, "threads"));
            first.subject = Subject::Threads {
                name: g.pattern,
                tids,
            };
        }
        self.out
    }
}

/// One finding for threads with the same kind, group name and behaviour
/// (see [`Grouper`]).
#[cfg(test)]
pub(super) fn group_alike_threads(findings: Vec<Finding>, t: &Thresholds) -> Vec<Finding> {
    let mut g = Grouper::default();
    for f in findings {
        let (kind, severity, subject) = (f.kind, f.severity, f.subject.clone());
        let evidence = f.evidence.clone();
        g.offer(
            kind,
            severity,
            subject,
            evidence,
            t.group_max_difference,
            |_, _| f,
        );
    }
    g.finish(t)
}
