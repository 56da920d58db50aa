//! The records about a sampler: its report (versioned) and its own counters.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::SamplerConfig;
use crate::diagnose::{Finding, Subject};
use crate::history::History;
use crate::interval::groups::{DEFAULT_MAX_GROUPS, ThreadGroupInterval, thread_groups};
use crate::interval::{Interval, SharedEnd, ThreadInterval, between_in_history_sharing};
use crate::model::{SampleWarning, SystemInfo, TargetIdentity};

/// Version of the [`Report`] layout, in [`Report::schema_version`]: raised
/// whenever a field of the report (or of a record inside it) is renamed,
/// removed or changes meaning, so a saved report is read with the right
/// expectations. Version 1 is the first published layout. Version 2 lists
/// at most [`SamplerConfig::report_threads`] threads in `interval.threads`
/// and adds `thread_groups` and `threads_folded`; a version 1 report reads
/// as version 2 with no groups and nothing folded.
pub const REPORT_SCHEMA_VERSION: u32 = 2;

/// A report: what the sampler measured and what it concluded, with what a
/// reader needs to interpret it later (schema and library version, which
/// process, with which configuration). Round-trips through serde.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct Report {
    /// Layout version of this record ([`REPORT_SCHEMA_VERSION`] when made
    /// by this library).
    pub schema_version: u32,
    /// Version of the wakemeter library that made the report.
    pub library_version: String,
    /// The process measured.
    pub target: TargetIdentity,
    /// The configuration it was measured with.
    pub config: SamplerConfig,
    /// When the report was made, in nanoseconds since the Unix epoch.
    pub unix_time_ns: u64,
    /// The machine.
    pub system: SystemInfo,
    /// The sampler's own counters and overhead.
    pub stats: SamplerStats,
    /// The interval over the findings window (None with fewer than two
    /// snapshots). Its `threads` are at most
    /// [`SamplerConfig::report_threads`] of them, chosen so that the threads
    /// the findings name and the busiest by CPU, switches and wakes are
    /// kept; every other figure of it covers all threads.
    pub interval: Option<Interval>,
    /// Every thread of the interval, listed or not, folded into groups by
    /// name with the numbers collapsed ([`crate::compare::group_name`]:
    /// `worker-{n}`), most CPU first: at most
    /// [`DEFAULT_MAX_GROUPS`] groups and one
    /// [`OTHER_GROUP`](crate::compare::OTHER_GROUP) for the rest. Their
    /// `threads` add up to the interval's thread count, their CPU to the
    /// CPU of all its threads. Empty without an interval.
    #[serde(default)]
    pub thread_groups: Vec<ThreadGroupInterval>,
    /// Threads alive at the end of the interval that `interval.threads`
    /// leaves out (counted in `thread_groups` only).
    #[serde(default)]
    pub threads_folded: u32,
    /// Findings, most severe first.
    pub findings: Vec<Finding>,
    /// What made the snapshots of the interval less complete than
    /// configured, each kind once; lost kernel events are summed.
    pub warnings: Vec<SampleWarning>,
}

/// The interval over `window` ending at the newest snapshot of `h`: from
/// the snapshot taken nearest to `window` before the newest one (of two
/// equally near, the later). Nearest rather than "the oldest within": a
/// sampler ticking every second takes the snapshot of two seconds ago a
/// few microseconds before or after the two-second mark, and a report over
/// two seconds must not alternate between one and two seconds with that
/// jitter.
pub(super) fn interval_over_in(h: &History, window: Duration) -> Option<Interval> {
    interval_over_sharing(h, window, &mut SharedEnd::default())
}

/// [`interval_over_in`], the newest snapshot decoded once with the other
/// intervals computed with `shared` (see [`SharedEnd`]).
pub(super) fn interval_over_sharing(
    h: &History,
    window: Duration,
    shared: &mut SharedEnd,
) -> Option<Interval> {
    let to = h.latest()?;
    let since = to
        .header
        .monotonic_ns
        .saturating_sub(crate::probe::duration_ns(window));
    let within = h.first_since(since)?;
    let from = match h.last_at_or_before(since) {
        Some(older) if since - older.header.monotonic_ns < within.header.monotonic_ns - since => {
            older
        }
        _ => within,
    };
    if from.header.seq == to.header.seq {
        let n = h.len();
        let from = h.get(n.checked_sub(2)?)?;
        return Some(between_in_history_sharing(h, from, to, shared));
    }
    Some(between_in_history_sharing(h, from, to, shared))
}

/// The warnings of the snapshots after `from_seq` up to `to_seq`, each once
/// (the newest of its kind), with lost kernel events summed.
pub(super) fn warnings_in(h: &History, from_seq: u64, to_seq: u64) -> Vec<SampleWarning> {
    let mut out: Vec<SampleWarning> = Vec::new();
    let mut dropped = 0u64;
    let within = h
        .iter()
        .rev()
        .filter(|s| s.header.seq > from_seq && s.header.seq <= to_seq);
    for w in within.flat_map(|s| &s.header.warnings) {
        match w {
            SampleWarning::KernelEventsDropped { dropped_events } => {
                dropped = dropped.saturating_add(*dropped_events);
            }
            w if !out
                .iter()
                .any(|o| std::mem::discriminant(o) == std::mem::discriminant(w)) =>
            {
                out.push(w.clone());
            }
            _ => {}
        }
    }
    if dropped > 0 {
        out.push(SampleWarning::KernelEventsDropped {
            dropped_events: dropped,
        });
    }
    out
}

/// The groups of every thread of `interval`, then its `threads` cut to at
/// most `keep` (see [`Report::interval`]); returns the groups and how
/// many threads were left out.
#[cfg(test)]
pub(super) fn fold_threads(
    interval: &mut Interval,
    findings: &[Finding],
    keep: usize,
) -> (Vec<ThreadGroupInterval>, u32) {
    let (folded, groups, left_out) = folded(interval, findings, keep);
    *interval = folded;
    (groups, left_out)
}

/// What a report holds of `interval`: a copy with at most `keep` of its
/// threads (see [`Report::interval`]), the groups of all of them, and how
/// many threads were left out. Only the kept threads are copied: a copy
/// of the whole interval, cut afterwards, copied every thread's record
/// and kernel view at each report (1,000 threads under eBPF, to keep a
/// screenful).
pub(super) fn folded(
    interval: &Interval,
    findings: &[Finding],
    keep: usize,
) -> (Interval, Vec<ThreadGroupInterval>, u32) {
    let (groups, _) = thread_groups(&interval.threads, DEFAULT_MAX_GROUPS);
    let threads = &interval.threads;
    let total = threads.len();
    match kept_threads(threads, findings, keep) {
        None => (interval.clone(), groups, 0),
        Some(flags) => {
            let kept: Vec<ThreadInterval> = threads
                .iter()
                .zip(flags)
                .filter(|&(_, kept)| kept)
                .map(|(t, _)| t.clone())
                .collect();
            let left_out = u32::try_from(total - kept.len()).unwrap_or(u32::MAX);
            (with_threads(interval, kept), groups, left_out)
        }
    }
}

/// `interval` with `threads` in place of its own (which are not copied).
fn with_threads(interval: &Interval, threads: Vec<ThreadInterval>) -> Interval {
    let i = interval;
    Interval {
        from_seq: i.from_seq,
        to_seq: i.to_seq,
        end_monotonic_ns: i.end_monotonic_ns,
        duration_ns: i.duration_ns,
        process: i.process.clone(),
        threads,
        threads_exited: i.threads_exited,
        kernel_thread_exits: i.kernel_thread_exits,
        kernel_uncovered_threads: i.kernel_uncovered_threads,
        loops: i.loops.clone(),
        sleeps: i.sleeps.clone(),
        sampler_cpu_time_ns: i.sampler_cpu_time_ns,
        sampler_cpu_percent: i.sampler_cpu_percent,
    }
}

/// Which of `threads` a report keeps, at most `keep` (by index); `None`
/// when all of them fit.
fn kept_threads(
    threads: &[ThreadInterval],
    findings: &[Finding],
    keep: usize,
) -> Option<Vec<bool>> {
    let total = threads.len();
    if total <= keep {
        return None;
    }
    let mut kept = Kept {
        flags: vec![false; total],
        n: 0,
        keep,
    };
    // The threads the findings are about, most severe first; one of a
    // group of alike threads (the one whose figures the finding quotes).
    let named: Vec<u64> = findings
        .iter()
        .filter_map(|f| match &f.subject {
            Subject::Threads { tids, .. } => tids.first().copied(),
            s => s.tid(),
        })
        .collect();
    if !named.is_empty() {
        let index: HashMap<u64, usize> = threads
            .iter()
            .enumerate()
            .map(|(i, t)| (t.tid, i))
            .collect();
        for tid in named {
            if let Some(&i) = index.get(&tid) {
                kept.take(i);
            }
        }
    }
    // Then the busiest by each measure in turn. The threads are ordered
    // by CPU already; the other two are ranked here (the top `keep` only).
    let rankings = [
        (0..total).collect::<Vec<_>>(),
        top_by(threads, keep, |t| t.switches_per_sec),
        top_by(threads, keep, |t| {
            t.kernel.as_ref().map(|k| k.wakes_per_sec)
        }),
    ];
    let mut next = [0usize; 3];
    while !kept.full() {
        let mut moved = false;
        for (ranking, at) in rankings.iter().zip(&mut next) {
            if kept.full() {
                break;
            }
            while let Some(&i) = ranking.get(*at) {
                *at += 1;
                if kept.take(i) {
                    moved = true;
                    break;
                }
            }
        }
        if !moved {
            break;
        }
    }
    Some(kept.flags)
}

/// Which threads a report keeps, at most `keep`.
struct Kept {
    flags: Vec<bool>,
    n: usize,
    keep: usize,
}

impl Kept {
    /// Keeps thread `i` if there is room; whether it was newly kept.
    fn take(&mut self, i: usize) -> bool {
        if self.full() {
            return false;
        }
        match self.flags.get_mut(i) {
            Some(f) if !*f => {
                *f = true;
                self.n += 1;
                true
            }
            _ => false,
        }
    }

    fn full(&self) -> bool {
        self.n >= self.keep
    }
}

/// Indexes of the at most `n` threads with the highest positive `value`,
/// highest first.
fn top_by(
    threads: &[ThreadInterval],
    n: usize,
    value: impl Fn(&ThreadInterval) -> Option<f64>,
) -> Vec<usize> {
    let mut ranked: Vec<(usize, f64)> = threads
        .iter()
        .enumerate()
        .filter_map(|(i, t)| value(t).filter(|v| *v > 0.0).map(|v| (i, v)))
        .collect();
    let desc = |a: &(usize, f64), b: &(usize, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if ranked.len() > n && n > 0 {
        ranked.select_nth_unstable_by(n - 1, desc);
    }
    ranked.truncate(n);
    ranked.sort_unstable_by(desc);
    ranked.into_iter().map(|(i, _)| i).collect()
}

/// Counters about the sampler itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct SamplerStats {
    /// Snapshots taken so far (on demand and in the background).
    pub total_samples: u64,
    /// CPU time spent taking them, in nanoseconds.
    pub total_sampler_cpu_time_ns: u64,
    /// Sampler CPU time as a percentage of one core since the first snapshot.
    pub sampler_cpu_percent: f64,
    /// Mean CPU time per snapshot, in nanoseconds.
    pub mean_sample_cost_ns: u64,
    /// Snapshots currently in history.
    pub history_len: u32,
    /// Bytes one thread-sample occupies in history (see the README's memory table).
    pub bytes_per_stored_thread_sample: u32,
    /// Bytes the whole history holds: thread samples, probe and kernel
    /// counters (packed), headers. Divide by `history_len` for the bytes
    /// per stored snapshot.
    pub history_bytes: u64,
    /// The history's byte budget, in bytes
    /// ([`crate::SamplerConfig::history_budget_bytes`]).
    /// (Read as 0 from a report saved before it existed.)
    #[serde(default)]
    pub history_budget_bytes: u64,
    /// Snapshots dropped from history, oldest first, because the byte
    /// budget was reached before `history` snapshots were stored: the
    /// history then spans fewer snapshots than configured. Nonzero means
    /// the configured `history` does not fit the budget at the target's
    /// thread count; raise `history_budget_bytes` or lower `history`.
    /// (Read as 0 from a report saved before it existed.)
    #[serde(default)]
    pub total_history_dropped_for_bytes: u64,
    /// Snapshots dropped from history, oldest first, because `history`
    /// snapshots were stored (the ring's normal turnover).
    /// (Read as 0 from a report saved before it existed.)
    #[serde(default)]
    pub total_history_dropped_for_count: u64,
    /// Whether background sampling is running: false once the sampling
    /// thread stopped, by its guard or on a fatal error such as the
    /// target's exit (see `last_error`).
    pub running: bool,
    /// The last error of the background thread, as text, if any.
    pub last_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::{FindingKind, Severity};

    /// A history of snapshots taken at `times` (ns), no threads.
    fn history_at(times: &[u64]) -> History {
        use crate::history::{Encoders, Header, Stored};
        let mut enc = Encoders::default();
        let mut h = History::new(16, u64::MAX);
        for (seq, &monotonic_ns) in times.iter().enumerate() {
            let header = Header {
                seq: seq as u64,
                monotonic_ns,
                unix_time_ns: 0,
                process: Default::default(),
                switch_split_read: true,
                sampler_cost_ns: 0,
                total_sampler_cpu_time_ns: 0,
                warnings: Vec::new(),
            };
            let stored = Stored::new(&mut enc, header, Vec::new(), &[], &[], None);
            h.push(std::sync::Arc::new(stored));
        }
        h
    }

    #[test]
    fn an_interval_over_a_window_starts_at_the_snapshot_nearest_its_start() {
        // One snapshot a second, each a few microseconds early or late.
        let h = history_at(&[
            0,
            1_000_004_000,
            2_000_001_000,
            3_000_006_000,
            4_000_003_000,
        ]);
        let over = |secs: f64| {
            let i = interval_over_in(&h, Duration::from_secs_f64(secs)).expect("an interval");
            (i.from_seq, i.to_seq)
        };
        // Snapshot 2 is 2 µs older than two seconds: still the one meant.
        assert_eq!(over(2.0), (2, 4));
        assert_eq!(over(1.0), (3, 4));
        assert_eq!(over(3.0), (1, 4));
        // 1.4 s back is nearer snapshot 3 (1.0 s old) than 2 (2.0 s old).
        assert_eq!(over(1.4), (3, 4));
        assert_eq!(over(1.6), (2, 4));
        // Longer than the history: all of it. Zero: the last two.
        assert_eq!(over(60.0), (0, 4));
        assert_eq!(over(0.0), (3, 4));
        assert!(interval_over_in(&history_at(&[5]), Duration::from_secs(1)).is_none());
    }

    /// Thread `tid` named `name` with this CPU and these switches per second.
    fn thread(tid: u64, name: &str, cpu: f64, switches: f64) -> ThreadInterval {
        ThreadInterval {
            tid,
            serial: tid,
            name: name.to_string(),
            started_in_interval: false,
            cpu_time_ns: (cpu * 1e7) as u64,
            cpu_percent: cpu,
            switches: Some(switches as u64),
            switches_per_sec: Some(switches),
            voluntary_switches: None,
            voluntary_switches_per_sec: None,
            involuntary_switches: None,
            involuntary_switches_per_sec: None,
            run_queue_wait_ns: None,
            run_queue_wait_percent: None,
            kernel: None,
        }
    }

    /// Ten threads, most CPU first: `worker-0` … `worker-7`, then `chatty-8`
    /// and `chatty-9`, which use the least CPU and switch the most.
    fn interval() -> Interval {
        let mut threads: Vec<ThreadInterval> = (0..8)
            .map(|i| thread(i, &format!("worker-{i}"), 50.0 - i as f64, 1.0))
            .collect();
        threads.push(thread(8, "chatty-8", 0.5, 900.0));
        threads.push(thread(9, "chatty-9", 0.2, 1000.0));
        Interval {
            from_seq: 0,
            to_seq: 1,
            end_monotonic_ns: 1,
            duration_ns: 1_000_000_000,
            process: Default::default(),
            threads,
            threads_exited: 0,
            kernel_thread_exits: None,
            kernel_uncovered_threads: None,
            loops: Vec::new(),
            sleeps: Vec::new(),
            sampler_cpu_time_ns: 0,
            sampler_cpu_percent: 0.0,
        }
    }

    fn tids(i: &Interval) -> Vec<u64> {
        i.threads.iter().map(|t| t.tid).collect()
    }

    #[test]
    fn the_busiest_by_cpu_and_by_switches_are_kept_in_turn() {
        let mut i = interval();
        let (groups, folded) = fold_threads(&mut i, &[], 4);
        // CPU #1, switches #1, CPU #2, switches #2; still in CPU order.
        assert_eq!(tids(&i), [0, 1, 8, 9]);
        assert_eq!(folded, 6);
        let names: Vec<(&str, u32)> = groups
            .iter()
            .map(|g| (g.name.as_str(), g.threads))
            .collect();
        assert_eq!(names, [("worker-{n}", 8), ("chatty-{n}", 2)]);
        let cpu: f64 = groups.iter().map(|g| g.cpu_percent).sum();
        let all: f64 = interval().threads.iter().map(|t| t.cpu_percent).sum();
        assert!((cpu - all).abs() < 1e-9, "{cpu} vs {all}");
    }

    #[test]
    fn threads_the_findings_name_come_first() {
        let finding = |subject| Finding {
            kind: FindingKind::SleepOverhead,
            severity: Severity::Warning,
            subject,
            summary: String::new(),
            evidence: Vec::new(),
            advice: String::new(),
            window_ns: 1,
        };
        let findings = [
            finding(Subject::Thread {
                tid: 6,
                name: "worker-6".to_string(),
            }),
            finding(Subject::Threads {
                name: "worker-{n}".to_string(),
                tids: vec![5, 4, 3],
            }),
        ];
        let mut i = interval();
        let (_, folded) = fold_threads(&mut i, &findings, 3);
        // 6 and the quoted member of the group (5), then the busiest.
        assert_eq!(tids(&i), [0, 5, 6]);
        assert_eq!(folded, 7);
    }

    #[test]
    fn all_are_kept_when_they_fit_and_none_with_zero() {
        let mut i = interval();
        assert_eq!(fold_threads(&mut i, &[], 10).1, 0);
        assert_eq!(i, interval());
        let (groups, folded) = fold_threads(&mut i, &[], 0);
        assert!(i.threads.is_empty());
        assert_eq!(folded, 10);
        assert_eq!(groups.iter().map(|g| g.threads).sum::<u32>(), 10);
    }
}
