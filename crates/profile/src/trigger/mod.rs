//! Continuous, threshold-triggered profiling: [`AutoProfiler`] captures a
//! profile when a wakemeter finding fires or a CPU threshold is crossed,
//! and keeps it with the finding.
//!
//! One thread of its own, which has no clock: it wakes when the
//! [`Sampler`] stores a snapshot ([`Sampler::wait_for_sample`]), at most
//! once per [`AutoProfilerBuilder::with_check_every`] reads the findings
//! (and, when CPU thresholds are set, the interval over their window), and
//! when one calls for a profile and no cooldown holds it back, captures
//! for [`AutoProfilerBuilder::with_capture`], still woken by the sampler's
//! snapshots. The CPU it spends (attaching, reading, symbolizing, writing
//! files) is counted as the sampler's overhead ([`Sampler::account`]);
//! the findings and intervals it reads count themselves.
//!
//! Which profile answers which finding (change with
//! [`AutoProfilerBuilder::with_finding`]):
//!
//! | trigger | profile | the question it answers |
//! | --- | --- | --- |
//! | busy poller | on-CPU | where the loop spins: the poll call site and what calls it |
//! | CPU hog, a CPU threshold | on-CPU | where the CPU goes |
//! | sleep overhead | off-CPU | where the thread sleeps from, how often and for how long |
//! | periodic wakeups | wakeups | who wakes the thread and from where (`[woken by [interrupt]]` with a timer's kernel stack: its own timer) |
//!
//! When the finding names a thread (a thread, or a loop or sleep site
//! whose thread is known), only that thread's stacks are collected (a
//! kernel-side filter); otherwise the whole process's.
//!
//! Bounds: one capture at a time (kernel maps as in [`ProfileOptions`]);
//! at most [`AutoProfilerBuilder::with_max_kept`] captures kept, whose
//! [`Profile::memory_bytes`] add up to at most
//! [`AutoProfilerBuilder::with_max_kept_bytes`], and so do their files on
//! disk; the oldest go first, files included. A cooldown after every
//! capture, and a longer one before the same trigger is captured again,
//! bound the share of time spent profiling.
//!
//! Files: `builder.rs` (the options and [`AutoProfilerBuilder::start`]),
//! `policy.rs` (which trigger, if any, calls for a capture now),
//! `worker.rs` (the profiler's thread), `files.rs` (a capture's files on
//! disk, written the one safe way of `wakemeter_outfile`).

mod builder;
mod files;
mod policy;
#[cfg(test)]
mod tests;
mod worker;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wakemeter::sync::lock;
use wakemeter::{Finding, FindingKind, Interval, SampleWait, Sampler, Subject};
use wakemeter_ebpf::StackKind;

use crate::capture::{ProfileOptions, Profiler, check_duration};
use crate::error::ProfileError;
use crate::model::{Profile, kind_label};

pub use builder::AutoProfilerBuilder;

/// Default capture length, 10 s.
pub const DEFAULT_CAPTURE: Duration = Duration::from_secs(10);
/// Default pause after any capture before the next one starts, 60 s.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(60);
/// Default pause before the same trigger (finding kind and subject, or CPU
/// threshold and thread) is captured again, 10 min.
pub const DEFAULT_REPEAT_AFTER: Duration = Duration::from_secs(600);
/// Default number of captures kept, 16.
pub const DEFAULT_MAX_KEPT: usize = 16;
/// Largest number of captures kept.
pub const MAX_KEPT_LIMIT: usize = 1024;
/// Default bound on the kept captures' memory (and, separately, on their
/// files), 64 MiB.
pub const DEFAULT_MAX_KEPT_BYTES: u64 = 64 << 20;
/// Default window of the CPU thresholds, 10 s.
pub const DEFAULT_CPU_WINDOW: Duration = Duration::from_secs(10);
/// Default least time between two looks at the findings, 1 s.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Longest wait for a snapshot before the thread checks whether it must
/// stop: how long dropping an [`AutoProfiler`] can take when the sampler
/// stores nothing (it wakes on every snapshot otherwise).
const STOP_CHECK: Duration = Duration::from_millis(500);
/// Name of the profiler's thread.
const THREAD_NAME: &str = "wakemeter-prof";
/// Longest subject name in a file name, in bytes.
const MAX_NAME_IN_FILE: usize = 32;

/// Why a profile was captured.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Trigger {
    /// A finding fired (as [`Sampler::findings`] returned it when the
    /// capture started).
    Finding(Finding),
    /// The process used at least the threshold over the CPU window.
    ProcessCpu {
        /// Process CPU over the window, percent of one core.
        percent: f64,
        /// The threshold, percent of one core.
        threshold_percent: f64,
    },
    /// A thread used at least the threshold over the CPU window.
    ThreadCpu {
        /// Thread id.
        tid: u64,
        /// Thread name.
        name: String,
        /// Its CPU over the window, percent of one core.
        percent: f64,
        /// The threshold, percent of one core.
        threshold_percent: f64,
    },
}

impl Trigger {
    /// The thread whose stacks are captured, if the trigger names one.
    pub fn thread(&self) -> Option<u64> {
        match self {
            Trigger::Finding(f) => f.subject.tid(),
            Trigger::ProcessCpu { .. } => None,
            Trigger::ThreadCpu { tid, .. } => Some(*tid),
        }
    }

    /// One line for people, e.g. `busy_poller of thread 12 "io"` or
    /// `process CPU 93.0% >= 80.0%`.
    pub fn label(&self) -> String {
        match self {
            Trigger::Finding(f) => {
                format!("{} of {}", finding_kind_name(f.kind), f.subject.label())
            }
            Trigger::ProcessCpu {
                percent,
                threshold_percent,
            } => format!("process CPU {percent:.1}% >= {threshold_percent:.1}%"),
            Trigger::ThreadCpu {
                tid,
                name,
                percent,
                threshold_percent,
            } => format!("thread {tid} \"{name}\" CPU {percent:.1}% >= {threshold_percent:.1}%"),
        }
    }

    fn key(&self) -> TriggerKey {
        match self {
            Trigger::Finding(f) => TriggerKey::Finding(f.kind, subject_key(&f.subject)),
            Trigger::ProcessCpu { .. } => TriggerKey::ProcessCpu,
            Trigger::ThreadCpu { tid, .. } => TriggerKey::ThreadCpu(*tid),
        }
    }

    /// A short name for files: `busy_poller-tid12`, `thread_cpu-tid12`,
    /// `sleep_overhead-loop-NAME`; only `[A-Za-z0-9_-]`.
    fn slug(&self) -> String {
        let raw = match self {
            Trigger::Finding(f) => {
                let who = match &f.subject {
                    Subject::Process { .. } => "process".to_owned(),
                    Subject::Thread { tid, .. } => format!("tid{tid}"),
                    Subject::Loop { name, .. } => format!("loop-{name}"),
                    Subject::SleepSite { name, .. } => format!("sleep-{name}"),
                    Subject::Threads { name, .. } => format!("threads-{name}"),
                    _ => "subject".to_owned(),
                };
                format!("{}-{who}", finding_kind_name(f.kind))
            }
            Trigger::ProcessCpu { .. } => "process_cpu".to_owned(),
            Trigger::ThreadCpu { tid, .. } => format!("thread_cpu-tid{tid}"),
        };
        raw.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(MAX_NAME_IN_FILE + 20)
            .collect()
    }
}

/// The finding kind's name as in JSON (`busy_poller`, `cpu_hog`, ...).
pub fn finding_kind_name(kind: FindingKind) -> &'static str {
    kind.as_str()
}

/// Who a trigger is about, for the cooldown of repeats and for matching
/// a finding to its capture.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SubjectKey {
    Process,
    Thread(u64),
    Loop(String),
    SleepSite(String),
    Other(String),
}

fn subject_key(s: &Subject) -> SubjectKey {
    match s {
        Subject::Process { .. } => SubjectKey::Process,
        Subject::Thread { tid, .. } => SubjectKey::Thread(*tid),
        Subject::Loop { name, .. } => SubjectKey::Loop(name.clone()),
        Subject::SleepSite { name, .. } => SubjectKey::SleepSite(name.clone()),
        other => SubjectKey::Other(other.label()),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum TriggerKey {
    Finding(FindingKind, SubjectKey),
    ProcessCpu,
    ThreadCpu(u64),
}

/// The files of one capture (written when an output directory is set).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CaptureFiles {
    /// Folded stacks.
    pub folded: PathBuf,
    /// SVG flame graph.
    pub svg: PathBuf,
    /// Gzipped pprof protobuf, unless turned off
    /// ([`AutoProfilerBuilder::with_pprof`]).
    pub pprof: Option<PathBuf>,
    /// Their sizes added up, in bytes.
    pub bytes: u64,
}

impl CaptureFiles {
    fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(&self.folded), Some(&self.svg), self.pprof.as_ref()]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
    }
}

/// One capture kept by an [`AutoProfiler`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TriggeredProfile {
    /// Number of the capture, from 1, in the order they started.
    pub id: u64,
    /// Why it was captured.
    pub trigger: Trigger,
    /// The profile: stacks of the trigger's thread when it names one, of
    /// the whole process otherwise.
    pub profile: Profile,
    /// Its files, when an output directory is set.
    pub files: Option<CaptureFiles>,
}

/// A finding with the profile captured for it (the newest kept capture of
/// the same kind and subject), if any.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProfiledFinding {
    /// The finding.
    pub finding: Finding,
    /// Its profile.
    pub profile: Option<Arc<TriggeredProfile>>,
}

/// Counters of an [`AutoProfiler`].
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct AutoProfilerStats {
    /// Captures finished (kept or not) since start.
    pub total_captures: u64,
    /// Captures that could not start or be read (no privilege, no BTF, the
    /// target gone, ...), or whose files could not be written.
    pub total_failed: u64,
    /// Captures dropped to keep within the bounds, the newest included
    /// when it alone is over the byte bound.
    pub total_evicted: u64,
    /// Captures kept now.
    pub kept: usize,
    /// [`Profile::memory_bytes`] of the kept captures, added up.
    pub kept_bytes: u64,
    /// Bytes of the kept captures' files.
    pub kept_file_bytes: u64,
    /// What is being captured now, if anything.
    pub capturing: Option<Trigger>,
    /// The newest failure, in words.
    pub last_error: Option<String>,
}

/// Captures profiles when findings fire or CPU thresholds are crossed
/// (module docs: which profile for which finding, bounds). Dropping it
/// stops its thread (a capture in progress is abandoned) and waits for it:
/// within a sampling period, or 0.5 s when the sampler
/// stores nothing. Kept captures live as long as it; their files stay on
/// disk.
///
/// ```no_run
/// use std::time::Duration;
/// use wakemeter::{SamplerBuilder, Target};
/// use wakemeter_profile::AutoProfiler;
///
/// let sampler = SamplerBuilder::new().with_target(Target::Pid(1234)).build()?;
/// let _sampling = sampler.start()?;
/// let auto = AutoProfiler::builder()
///     .with_capture(Duration::from_secs(5))
///     .with_thread_cpu_percent(90.0)
///     .start(&sampler)?;
/// std::thread::sleep(Duration::from_secs(60));
/// for f in auto.findings() {
///     if let Some(p) = &f.profile {
///         println!("{}: {:.0}% in poll_forever", f.finding.summary,
///                  p.profile.inclusive_share("poll_forever") * 100.0);
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AutoProfiler {
    shared: Arc<Shared>,
    sampler: Sampler,
    thread: Option<JoinHandle<()>>,
}

impl AutoProfiler {
    /// Options, with the defaults of [`AutoProfilerBuilder::new`].
    pub fn builder() -> AutoProfilerBuilder {
        AutoProfilerBuilder::new()
    }

    /// The kept captures, oldest first.
    pub fn captures(&self) -> Vec<Arc<TriggeredProfile>> {
        lock(&self.shared.state).kept.iter().cloned().collect()
    }

    /// The sampler's findings ([`Sampler::findings`]), each with the newest
    /// kept capture of the same kind and subject.
    pub fn findings(&self) -> Vec<ProfiledFinding> {
        let findings = self.sampler.findings();
        let state = lock(&self.shared.state);
        findings
            .into_iter()
            .map(|finding| ProfiledFinding {
                profile: state.newest_for(&TriggerKey::Finding(
                    finding.kind,
                    subject_key(&finding.subject),
                )),
                finding,
            })
            .collect()
    }

    /// The newest kept capture for a finding of the same kind and subject.
    pub fn profile_for(&self, finding: &Finding) -> Option<Arc<TriggeredProfile>> {
        lock(&self.shared.state).newest_for(&TriggerKey::Finding(
            finding.kind,
            subject_key(&finding.subject),
        ))
    }

    /// Counters: captures done, failed, dropped; what is kept.
    pub fn stats(&self) -> AutoProfilerStats {
        let s = lock(&self.shared.state);
        AutoProfilerStats {
            total_captures: s.total_captures,
            total_failed: s.total_failed,
            total_evicted: s.total_evicted,
            kept: s.kept.len(),
            kept_bytes: s.kept_bytes,
            kept_file_bytes: s.kept_file_bytes,
            capturing: s.capturing.clone(),
            last_error: s.last_error.clone(),
        }
    }

    /// Stops the thread and waits for it (as dropping does).
    pub fn stop(mut self) {
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            // A panic of the thread has nothing left to clean up here.
            let _ = t.join();
        }
    }
}

impl Drop for AutoProfiler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[derive(Debug)]
struct Shared {
    stop: AtomicBool,
    state: Mutex<State>,
}

/// The kept captures and the counters, under one lock held only to copy
/// or to push.
#[derive(Debug, Default)]
struct State {
    kept: VecDeque<Arc<TriggeredProfile>>,
    kept_bytes: u64,
    kept_file_bytes: u64,
    total_captures: u64,
    total_failed: u64,
    total_evicted: u64,
    capturing: Option<Trigger>,
    last_error: Option<String>,
}

impl State {
    fn newest_for(&self, key: &TriggerKey) -> Option<Arc<TriggeredProfile>> {
        self.kept
            .iter()
            .rev()
            .find(|c| c.trigger.key() == *key)
            .cloned()
    }

    /// Keeps `capture`, then drops the oldest captures (the new one too if
    /// it alone is over the byte bound) until at most `max_kept` are kept
    /// and their memory and file bytes are each at most `max_bytes`.
    /// Returns the dropped ones, whose files the caller removes.
    fn keep(
        &mut self,
        capture: TriggeredProfile,
        max_kept: usize,
        max_bytes: u64,
    ) -> Vec<Arc<TriggeredProfile>> {
        self.kept_bytes = self
            .kept_bytes
            .saturating_add(capture.profile.memory_bytes());
        self.kept_file_bytes = self.kept_file_bytes.saturating_add(file_bytes(&capture));
        self.kept.push_back(Arc::new(capture));
        let mut dropped = Vec::new();
        while self.kept.len() > max_kept
            || self.kept_bytes > max_bytes
            || self.kept_file_bytes > max_bytes
        {
            let Some(old) = self.kept.pop_front() else {
                break;
            };
            self.kept_bytes = self.kept_bytes.saturating_sub(old.profile.memory_bytes());
            self.kept_file_bytes = self.kept_file_bytes.saturating_sub(file_bytes(&old));
            self.total_evicted += 1;
            dropped.push(old);
        }
        dropped
    }

    fn failed(&mut self, why: String) {
        self.total_failed += 1;
        self.last_error = Some(why);
    }
}

fn file_bytes(c: &TriggeredProfile) -> u64 {
    c.files.as_ref().map_or(0, |f| f.bytes)
}
