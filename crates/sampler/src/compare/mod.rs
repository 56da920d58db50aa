//! Recordings and A/B comparison: a control and a variant, side by side,
//! as the sidecar-overhead analyses do (CPU, memory, wakeups, p95), with a
//! spread so that noise is not mistaken for a change.
//!
//! A recording is a [`RecordingHeader`] (what, how, with which library)
//! and one [`IntervalSummary`] per sampling period: an [`Interval`] with
//! its threads folded into groups by name (numbers collapsed), so its size
//! is bounded by the number of groups kept, not by the thread count.
//! A recording may also hold a [`LoadRecord`] (what the load tool said:
//! requests per second, latency percentiles) and ends with a
//! [`RecordingEnd`]; a recording without one was cut short.
//!
//! [`Experiment`] reads the runs of a control and a variant line by line
//! (bounded memory whatever the file size) and [`Experiment::compare`]
//! turns them into a [`Comparison`]: totals per side, then rows per
//! process identity ([`RecordingHeader::identity`]) and thread group, each
//! with a verdict from a stated test. [`read_recording`] parses the NDJSON
//! and says on which line it is wrong. The CLI writes recordings
//! (`wakemeter record`, `wakemeter ab`) and prints comparisons
//! (`wakemeter diff`); a host can do both in-process.

mod diff;
mod read;
mod stats;

use serde::{Deserialize, Serialize};

use crate::config::SamplerConfig;
use crate::interval::{Interval, LoopInterval, ProcessInterval, SleepInterval};
use crate::model::{SystemInfo, TargetIdentity};
use crate::sampler::{REPORT_SCHEMA_VERSION, Sampler};

pub use crate::interval::groups::{
    DEFAULT_MAX_GROUPS, OTHER_GROUP, ThreadGroupInterval, group_name, thread_groups,
};
pub use diff::{
    Comparison, DiffRow, Experiment, IdentityRule, MAX_SERIES_PER_RUN, Side, SideInfo, Spread,
    Verdict, resolution,
};
pub use read::{ReadError, ReadSummary, read_recording};
pub use stats::{BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, MIN_INTERVALS, TEST_DESCRIPTION};

/// Version of the recording layout ([`RecordingHeader`], [`IntervalSummary`]).
/// Version 2 added the [`RecordLine::Load`] and [`RecordLine::End`]
/// records, [`IntervalSummary::pid`] and [`RecordingHeader::role`]; a
/// version 1 recording is read as before.
pub const RECORDING_SCHEMA_VERSION: u32 = 2;

/// The oldest recording layout this library reads.
pub const OLDEST_READABLE_SCHEMA_VERSION: u32 = 1;

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
    /// What the process does, to tell apart processes of one name: its
    /// command line, prefixed with its parent's (`parent > own`) when the
    /// parent has the same name (an nginx worker under its master). `None`
    /// in version 1 recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A label the user gave the process; it replaces name and role as its
    /// identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl RecordingHeader {
    /// The process's identity under `rule`: what `diff` matches across
    /// runs and sides. Processes of one run with the same identity are
    /// summed, never averaged.
    pub fn identity(&self, rule: IdentityRule) -> String {
        if let Some(l) = &self.label {
            return l.clone();
        }
        match (&self.role, rule) {
            (Some(r), IdentityRule::NameAndRole) if !r.is_empty() => {
                format!("{} [{r}]", self.target.name)
            }
            _ => self.target.name.clone(),
        }
    }

    /// The same header with a [`RecordingHeader::role`] and a
    /// [`RecordingHeader::label`].
    pub fn with_role(mut self, role: Option<String>, label: Option<String>) -> Self {
        self.role = role;
        self.label = label;
        self
    }

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
            role: None,
            label: None,
        }
    }
}

/// One interval of a recording: the process, its threads by group, its
/// loops and sleep sites.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct IntervalSummary {
    /// The process whose section this interval belongs to (the latest
    /// header with this PID). `None` in version 1 recordings, where an
    /// interval belongs to the header above it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
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

impl IntervalSummary {
    /// `interval` with its threads folded into at most `max_groups`
    /// groups (most CPU first) plus [`OTHER_GROUP`] for the rest.
    pub fn of(interval: &Interval, max_groups: usize) -> Self {
        let (groups, all) = thread_groups(&interval.threads, max_groups);
        IntervalSummary {
            pid: None,
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

    /// The same interval, marked as belonging to process `pid`'s section.
    pub fn for_pid(mut self, pid: u32) -> Self {
        self.pid = Some(pid);
        self
    }

    /// Checks what a reader relies on: a positive duration, and every
    /// rate and percentage finite and not negative.
    ///
    /// # Errors
    /// Names the first field that is not.
    pub fn validate(&self) -> Result<(), String> {
        if self.duration_ns == 0 {
            return Err("duration_ns is 0".to_string());
        }
        let p = &self.process;
        let mut fields: Vec<(&str, Option<f64>)> = vec![
            ("process.cpu_percent", Some(p.cpu_percent)),
            ("switches_per_sec", self.switches_per_sec),
            (
                "voluntary_switches_per_sec",
                self.voluntary_switches_per_sec,
            ),
            ("wakes_per_sec", self.wakes_per_sec),
            ("sampler_cpu_percent", Some(self.sampler_cpu_percent)),
        ];
        for g in &self.groups {
            fields.push(("groups[].cpu_percent", Some(g.cpu_percent)));
            fields.push(("groups[].switches_per_sec", g.switches_per_sec));
            fields.push(("groups[].wakes_per_sec", g.wakes_per_sec));
        }
        for l in &self.loops {
            fields.push(("loops[].wakeups_per_sec", Some(l.wakeups_per_sec)));
            fields.push(("loops[].idle_wakeup_ratio", Some(l.idle_wakeup_ratio)));
            fields.push(("loops[].utilization", Some(l.utilization)));
        }
        for z in &self.sleeps {
            fields.push(("sleeps[].sleeps_per_sec", Some(z.sleeps_per_sec)));
            fields.push(("sleeps[].cpu_percent", Some(z.cpu_percent)));
        }
        finite_non_negative(fields)
    }
}

/// The first of `fields` (name, value) whose value is not a finite
/// number >= 0, as an error.
fn finite_non_negative<'a>(
    fields: impl IntoIterator<Item = (&'a str, Option<f64>)>,
) -> Result<(), String> {
    for (name, v) in fields {
        if let Some(v) = v
            && !(v.is_finite() && v >= 0.0)
        {
            return Err(format!("{name} is {v}, not a finite number >= 0"));
        }
    }
    Ok(())
}

/// What a load tool (`wrk`, `hey`, `redis-benchmark`, `ab`, any program)
/// said during a run of `wakemeter ab`: its command, its output, and the
/// figures parsed from it where the tool is known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LoadRecord {
    /// The command, as given (run by `sh -c`).
    pub command: String,
    /// The tool recognised in the output (`wrk`, `hey`, `redis-benchmark`,
    /// `ab`), or `None`.
    pub tool: Option<String>,
    /// Its exit status; `None` when it was ended by a signal.
    pub exit_code: Option<i32>,
    /// How long it ran, in nanoseconds.
    pub duration_ns: u64,
    /// Requests completed, as the tool counted them.
    pub requests: Option<u64>,
    /// Requests per second, as the tool computed them.
    pub requests_per_sec: Option<f64>,
    /// Median latency, in nanoseconds.
    pub latency_p50_ns: Option<f64>,
    /// 95th percentile latency, in nanoseconds (`wrk` does not print one).
    pub latency_p95_ns: Option<f64>,
    /// 99th percentile latency, in nanoseconds.
    pub latency_p99_ns: Option<f64>,
    /// Its standard output and error, at most [`MAX_LOAD_OUTPUT`] bytes
    /// (the end is kept when longer).
    pub output: String,
}

/// Most bytes of a load tool's output kept in a [`LoadRecord`].
pub const MAX_LOAD_OUTPUT: usize = 256 * 1024;

impl LoadRecord {
    /// A record of `command`'s run; the figures are filled by the parser
    /// of the tool that printed `output`.
    pub fn new(command: String, exit_code: Option<i32>, duration_ns: u64, output: String) -> Self {
        let output = if output.len() > MAX_LOAD_OUTPUT {
            let mut cut = output.len() - MAX_LOAD_OUTPUT;
            while !output.is_char_boundary(cut) {
                cut += 1;
            }
            output[cut..].to_string()
        } else {
            output
        };
        LoadRecord {
            command,
            tool: None,
            exit_code,
            duration_ns,
            requests: None,
            requests_per_sec: None,
            latency_p50_ns: None,
            latency_p95_ns: None,
            latency_p99_ns: None,
            output,
        }
    }

    /// Checks that every figure is finite and not negative.
    ///
    /// # Errors
    /// Names the first that is not.
    pub fn validate(&self) -> Result<(), String> {
        finite_non_negative([
            ("requests_per_sec", self.requests_per_sec),
            ("latency_p50_ns", self.latency_p50_ns),
            ("latency_p95_ns", self.latency_p95_ns),
            ("latency_p99_ns", self.latency_p99_ns),
        ])
    }
}

/// The last line of a complete recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecordingEnd {
    /// Interval lines written before it, all processes together.
    pub intervals: u64,
    /// Why recording ended: `deadline`, `interrupted` (SIGINT/SIGTERM),
    /// `exited` (every process exited), `load_done` (`wakemeter ab`), or
    /// `write_error`.
    pub reason: String,
    /// When recording ended, in nanoseconds since the Unix epoch.
    pub end_unix_time_ns: u64,
}

impl RecordingEnd {
    /// An end record.
    pub fn new(intervals: u64, reason: &str, end_unix_time_ns: u64) -> Self {
        RecordingEnd {
            intervals,
            reason: reason.to_string(),
            end_unix_time_ns,
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
    /// One sampling period of a process.
    Interval(IntervalSummary),
    /// What the load tool said (`wakemeter ab`).
    Load(LoadRecord),
    /// The last line of a complete recording.
    End(RecordingEnd),
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
            role: None,
            label: None,
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
}
