//! The findings engine: turns history into plain-words findings with
//! evidence and advice.
//!
//! Each rule looks at an [`Interval`] over its own window (10 s for rates,
//! 60 s for CPU, 300 s for the wakeups budget, the whole history for
//! memory), so a finding speaks about a sustained behaviour, not one noisy
//! sample. A thread explained by a more specific finding (a busy-polling
//! loop, a sleep loop) is not reported again as a CPU hog or periodic waker.
//! Threads with the same group name and the same finding (twenty
//! `worker-N` threads sleeping 5 ms each) are reported once, as a group.
//!
//! Severities have hysteresis ([`Thresholds::severity_margin`]): the
//! engine remembers the severity of each finding of the previous report
//! (`SeverityMemory`; a finding missing from it for up to three reports
//! is still remembered) and keeps it until the figure moves past the
//! threshold by the margin, so that a figure hovering at a threshold does
//! not flip a finding between two severities from one report to the next.
//! Presence and kind have the same hysteresis: a finding shown stays until
//! its figure leaves the margin below its line, and a behaviour two kinds
//! could explain (a sleep loop is a periodic waker too) keeps the kind it
//! was given until its figure leaves the margin around the line between
//! them.

mod rules;
pub(crate) use rules::{competition_is_outside, name_competitors};

use serde::{Deserialize, Serialize};

pub use crate::config::Thresholds;

use crate::history::History;
use crate::interval::{Interval, SharedEnd};
use crate::model::SystemInfo;

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Enum))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FindingKind {
    /// An event loop (or a thread's poll syscalls) wakes far more often than it has work.
    BusyPoller,
    /// A sleep-and-check loop whose sleeping itself costs CPU and wakeups.
    SleepOverhead,
    /// A thread or loop waking at a fixed period with little work per wakeup.
    PeriodicWakeups,
    /// A thread using most of a core for a sustained time.
    CpuHog,
    /// A thread runnable but waiting for a CPU a large share of the time.
    RunQueueContention,
    /// The process's wakeup rate against iOS's limit (150/s over 300 s).
    WakeupsBudget,
    /// Resident memory growing across the history.
    MemoryGrowth,
    /// A thread's sleeps are cut short by signals many times per second:
    /// its wakeups come from the signals (an interval timer, a profiler),
    /// not from its own sleep loop.
    SignalWakeups,
}

impl FindingKind {
    /// Every kind, in declaration order: what an exporter pre-creates (a
    /// zero series per kind, so that "none" differs from "no data") and
    /// what a test walks.
    pub const ALL: [FindingKind; 8] = [
        FindingKind::BusyPoller,
        FindingKind::SleepOverhead,
        FindingKind::PeriodicWakeups,
        FindingKind::CpuHog,
        FindingKind::RunQueueContention,
        FindingKind::WakeupsBudget,
        FindingKind::MemoryGrowth,
        FindingKind::SignalWakeups,
    ];

    /// The kind's name as in JSON (`busy_poller`, `cpu_hog`, ...): the
    /// one name of the glossary, for labels and file names.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::BusyPoller => "busy_poller",
            FindingKind::SleepOverhead => "sleep_overhead",
            FindingKind::PeriodicWakeups => "periodic_wakeups",
            FindingKind::CpuHog => "cpu_hog",
            FindingKind::RunQueueContention => "run_queue_contention",
            FindingKind::WakeupsBudget => "wakeups_budget",
            FindingKind::MemoryGrowth => "memory_growth",
            FindingKind::SignalWakeups => "signal_wakeups",
        }
    }
}

/// How urgent a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Enum))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing; no action needed yet.
    Info,
    /// Costs battery or CPU noticeably; fix when you can.
    Warning,
    /// Costs a lot, or the OS would act on it (kill, throttle, crash report).
    Critical,
}

impl Severity {
    /// Every severity, least urgent first.
    pub const ALL: [Severity; 3] = [Severity::Info, Severity::Warning, Severity::Critical];

    /// The severity's name as in JSON (`info`, `warning`, `critical`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// Who a finding is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Enum))]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Subject {
    /// The whole process.
    Process {
        /// Process id.
        pid: u32,
    },
    /// One thread.
    Thread {
        /// OS thread id.
        tid: u64,
        /// Thread name.
        name: String,
    },
    /// An instrumented loop ([`crate::LoopProbe`]).
    Loop {
        /// Probe name.
        name: String,
        /// Thread that runs it, if known.
        tid: Option<u64>,
    },
    /// An instrumented sleep site ([`crate::SleepProbe`]).
    SleepSite {
        /// Probe name.
        name: String,
        /// Thread that sleeps there, if known.
        tid: Option<u64>,
    },
    /// Threads with the same group name and the same finding, reported once.
    Threads {
        /// Their group name: the names with each run of digits as `{n}`
        /// (`worker-{n}` for `worker-1`, `worker-2`, ...), the grouping of
        /// [`crate::Report::thread_groups`], of recordings and of the
        /// Prometheus labels ([`crate::compare::group_name`]).
        name: String,
        /// Their OS thread ids, in the order the rule found them.
        tids: Vec<u64>,
    },
}

impl Subject {
    /// The thread this subject runs on, if known.
    pub fn tid(&self) -> Option<u64> {
        match self {
            Subject::Process { .. } => None,
            Subject::Thread { tid, .. } => Some(*tid),
            Subject::Loop { tid, .. } | Subject::SleepSite { tid, .. } => *tid,
            Subject::Threads { .. } => None,
        }
    }

    /// Every thread this subject is about: one for a thread (or a probe
    /// whose thread is known), all of a group, none for the process.
    pub fn tids(&self) -> Vec<u64> {
        match self {
            Subject::Threads { tids, .. } => tids.clone(),
            other => other.tid().into_iter().collect(),
        }
    }

    /// A short label such as `loop "io"` or `thread 1234 "worker"`.
    pub fn label(&self) -> String {
        match self {
            Subject::Process { pid } => format!("process {pid}"),
            Subject::Thread { tid, name } => format!("thread {tid} \"{name}\""),
            Subject::Loop { name, .. } => format!("loop \"{name}\""),
            Subject::SleepSite { name, .. } => format!("sleep site \"{name}\""),
            Subject::Threads { name, tids } => format!("{} threads \"{name}\"", tids.len()),
        }
    }
}

/// One number behind a finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct Evidence {
    /// What was measured, e.g. "wakeups_per_sec".
    pub name: String,
    /// The value.
    pub value: f64,
    /// Its unit, e.g. "1/s", "%", "ns", "bytes", "ratio".
    pub unit: String,
}

/// A diagnosis in plain words, with the numbers behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct Finding {
    /// What kind of waste.
    pub kind: FindingKind,
    /// How urgent.
    pub severity: Severity,
    /// Who.
    pub subject: Subject,
    /// One line a developer acts on.
    pub summary: String,
    /// The numbers the summary rests on.
    pub evidence: Vec<Evidence>,
    /// What to do about it.
    pub advice: String,
    /// Length of the window the finding looked at, in nanoseconds.
    pub window_ns: u64,
}

impl Finding {
    /// The evidence named `name`, if present.
    pub fn evidence(&self, name: &str) -> Option<f64> {
        self.evidence
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.value)
    }
}

/// Reports a finding stays remembered after it was last shown, so that
/// one report without it (a stall of the machine that spread a ticker's
/// per-sample rates for a moment) does not reset the hysteresis: when it
/// comes back, it comes back as what it was, not as whichever kind its
/// figure favours at that instant.
const REMEMBERED_REPORTS: u32 = 3;

/// The severities of the recent reports' findings, which hysteresis
/// holds on to: those of the previous report, and those shown within the
/// last [`REMEMBERED_REPORTS`] reports. Bounded: one entry per finding of
/// those reports (alike threads share one).
#[derive(Debug, Default)]
pub(crate) struct SeverityMemory {
    last: rules::Severities,
    /// Reports since each remembered finding was last shown (absent: shown
    /// in the previous one).
    unseen: std::collections::HashMap<(FindingKind, String), u32>,
}

/// Runs every rule over `history`. `exclude_tid` is the sampler's own
/// thread, which is never a subject. `known` is an interval of `history`
/// the caller already computed: a rule whose window has the same ends
/// uses it rather than computing it again. `memory` holds the recent
/// runs' severities and is updated with this run's. The rules' intervals
/// end at the newest snapshot, decoded once with the caller's other
/// intervals of it (`shared`).
pub(crate) fn diagnose(
    history: &History,
    t: &Thresholds,
    system: &SystemInfo,
    exclude_tid: Option<u64>,
    known: Option<&Interval>,
    memory: &mut SeverityMemory,
    shared: &mut SharedEnd,
) -> Vec<Finding> {
    let findings = rules::run_sharing(history, t, system, exclude_tid, known, &memory.last, shared);
    let mut now = rules::Severities::with_capacity(findings.len());
    for f in &findings {
        let severity = now
            .entry(rules::memory_key(f.kind, &f.subject))
            .or_insert(f.severity);
        *severity = (*severity).max(f.severity);
    }
    let mut unseen = std::collections::HashMap::new();
    for (key, severity) in memory.last.drain() {
        if now.contains_key(&key) {
            continue;
        }
        let age = memory.unseen.get(&key).copied().unwrap_or(0) + 1;
        if age <= REMEMBERED_REPORTS {
            unseen.insert(key.clone(), age);
            now.insert(key, severity);
        }
    }
    memory.last = now;
    memory.unseen = unseen;
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where each kind sits in [`FindingKind::ALL`]; the match has no
    /// wildcard, so a new kind does not compile until it is listed here
    /// (and then fails below until it is in `ALL`).
    fn position(k: FindingKind) -> usize {
        match k {
            FindingKind::BusyPoller => 0,
            FindingKind::SleepOverhead => 1,
            FindingKind::PeriodicWakeups => 2,
            FindingKind::CpuHog => 3,
            FindingKind::RunQueueContention => 4,
            FindingKind::WakeupsBudget => 5,
            FindingKind::MemoryGrowth => 6,
            FindingKind::SignalWakeups => 7,
        }
    }

    #[test]
    fn every_kind_is_listed_once_under_its_json_name() {
        for (i, k) in FindingKind::ALL.into_iter().enumerate() {
            assert_eq!(position(k), i, "{k:?}");
            let json = serde_json::to_value(k).expect("a unit variant serializes");
            assert_eq!(json.as_str(), Some(k.as_str()));
        }
        for s in Severity::ALL {
            let json = serde_json::to_value(s).expect("a unit variant serializes");
            assert_eq!(json.as_str(), Some(s.as_str()));
        }
    }
}
