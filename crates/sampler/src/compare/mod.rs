//! Recordings and A/B comparison: a control and a variant, side by side,
//! as the sidecar-overhead analyses do (CPU, memory, wakeups, p95), with a
//! spread so that noise is not mistaken for a change.
//!
//! A recording is a [`RecordingHeader`] (what, how, with which library)
//! and one [`IntervalSummary`] per sampling interval: an [`Interval`] with
//! its threads folded into groups by name (numbers collapsed), so its size
//! is bounded by the number of groups kept, not by the thread count.
//! [`compare`] turns two sets of runs into [`Comparison`] rows. The CLI
//! writes recordings as NDJSON (`wakemeter record`) and prints comparisons
//! (`wakemeter diff`); a host can do both in-process.

mod diff;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::config::SamplerConfig;
use crate::interval::{Interval, LoopInterval, ProcessInterval, SleepInterval, ThreadInterval};
use crate::model::{SystemInfo, TargetIdentity};
use crate::sampler::{REPORT_SCHEMA_VERSION, Sampler};

pub use diff::{Comparison, DiffRow, Run, Spread, Verdict, compare};

/// Version of the recording layout ([`RecordingHeader`], [`IntervalSummary`]).
pub const RECORDING_SCHEMA_VERSION: u32 = 1;

/// Thread groups kept per interval by default; the rest are summed into
/// one group named [`OTHER_GROUP`].
pub const DEFAULT_MAX_GROUPS: usize = 32;

/// Name of the group that holds the threads outside the kept groups.
pub const OTHER_GROUP: &str = "other";

/// `name` with every run of ASCII digits replaced by `{n}`
/// (`wrk:worker_12` → `wrk:worker_{n}`): the group a thread, loop or
/// sleep site belongs to. An empty name is `{unnamed}`.
pub fn group_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    group_name_into(name, &mut out);
    out
}

/// [`group_name`] written into `out` (cleared first), so that grouping
/// many threads reuses one buffer and allocates once per group only.
fn group_name_into(name: &str, out: &mut String) {
    out.clear();
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push_str("{n}");
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    if out.is_empty() {
        out.push_str("{unnamed}");
    }
}

/// The first line of a recording: what was recorded, how, and by which
/// library.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecordingHeader {
    /// [`RECORDING_SCHEMA_VERSION`] of the library that recorded it.
    pub schema_version: u32,
    /// The [`REPORT_SCHEMA_VERSION`] of the records inside.
    pub report_schema_version: u32,
    /// Version of the wakemeter library that recorded it.
    pub library_version: String,
    /// The process recorded.
    pub target: TargetIdentity,
    /// The sampler's configuration.
    pub config: SamplerConfig,
    /// The machine.
    pub system: SystemInfo,
    /// When recording started, in nanoseconds since the Unix epoch.
    pub start_unix_time_ns: u64,
}

impl RecordingHeader {
    /// The header for a recording of `sampler`, starting at `start_unix_time_ns`.
    pub fn of(sampler: &Sampler, start_unix_time_ns: u64) -> Self {
        RecordingHeader {
            schema_version: RECORDING_SCHEMA_VERSION,
            report_schema_version: REPORT_SCHEMA_VERSION,
            library_version: env!("CARGO_PKG_VERSION").to_string(),
            target: sampler.target_identity().clone(),
            config: sampler.config().clone(),
            system: sampler.system().clone(),
            start_unix_time_ns,
        }
    }
}

/// The threads of one name (numbers collapsed) over one interval: a
/// recording's groups, and a [`crate::Report`]'s `thread_groups`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "uniffi", derive(uniffi::Record))]
#[non_exhaustive]
pub struct ThreadGroupInterval {
    /// The group name ([`group_name`]), or [`OTHER_GROUP`].
    pub name: String,
    /// Threads of the group alive at the end of the interval.
    pub threads: u32,
    /// CPU of all of them, in percent of one core.
    pub cpu_percent: f64,
    /// Their context switches per second; `None` where no thread had them.
    pub switches_per_sec: Option<f64>,
    /// Their voluntary switches (blocking waits) per second, where read.
    pub voluntary_switches_per_sec: Option<f64>,
    /// Their run-queue wait, in percent of one thread's time (summed).
    pub run_queue_wait_percent: Option<f64>,
    /// Times they were made runnable per second (eBPF), where attached.
    pub wakes_per_sec: Option<f64>,
}

/// One interval of a recording: the process, its threads by group, its
/// loops and sleep sites.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct IntervalSummary {
    /// Sequence number of the starting snapshot.
    pub from_seq: u64,
    /// Sequence number of the ending snapshot.
    pub to_seq: u64,
    /// Length of the interval, in nanoseconds.
    pub duration_ns: u64,
    /// Process-wide rates.
    pub process: ProcessInterval,
    /// Context switches of all threads per second; `None` without switch counts.
    pub switches_per_sec: Option<f64>,
    /// Voluntary switches of all threads per second, where read.
    pub voluntary_switches_per_sec: Option<f64>,
    /// eBPF wakes of all threads per second, where attached.
    pub wakes_per_sec: Option<f64>,
    /// Thread groups, most CPU first, at most the kept number plus [`OTHER_GROUP`].
    pub groups: Vec<ThreadGroupInterval>,
    /// Instrumented loops.
    pub loops: Vec<LoopInterval>,
    /// Instrumented sleep sites.
    pub sleeps: Vec<SleepInterval>,
    /// The sampler's own CPU, in percent of one core.
    pub sampler_cpu_percent: f64,
}

fn add_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

impl ThreadGroupInterval {
    fn empty(name: String) -> Self {
        ThreadGroupInterval {
            name,
            threads: 0,
            cpu_percent: 0.0,
            switches_per_sec: None,
            voluntary_switches_per_sec: None,
            run_queue_wait_percent: None,
            wakes_per_sec: None,
        }
    }

    fn add(&mut self, o: &ThreadGroupInterval) {
        self.threads = self.threads.saturating_add(o.threads);
        self.cpu_percent += o.cpu_percent;
        self.switches_per_sec = add_opt(self.switches_per_sec, o.switches_per_sec);
        self.voluntary_switches_per_sec = add_opt(
            self.voluntary_switches_per_sec,
            o.voluntary_switches_per_sec,
        );
        self.run_queue_wait_percent =
            add_opt(self.run_queue_wait_percent, o.run_queue_wait_percent);
        self.wakes_per_sec = add_opt(self.wakes_per_sec, o.wakes_per_sec);
    }
}

/// `threads` folded into groups by [`group_name`], most CPU first: at
/// most `max_groups` groups, plus one [`OTHER_GROUP`] that sums the rest.
/// Also returns the sum of every thread (its `name` empty).
pub fn thread_groups(
    threads: &[ThreadInterval],
    max_groups: usize,
) -> (Vec<ThreadGroupInterval>, ThreadGroupInterval) {
    let mut by_name: HashMap<String, ThreadGroupInterval> = HashMap::new();
    let mut all = ThreadGroupInterval::empty(String::new());
    let mut name = String::new();
    for t in threads {
        let one = ThreadGroupInterval {
            name: String::new(),
            threads: 1,
            cpu_percent: t.cpu_percent,
            switches_per_sec: t.switches_per_sec,
            voluntary_switches_per_sec: t.voluntary_switches_per_sec,
            run_queue_wait_percent: t.run_queue_wait_percent,
            wakes_per_sec: t.kernel.as_ref().map(|k| k.wakes_per_sec),
        };
        all.add(&one);
        group_name_into(&t.name, &mut name);
        match by_name.get_mut(name.as_str()) {
            Some(g) => g.add(&one),
            None => {
                let mut g = ThreadGroupInterval::empty(name.clone());
                g.add(&one);
                by_name.insert(name.clone(), g);
            }
        }
    }
    let mut groups: Vec<ThreadGroupInterval> = by_name.into_values().collect();
    groups.sort_by(|a, b| {
        b.cpu_percent
            .total_cmp(&a.cpu_percent)
            .then_with(|| a.name.cmp(&b.name))
    });
    if groups.len() > max_groups {
        let mut other = ThreadGroupInterval::empty(OTHER_GROUP.to_string());
        for g in groups.drain(max_groups..) {
            other.add(&g);
        }
        groups.push(other);
    }
    (groups, all)
}

impl IntervalSummary {
    /// `interval` with its threads folded into at most `max_groups`
    /// groups (most CPU first) plus [`OTHER_GROUP`] for the rest.
    pub fn of(interval: &Interval, max_groups: usize) -> Self {
        let (groups, all) = thread_groups(&interval.threads, max_groups);
        IntervalSummary {
            from_seq: interval.from_seq,
            to_seq: interval.to_seq,
            duration_ns: interval.duration_ns,
            process: interval.process.clone(),
            switches_per_sec: all.switches_per_sec,
            voluntary_switches_per_sec: all.voluntary_switches_per_sec,
            wakes_per_sec: all.wakes_per_sec,
            groups,
            loops: interval.loops.clone(),
            sleeps: interval.sleeps.clone(),
            sampler_cpu_percent: interval.sampler_cpu_percent,
        }
    }
}

/// One line of a recording (NDJSON: one JSON object per line, tagged by
/// `record`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
#[non_exhaustive]
#[allow(clippy::large_enum_variant)]
pub enum RecordLine {
    /// The first line.
    Header(RecordingHeader),
    /// Every later line.
    Interval(IntervalSummary),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_recorded_before_report_threads_still_reads() {
        let header = RecordingHeader {
            schema_version: RECORDING_SCHEMA_VERSION,
            report_schema_version: 1,
            library_version: "0.1.0".to_string(),
            target: Default::default(),
            config: SamplerConfig::default(),
            system: Default::default(),
            start_unix_time_ns: 0,
        };
        let mut line = serde_json::to_value(RecordLine::Header(header)).unwrap();
        line["config"]
            .as_object_mut()
            .unwrap()
            .remove("report_threads")
            .unwrap();
        match serde_json::from_value::<RecordLine>(line).unwrap() {
            RecordLine::Header(h) => {
                assert_eq!(h.report_schema_version, 1);
                assert_eq!(h.config, SamplerConfig::default());
            }
            other => panic!("not a header: {other:?}"),
        }
    }

    #[test]
    fn group_names_collapse_numbers() {
        assert_eq!(group_name("worker-12"), "worker-{n}");
        assert_eq!(group_name("wrk:worker_0"), "wrk:worker_{n}");
        assert_eq!(group_name("a1b22"), "a{n}b{n}");
        assert_eq!(group_name(""), "{unnamed}");
    }
}
