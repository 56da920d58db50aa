//! The rules of the findings engine: the evidence plumbing and the run
//! over the windows here, the rules by concept in the submodules.

mod cpu;
pub(crate) use cpu::{competition_is_outside, name_competitors};
mod grouping;
mod kernel;
mod loops;
mod memory;
mod sleep;
#[cfg(test)]
mod tests;
mod wake_source;
mod wakeups;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{Evidence, Finding, FindingKind, Severity, Subject, Thresholds};
use crate::history::{History, Stored};
use crate::interval::groups::group_name;
use crate::interval::{
    Interval, SharedEnd, between_in_history_sharing, between_in_history_without_kernel,
};
use crate::model::SystemInfo;
use crate::probe::duration_ns as ns;
use cpu::{cpu_hogs, run_queue};
use grouping::Grouper;
use kernel::kernel_threads;
use loops::{busy_poller_loops, periodic_loops, spinning_workers};
use memory::memory_growth;
use sleep::sleep_sites;
use wakeups::{periodic_threads, wakeups_budget};

/// One number behind a finding while the rules run: static name and
/// unit, made into an [`Evidence`] only for a finding that is kept.
#[derive(Debug, Clone, Copy)]
struct Ev {
    name: &'static str,
    value: f64,
    unit: &'static str,
}

fn number(name: &'static str, value: f64, unit: &'static str) -> Ev {
    Ev { name, value, unit }
}

fn ev(name: &str, value: f64, unit: &str) -> Evidence {
    Evidence {
        name: name.to_string(),
        value,
        unit: unit.to_string(),
    }
}

impl From<Ev> for Evidence {
    fn from(e: Ev) -> Evidence {
        Evidence {
            name: e.name.to_string(),
            value: e.value,
            unit: e.unit.to_string(),
        }
    }
}

/// Oldest and newest stored snapshots of a window ending at the newest;
/// `None` when the history covers less than `min`.
fn window(h: &History, span: Duration, min: Duration) -> Option<(&Stored, &Stored)> {
    let to = h.latest()?;
    // The newest snapshot at least `span` old, so that a window covers its
    // whole span once the history does (and a minimum equal to the span
    // can be met); the oldest one while the history is shorter.
    let from = to
        .header
        .monotonic_ns
        .checked_sub(ns(span))
        .and_then(|start| h.last_at_or_before(start))
        .or_else(|| h.iter().next())?;
    if to
        .header
        .monotonic_ns
        .saturating_sub(from.header.monotonic_ns)
        < ns(min)
        || from.header.seq == to.header.seq
    {
        return None;
    }
    Some((from, to))
}

/// The intervals of the rules' windows, each computed once: windows that
/// start at the same snapshot (every window, while the history is shorter
/// than the shortest) share one, and so does an interval the caller
/// already has (a report's). All end at the newest snapshot, decoded
/// once for all of them (`shared`).
struct Windows<'a> {
    known: Option<&'a Interval>,
    computed: Vec<Interval>,
    shared: &'a mut SharedEnd,
}

impl Windows<'_> {
    /// Where the interval of `(from, to)` is: `None` for the known one,
    /// else its index in `computed` (computed now if new). `kernel`: whether
    /// the rules of this window read the kernel view; an interval computed
    /// for rules that read none has none (and is only shared with windows
    /// added after it, whose rules read none either: `run` adds the rate
    /// window, whose rules do, first).
    fn add(&mut self, h: &History, from: &Stored, to: &Stored, kernel: bool) -> Option<usize> {
        let ends = (from.header.seq, to.header.seq);
        if self.known.is_some_and(|k| (k.from_seq, k.to_seq) == ends) {
            return None;
        }
        if let Some(i) = self
            .computed
            .iter()
            .position(|c| (c.from_seq, c.to_seq) == ends)
        {
            return Some(i);
        }
        self.computed.push(if kernel {
            between_in_history_sharing(h, from, to, self.shared)
        } else {
            between_in_history_without_kernel(h, from, to, self.shared)
        });
        Some(self.computed.len() - 1)
    }

    fn get(&self, at: Option<usize>) -> Option<&Interval> {
        match at {
            None => self.known,
            Some(i) => self.computed.get(i),
        }
    }
}

/// The severity each finding had in the previous report (or, for one
/// absent from it, in the last report of the few remembered that showed
/// it: `SeverityMemory`), by
/// [`memory_key`]: what hysteresis holds on to.
pub(super) type Severities = HashMap<(FindingKind, String), Severity>;

/// Who a finding's remembered severity belongs to: alike threads (one
/// group name) share one, so that they keep one severity together.
pub(super) fn memory_key(kind: FindingKind, subject: &Subject) -> (FindingKind, String) {
    let who = match subject {
        Subject::Thread { name, .. } => group_name(name),
        Subject::Threads { name, .. } => name.clone(),
        other => other.label(),
    };
    (kind, who)
}

/// A finding's figure and the thresholds that set its severity: `base`
/// below every step, each step `(threshold, severity)` ascending.
struct Grade<'s> {
    value: f64,
    base: Severity,
    steps: &'s [(f64, Severity)],
}

struct Ctx<'a> {
    t: &'a Thresholds,
    /// Severities of the recent reports (the previous one, and findings
    /// shown in the few before it).
    previous: &'a Severities,
    out: Grouper,
    /// Threads already explained by a more specific finding (or excluded).
    explained: HashSet<u64>,
    /// Window of the rule running now, in nanoseconds.
    window_ns: u64,
    /// The target's OS family (`SystemInfo::os`), which advice speaks to.
    os: &'a str,
}

impl Ctx<'_> {
    /// The severity of a figure against thresholds `steps` (ascending,
    /// each with the severity it starts), `base` below all of them, with
    /// hysteresis: a step the finding had reached in the previous report
    /// is kept until the figure falls [`Thresholds::severity_margin`]
    /// below it; a step it had not reached needs the figure that much
    /// above it. Without a previous report the steps apply as they are.
    /// Whether `value` reaches the `line` a finding needs to be shown at
    /// all, with the same hysteresis as [`Ctx::grade`]: a finding the
    /// previous report showed stays until its figure falls
    /// [`Thresholds::severity_margin`] below the line. `subject` is built
    /// only when that is in question (the figure in the margin below).
    fn reaches(
        &self,
        kind: FindingKind,
        value: f64,
        line: f64,
        subject: impl FnOnce() -> Subject,
    ) -> bool {
        value >= line
            || (value >= line * (1.0 - self.t.severity_margin)
                && self.previous.contains_key(&memory_key(kind, &subject())))
    }

    /// Whether the previous report showed a finding of `kind` about `subject`.
    fn shown_before(&self, kind: FindingKind, subject: &Subject) -> bool {
        self.previous.contains_key(&memory_key(kind, subject))
    }

    /// A ceiling a finding's figure must stay under (a CPU share, a
    /// variation), with the margin of [`Thresholds::severity_margin`] for
    /// a finding the previous report showed: `ceiling * (1 + margin)`.
    /// `subject` is built only when that is in question.
    fn under(
        &self,
        kind: FindingKind,
        value: f64,
        ceiling: f64,
        subject: impl FnOnce() -> Subject,
    ) -> bool {
        value <= ceiling
            || (value <= ceiling * (1.0 + self.t.severity_margin)
                && self.shown_before(kind, &subject()))
    }

    /// [`Ctx::reaches`] for a finding that has a rival: another kind
    /// that explains the same behaviour on the other side of `line` (a
    /// thread sleeping 100 times/s is a sleep loop at the line and a
    /// periodic waker just below it). Whichever the previous report showed
    /// is kept until the figure leaves the margin around the line
    /// ([`Thresholds::severity_margin`]): this kind, shown before, stays
    /// down to `line * (1 - margin)`; the rival, shown before, keeps its
    /// place up to `line * (1 + margin)`. So one behaviour keeps one kind
    /// from report to report, and changes it once when the figure really
    /// moves.
    fn wins_over(
        &self,
        kind: FindingKind,
        subject: &Subject,
        rival: (FindingKind, Option<&Subject>),
        value: f64,
        line: f64,
    ) -> bool {
        let m = self.t.severity_margin;
        if self.previous.contains_key(&memory_key(kind, subject)) {
            return value >= line * (1.0 - m);
        }
        let (rival_kind, rival_subject) = rival;
        if rival_subject.is_some_and(|r| self.previous.contains_key(&memory_key(rival_kind, r))) {
            return value >= line * (1.0 + m);
        }
        value >= line
    }

    fn grade(
        &self,
        kind: FindingKind,
        subject: &Subject,
        value: f64,
        base: Severity,
        steps: &[(f64, Severity)],
    ) -> Severity {
        let previous = self.previous.get(&memory_key(kind, subject)).copied();
        let m = self.t.severity_margin;
        let mut severity = base;
        for &(threshold, step) in steps {
            let bar = match previous {
                None => threshold,
                Some(p) if p >= step => threshold * (1.0 - m),
                Some(_) => threshold * (1.0 + m),
            };
            if value >= bar {
                severity = step;
            }
        }
        severity
    }

    /// [`Ctx::push`] with the severity graded from `grade` ([`Ctx::grade`]).
    fn push_graded(
        &mut self,
        kind: FindingKind,
        grade: Grade<'_>,
        subject: Subject,
        summary: impl FnOnce() -> String,
        evidence: Vec<Ev>,
        advice: &str,
    ) {
        let severity = self.grade(kind, &subject, grade.value, grade.base, grade.steps);
        self.push(kind, severity, subject, summary, evidence, advice);
    }

    /// Adds a finding; `summary` is formatted only when the finding is
    /// kept (not when it joins a group of alike threads).
    fn push(
        &mut self,
        kind: FindingKind,
        severity: Severity,
        subject: Subject,
        summary: impl FnOnce() -> String,
        evidence: Vec<Ev>,
        advice: &str,
    ) {
        let window_ns = self.window_ns;
        let tolerance = self.t.group_max_difference;
        self.out.offer(
            kind,
            severity,
            subject,
            evidence,
            tolerance,
            |subject, evidence| Finding {
                kind,
                severity,
                summary: summary(),
                subject,
                evidence: evidence.into_iter().map(Evidence::from).collect(),
                advice: advice.to_string(),
                window_ns,
            },
        );
    }
}

fn thread_cpu(i: &Interval, tid: Option<u64>) -> Option<f64> {
    let tid = tid?;
    i.threads
        .iter()
        .find(|t| t.tid == tid)
        .map(|t| t.cpu_percent)
}

/// Percent of the interval thread `tid` spent blocked (off CPU and not
/// waiting for one): from the kernel view when there is one, else from
/// `/proc` as what is left of 100% after CPU and run-queue wait. `None`
/// for an unknown thread.
fn blocked_percent(i: &Interval, tid: Option<u64>) -> Option<f64> {
    let tid = tid?;
    let th = i.threads.iter().find(|t| t.tid == tid)?;
    if let Some(k) = &th.kernel {
        return Some(k.blocked_percent);
    }
    let running = th.cpu_percent + th.run_queue_wait_percent.unwrap_or(0.0);
    Some((100.0 - running).clamp(0.0, 100.0))
}

/// [`run_sharing`] with nothing decoded yet.
#[cfg(test)]
pub(super) fn run(
    h: &History,
    t: &Thresholds,
    system: &SystemInfo,
    exclude_tid: Option<u64>,
    known: Option<&Interval>,
    previous: &Severities,
) -> Vec<Finding> {
    let mut shared = SharedEnd::default();
    run_sharing(h, t, system, exclude_tid, known, previous, &mut shared)
}

/// Runs every rule over `h`; the intervals of the rules' windows end at
/// its newest snapshot, decoded once with the caller's other intervals
/// (`shared`).
pub(super) fn run_sharing(
    h: &History,
    t: &Thresholds,
    system: &SystemInfo,
    exclude_tid: Option<u64>,
    known: Option<&Interval>,
    previous: &Severities,
    shared: &mut SharedEnd,
) -> Vec<Finding> {
    let mut cx = Ctx {
        t,
        previous,
        out: Grouper::default(),
        explained: exclude_tid.into_iter().collect(),
        window_ns: 0,
        os: &system.os,
    };
    let mut w = Windows {
        known,
        computed: Vec::new(),
        shared,
    };
    // The rate rules read the kernel view; the CPU hog and the wakeups
    // budget do not (their intervals then skip decoding it: a 1,000-thread
    // eBPF watcher decoded the CPU window's start only to drop it).
    let rates = window(h, t.window, t.min_window).map(|(a, b)| (a, b, w.add(h, a, b, true)));
    let cpu = window(h, t.cpu_window, t.cpu_min_window).map(|(a, b)| w.add(h, a, b, false));
    let wakeups = window(h, t.wakeups_window, t.wakeups_min_window)
        .map(|(a, b)| (a, b, w.add(h, a, b, false)));
    if let Some((from, to, at)) = rates
        && let Some(i) = w.get(at)
    {
        cx.window_ns = i.duration_ns;
        busy_poller_loops(&mut cx, i);
        spinning_workers(&mut cx, i);
        sleep_sites(&mut cx, i);
        kernel_threads(&mut cx, i);
        periodic_loops(&mut cx, i);
        periodic_threads(&mut cx, h, from, to, i);
        run_queue(&mut cx, i, system);
    }
    if let Some(at) = cpu
        && let Some(i) = w.get(at)
    {
        cx.window_ns = i.duration_ns;
        cpu_hogs(&mut cx, i);
    }
    // Apple's budget is Apple's: judged on Apple platforms, elsewhere only
    // when asked for (a server is under no such limit).
    let budget_applies =
        t.wakeups_budget_everywhere || matches!(system.os.as_str(), "macos" | "ios");
    if budget_applies
        && let Some((from, to, at)) = wakeups
        && let Some(i) = w.get(at)
    {
        cx.window_ns = i.duration_ns;
        wakeups_budget(&mut cx, h, from, to, i);
    }
    memory_growth(&mut cx, h);
    let mut out = cx.out.finish(t);
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.kind.cmp(&b.kind)));
    for i in w.computed {
        w.shared.give_back(i.threads);
    }
    out
}
