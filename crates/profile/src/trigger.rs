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

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
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

/// Options of an [`AutoProfiler`]; start one with
/// [`AutoProfilerBuilder::start`].
#[derive(Debug, Clone)]
pub struct AutoProfilerBuilder {
    capture: Duration,
    cooldown: Duration,
    repeat_after: Duration,
    check_every: Duration,
    max_kept: usize,
    max_kept_bytes: u64,
    process_cpu_percent: Option<f64>,
    thread_cpu_percent: Option<f64>,
    cpu_window: Duration,
    findings: Vec<(FindingKind, StackKind)>,
    options: ProfileOptions,
    output_dir: Option<PathBuf>,
    pprof: bool,
}

impl Default for AutoProfilerBuilder {
    fn default() -> Self {
        AutoProfilerBuilder::new()
    }
}

impl AutoProfilerBuilder {
    /// Defaults: 10 s captures, 60 s cooldown, 10 min before a repeat,
    /// findings checked at most once a second, 16 captures and 64 MiB
    /// kept, no CPU thresholds, the four findings of the module's table,
    /// kernel maps and frequency of [`ProfileOptions::new`], in memory
    /// only.
    pub fn new() -> Self {
        AutoProfilerBuilder {
            capture: DEFAULT_CAPTURE,
            cooldown: DEFAULT_COOLDOWN,
            repeat_after: DEFAULT_REPEAT_AFTER,
            check_every: DEFAULT_CHECK_EVERY,
            max_kept: DEFAULT_MAX_KEPT,
            max_kept_bytes: DEFAULT_MAX_KEPT_BYTES,
            process_cpu_percent: None,
            thread_cpu_percent: None,
            cpu_window: DEFAULT_CPU_WINDOW,
            findings: vec![
                (FindingKind::BusyPoller, StackKind::OnCpu),
                (FindingKind::CpuHog, StackKind::OnCpu),
                (FindingKind::SleepOverhead, StackKind::OffCpu),
                (FindingKind::PeriodicWakeups, StackKind::Wakeups),
            ],
            options: ProfileOptions::new(StackKind::OnCpu),
            output_dir: None,
            pprof: true,
        }
    }

    /// Length of each capture (more than 0, at most [`crate::MAX_CAPTURE`]).
    /// It ends early when the target exits or the sampler stops.
    pub fn with_capture(mut self, d: Duration) -> Self {
        self.capture = d;
        self
    }

    /// Pause after any capture (finished or failed) before the next starts.
    pub fn with_cooldown(mut self, d: Duration) -> Self {
        self.cooldown = d;
        self
    }

    /// Pause before the same trigger (finding kind and subject, or CPU
    /// threshold and thread) is captured again.
    pub fn with_repeat_after(mut self, d: Duration) -> Self {
        self.repeat_after = d;
        self
    }

    /// Least time between two looks at the findings and CPU thresholds;
    /// a look happens at the first snapshot stored after it.
    pub fn with_check_every(mut self, d: Duration) -> Self {
        self.check_every = d;
        self
    }

    /// Captures kept (1 to [`MAX_KEPT_LIMIT`]); the oldest is dropped,
    /// with its files, to make room.
    pub fn with_max_kept(mut self, n: usize) -> Self {
        self.max_kept = n;
        self
    }

    /// Bound on the kept captures' [`Profile::memory_bytes`] added up, and
    /// separately on their files' bytes (at least 1).
    pub fn with_max_kept_bytes(mut self, bytes: u64) -> Self {
        self.max_kept_bytes = bytes;
        self
    }

    /// Captures on-CPU stacks of the whole process when its CPU over the
    /// CPU window reaches `percent` of one core (more than 0; up to
    /// 100 × CPUs).
    pub fn with_process_cpu_percent(mut self, percent: f64) -> Self {
        self.process_cpu_percent = Some(percent);
        self
    }

    /// Captures on-CPU stacks of a thread when its CPU over the CPU window
    /// reaches `percent` of one core (more than 0, at most 100).
    pub fn with_thread_cpu_percent(mut self, percent: f64) -> Self {
        self.thread_cpu_percent = Some(percent);
        self
    }

    /// Window of the CPU thresholds (at least 1 ms): the interval from the
    /// snapshot taken nearest to it before the newest one to the newest.
    pub fn with_cpu_window(mut self, d: Duration) -> Self {
        self.cpu_window = d;
        self
    }

    /// Captures `stacks` when a finding of `kind` fires (replacing the
    /// default profile of that kind, if any).
    pub fn with_finding(mut self, kind: FindingKind, stacks: StackKind) -> Self {
        self.findings.retain(|(k, _)| *k != kind);
        self.findings.push((kind, stacks));
        self
    }

    /// Captures nothing for findings of `kind`.
    pub fn without_finding(mut self, kind: FindingKind) -> Self {
        self.findings.retain(|(k, _)| *k != kind);
        self
    }

    /// Frequency and kernel map sizes of the captures (the kind and the
    /// thread are chosen per trigger).
    pub fn with_options(mut self, options: ProfileOptions) -> Self {
        self.options = options;
        self
    }

    /// Also writes each capture to `dir` (created if missing): folded
    /// stacks, an SVG flame graph and, unless turned off, pprof, named
    /// `wakemeter-PID-UNIXSECONDS-ID-TRIGGER-KIND.{folded,svg,pb.gz}`.
    /// Files of dropped captures are removed; no other file is touched.
    pub fn with_output_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.output_dir = Some(dir.into());
        self
    }

    /// Whether files include pprof (default true).
    pub fn with_pprof(mut self, pprof: bool) -> Self {
        self.pprof = pprof;
        self
    }

    fn validate(&self) -> Result<(), ProfileError> {
        let bad = |option, why| Err(ProfileError::TriggerOption { option, why });
        check_duration(self.capture)?;
        if !(1..=MAX_KEPT_LIMIT).contains(&self.max_kept) {
            return bad("max_kept", "1 to 1024 captures");
        }
        if self.max_kept_bytes == 0 {
            return bad("max_kept_bytes", "at least 1 byte");
        }
        if self
            .process_cpu_percent
            .is_some_and(|p| !(p > 0.0 && p <= 100.0 * 4096.0))
        {
            return bad("process_cpu_percent", "more than 0, up to 100 per CPU");
        }
        if self
            .thread_cpu_percent
            .is_some_and(|p| !(p > 0.0 && p <= 100.0))
        {
            return bad("thread_cpu_percent", "more than 0, at most 100");
        }
        if self.cpu_window < Duration::from_millis(1) {
            return bad("cpu_window", "at least 1 ms");
        }
        Ok(())
    }

    /// Starts the profiler's thread, which follows `sampler`'s snapshots.
    /// Nothing is captured while the sampler stores none (start its
    /// background sampling).
    ///
    /// # Errors
    /// [`ProfileError::TriggerOption`] or
    /// [`ProfileError::DurationOutOfRange`] for an option out of range;
    /// [`ProfileError::File`] when the output directory cannot be created;
    /// [`ProfileError::Thread`] when the thread cannot be started.
    /// Privilege is not checked here: a capture that cannot start is
    /// counted in [`AutoProfilerStats::total_failed`] with its reason.
    pub fn start(self, sampler: &Sampler) -> Result<AutoProfiler, ProfileError> {
        self.validate()?;
        if let Some(dir) = &self.output_dir {
            std::fs::create_dir_all(dir).map_err(|source| ProfileError::File {
                path: dir.clone(),
                source,
            })?;
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            state: Mutex::new(State::default()),
        });
        let (for_thread, for_worker) = (Arc::clone(&shared), sampler.clone());
        // blazesym's caches are not Send: the profiler is made on the thread.
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || {
                Worker {
                    shared: for_thread,
                    sampler: for_worker,
                    config: self,
                    profiler: Profiler::new(),
                    last_seq: None,
                    own_tid: current_tid(),
                }
                .run();
            })
            .map_err(ProfileError::Thread)?;
        Ok(AutoProfiler {
            shared,
            sampler: sampler.clone(),
            thread: Some(thread),
        })
    }
}

/// Captures profiles when findings fire or CPU thresholds are crossed
/// (module docs: which profile for which finding, bounds). Dropping it
/// stops its thread (a capture in progress is abandoned) and waits for it:
/// within a sampling interval, or 0.5 s when the sampler
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

/// CPU use over the CPU window, as the thresholds read it.
#[derive(Debug, Default)]
struct CpuUse {
    /// Process CPU, percent of one core.
    process_percent: f64,
    /// (tid, name, CPU percent of one core) per thread.
    threads: Vec<(u64, String, f64)>,
}

impl CpuUse {
    fn of(i: &Interval) -> CpuUse {
        CpuUse {
            process_percent: i.process.cpu_percent,
            threads: i
                .threads
                .iter()
                .map(|t| (t.tid, t.name.clone(), t.cpu_percent))
                .collect(),
        }
    }
}

/// The first trigger that calls for a capture: findings first (most
/// severe first, as [`Sampler::findings`] orders them), then the busiest
/// thread over the thread threshold, then the process threshold. Skips
/// triggers captured within the repeat pause (`recent`), finding kinds
/// without a profile, and the profiler's own thread.
fn choose(
    findings: Vec<Finding>,
    cpu: Option<&CpuUse>,
    config: &AutoProfilerBuilder,
    recent: &HashMap<TriggerKey, Instant>,
    own_tid: Option<u64>,
) -> Option<(Trigger, StackKind)> {
    let fresh = |t: &Trigger| !recent.contains_key(&t.key());
    for f in findings {
        let Some(&(_, stacks)) = config.findings.iter().find(|(k, _)| *k == f.kind) else {
            continue;
        };
        if f.subject.tid().is_some() && f.subject.tid() == own_tid {
            continue;
        }
        let t = Trigger::Finding(f);
        if fresh(&t) {
            return Some((t, stacks));
        }
    }
    let cpu = cpu?;
    if let Some(threshold) = config.thread_cpu_percent {
        let mut busiest: Vec<_> = cpu
            .threads
            .iter()
            .filter(|(tid, _, percent)| Some(*tid) != own_tid && *percent >= threshold)
            .collect();
        busiest.sort_by(|a, b| b.2.total_cmp(&a.2));
        for (tid, name, percent) in busiest {
            let t = Trigger::ThreadCpu {
                tid: *tid,
                name: name.clone(),
                percent: *percent,
                threshold_percent: threshold,
            };
            if fresh(&t) {
                return Some((t, StackKind::OnCpu));
            }
        }
    }
    if let Some(threshold) = config.process_cpu_percent {
        let t = Trigger::ProcessCpu {
            percent: cpu.process_percent,
            threshold_percent: threshold,
        };
        if cpu.process_percent >= threshold && fresh(&t) {
            return Some((t, StackKind::OnCpu));
        }
    }
    None
}

/// The profiler's thread.
struct Worker {
    shared: Arc<Shared>,
    sampler: Sampler,
    config: AutoProfilerBuilder,
    profiler: Profiler,
    /// Sequence number of the newest snapshot seen.
    last_seq: Option<u64>,
    /// This thread's id, never a subject (it is busy symbolizing when the
    /// target is this very process).
    own_tid: Option<u64>,
}

/// How a wait for the next snapshot ended.
enum Woke {
    Snapshot,
    NoSnapshot,
    SamplerStopped,
    Stop,
}

impl Worker {
    fn stopping(&self) -> bool {
        self.shared.stop.load(Ordering::Acquire)
    }

    /// Waits for the next stored snapshot, at most `timeout` (capped at
    /// [`STOP_CHECK`]).
    fn wait(&mut self, timeout: Duration) -> Woke {
        let woke = match self
            .sampler
            .wait_for_sample(self.last_seq, timeout.min(STOP_CHECK))
        {
            SampleWait::Stored { seq } => {
                self.last_seq = Some(seq);
                Woke::Snapshot
            }
            SampleWait::Stopped => Woke::SamplerStopped,
            _ => Woke::NoSnapshot,
        };
        if self.stopping() { Woke::Stop } else { woke }
    }

    fn run(mut self) {
        let mut recent: HashMap<TriggerKey, Instant> = HashMap::new();
        let mut next_check = Instant::now();
        let mut next_capture = Instant::now();
        let mut next_id = 1u64;
        loop {
            match self.wait(STOP_CHECK) {
                Woke::Stop => return,
                Woke::Snapshot => {}
                Woke::NoSnapshot | Woke::SamplerStopped => continue,
            }
            let now = Instant::now();
            if now < next_check || now < next_capture {
                continue;
            }
            next_check = now + self.config.check_every;
            recent.retain(|_, at| now.duration_since(*at) < self.config.repeat_after);
            let Some((trigger, stacks)) = self.next_trigger(&recent) else {
                continue;
            };
            recent.insert(trigger.key(), Instant::now());
            let id = next_id;
            next_id += 1;
            if !self.capture(id, trigger, stacks) {
                return;
            }
            next_capture = Instant::now() + self.config.cooldown;
        }
    }

    fn next_trigger(&self, recent: &HashMap<TriggerKey, Instant>) -> Option<(Trigger, StackKind)> {
        // Both count themselves as sampler overhead.
        let findings = if self.config.findings.is_empty() {
            Vec::new()
        } else {
            self.sampler.findings()
        };
        let cpu = if self.config.process_cpu_percent.is_some()
            || self.config.thread_cpu_percent.is_some()
        {
            self.sampler
                .interval_over(self.config.cpu_window)
                .filter(|i| i.duration_ns >= window_floor_ns(&self.sampler, &self.config))
        } else {
            None
        };
        let cpu = cpu.as_ref().map(CpuUse::of);
        self.sampler
            .account(|| choose(findings, cpu.as_ref(), &self.config, recent, self.own_tid))
    }

    /// One capture; returns false when the profiler must stop.
    fn capture(&mut self, id: u64, trigger: Trigger, stacks: StackKind) -> bool {
        let mut options = self.config.options.clone();
        options.set_kind(stacks);
        options = options.with_thread(
            trigger
                .thread()
                .and_then(|t| u32::try_from(t).ok())
                .unwrap_or(0),
        );
        lock(&self.shared.state).capturing = Some(trigger.clone());
        let target = self.sampler.target();
        let started = self
            .sampler
            .account(|| self.profiler.start(target, &options));
        let mut capture = match started {
            Ok(c) => c,
            Err(e) => {
                let mut s = lock(&self.shared.state);
                s.capturing = None;
                s.failed(format!("capture of {}: {e}", trigger.label()));
                return true;
            }
        };
        loop {
            let left = self.config.capture.saturating_sub(capture.elapsed());
            if left.is_zero() || capture.target_exited() {
                break;
            }
            match self.wait(left) {
                Woke::Stop => return false,
                Woke::SamplerStopped => break,
                Woke::Snapshot | Woke::NoSnapshot => {}
            }
            self.sampler.account(|| capture.refresh_modules());
        }
        let finished = self.sampler.account(|| {
            let profile = capture.finish(&self.profiler)?;
            let files = match &self.config.output_dir {
                Some(dir) => Some(write_files(dir, id, &trigger, &profile, self.config.pprof)?),
                None => None,
            };
            Ok::<_, ProfileError>(TriggeredProfile {
                id,
                trigger: trigger.clone(),
                profile,
                files,
            })
        });
        let mut s = lock(&self.shared.state);
        s.capturing = None;
        match finished {
            Ok(kept) => {
                s.total_captures += 1;
                let dropped = s.keep(kept, self.config.max_kept, self.config.max_kept_bytes);
                drop(s);
                let removed = self.sampler.account(|| remove_files(&dropped));
                if let Err(e) = removed {
                    lock(&self.shared.state).failed(e.to_string());
                }
            }
            Err(e) => s.failed(format!("capture of {}: {e}", trigger.label())),
        }
        true
    }
}

/// The shortest CPU interval believed: the thresholds' minimum window,
/// but never more than the CPU window itself.
fn window_floor_ns(sampler: &Sampler, config: &AutoProfilerBuilder) -> u64 {
    let floor = sampler.thresholds().min_window.min(config.cpu_window);
    u64::try_from(floor.as_nanos()).unwrap_or(u64::MAX)
}

/// This thread's id (Linux: from `/proc/thread-self`), when known.
fn current_tid() -> Option<u64> {
    wakemeter_procfs::process::current_tid().map(u64::from)
}

/// Writes folded stacks, SVG and (optionally) pprof of one capture into
/// `dir`, never over an existing file.
fn write_files(
    dir: &Path,
    id: u64,
    trigger: &Trigger,
    profile: &Profile,
    pprof: bool,
) -> Result<CaptureFiles, ProfileError> {
    let stem = format!(
        "wakemeter-{}-{}-{id}-{}-{}",
        profile.pid,
        profile.start_unix_ns / 1_000_000_000,
        trigger.slug(),
        kind_label(profile.kind)
    );
    let mut written: Vec<PathBuf> = Vec::new();
    let result = (|| {
        let mut one = |ext: &str, write: &dyn Fn(&mut dyn Write) -> Result<(), ProfileError>| {
            let path = dir.join(format!("{stem}.{ext}"));
            let file_error = |source| ProfileError::File {
                path: path.clone(),
                source,
            };
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(file_error)?;
            written.push(path.clone());
            let mut out = BufWriter::new(file);
            write(&mut out)?;
            let file: File = out.into_inner().map_err(|e| file_error(e.into_error()))?;
            let bytes = file.metadata().map_err(file_error)?.len();
            Ok::<_, ProfileError>((path, bytes))
        };
        let (folded, a) = one("folded", &|w| crate::write_folded(profile, w))?;
        let (svg, b) = one("svg", &|w| crate::write_svg(profile, w))?;
        let (pprof, c) = if pprof {
            let (p, c) = one("pb.gz", &|w| crate::write_pprof(profile, w))?;
            (Some(p), c)
        } else {
            (None, 0)
        };
        Ok(CaptureFiles {
            folded,
            svg,
            pprof,
            bytes: a.saturating_add(b).saturating_add(c),
        })
    })();
    if result.is_err() {
        // Best effort: a half-written capture is not kept.
        for p in &written {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}

/// Removes the files of dropped captures; reports the first failure
/// (after trying every file).
fn remove_files(dropped: &[Arc<TriggeredProfile>]) -> Result<(), ProfileError> {
    let mut first = None;
    for path in dropped
        .iter()
        .filter_map(|c| c.files.as_ref())
        .flat_map(CaptureFiles::paths)
    {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                first.get_or_insert(ProfileError::File {
                    path: path.to_owned(),
                    source,
                });
            }
        }
    }
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::off_cpu_profile;

    fn finding(kind: &str, subject: serde_json::Value) -> Finding {
        serde_json::from_value(serde_json::json!({
            "kind": kind, "severity": "warning", "subject": subject,
            "summary": "s", "evidence": [], "advice": "a", "window_ns": 1
        }))
        .expect("a finding")
    }

    fn thread(tid: u64) -> serde_json::Value {
        serde_json::json!({"type": "thread", "tid": tid, "name": "t"})
    }

    #[test]
    fn kind_names_are_the_json_names() {
        for kind in FindingKind::ALL {
            let json = serde_json::to_value(kind).expect("json");
            assert_eq!(json.as_str(), Some(finding_kind_name(kind)));
        }
    }

    #[test]
    fn findings_come_first_with_their_profile_kind_and_repeats_wait() {
        let config = AutoProfilerBuilder::new().with_thread_cpu_percent(50.0);
        let findings = vec![
            finding(
                "memory_growth",
                serde_json::json!({"type": "process", "pid": 1}),
            ),
            finding("periodic_wakeups", thread(7)),
            finding("busy_poller", thread(8)),
        ];
        let cpu = CpuUse {
            process_percent: 150.0,
            threads: vec![(9, "hot".into(), 99.0), (10, "warm".into(), 60.0)],
        };
        let mut recent = HashMap::new();
        let (t, kind) =
            choose(findings.clone(), Some(&cpu), &config, &recent, None).expect("a trigger");
        // memory_growth has no profile; periodic wakeups answer with wakers.
        assert_eq!((t.thread(), kind), (Some(7), StackKind::Wakeups));
        recent.insert(t.key(), Instant::now());
        let (t, kind) =
            choose(findings.clone(), Some(&cpu), &config, &recent, None).expect("a trigger");
        assert_eq!((t.thread(), kind), (Some(8), StackKind::OnCpu));
        recent.insert(t.key(), Instant::now());
        // Then the busiest thread over the threshold, never our own.
        let (t, _) =
            choose(findings.clone(), Some(&cpu), &config, &recent, Some(9)).expect("a trigger");
        assert!(matches!(t, Trigger::ThreadCpu { tid: 10, .. }), "{t:?}");
        recent.insert(t.key(), Instant::now());
        assert_eq!(
            choose(findings.clone(), Some(&cpu), &config, &recent, Some(9)),
            None
        );
        // The process threshold, when set, comes last.
        let config = config.with_process_cpu_percent(120.0);
        let (t, kind) = choose(findings, Some(&cpu), &config, &recent, Some(9)).expect("a trigger");
        assert!(matches!(t, Trigger::ProcessCpu { .. }) && kind == StackKind::OnCpu);
        assert_eq!(t.thread(), None);
        // A finding kind can be turned off or mapped to another profile.
        let config = AutoProfilerBuilder::new()
            .without_finding(FindingKind::BusyPoller)
            .with_finding(FindingKind::PeriodicWakeups, StackKind::OffCpu);
        let only = vec![
            finding("busy_poller", thread(8)),
            finding("periodic_wakeups", thread(7)),
        ];
        let (t, kind) = choose(only, None, &config, &HashMap::new(), None).expect("a trigger");
        assert_eq!((t.thread(), kind), (Some(7), StackKind::OffCpu));
    }

    fn triggered(id: u64) -> TriggeredProfile {
        TriggeredProfile {
            id,
            trigger: Trigger::Finding(finding("busy_poller", thread(id))),
            profile: off_cpu_profile(),
            files: None,
        }
    }

    #[test]
    fn kept_captures_stay_within_count_and_bytes() {
        let one = triggered(0).profile.memory_bytes();
        let mut s = State::default();
        for id in 1..=5 {
            let dropped = s.keep(triggered(id), 3, u64::MAX);
            assert_eq!(dropped.len(), usize::from(id > 3));
        }
        let ids: Vec<u64> = s.kept.iter().map(|c| c.id).collect();
        assert_eq!(ids, [3, 4, 5]);
        assert_eq!(s.kept_bytes, 3 * one);
        // Bytes: room for two.
        let dropped = s.keep(triggered(6), 10, 2 * one + 1);
        assert_eq!(dropped.len(), 2);
        assert_eq!(s.kept_bytes, 2 * one);
        // One capture over the bound alone is not kept either.
        let dropped = s.keep(triggered(7), 10, one - 1);
        assert_eq!(dropped.len(), 3);
        assert!(s.kept.is_empty() && s.kept_bytes == 0);
        assert_eq!(s.total_evicted, 2 + 2 + 3);
        // The newest capture of a finding's kind and subject answers it.
        s.keep(triggered(8), 10, u64::MAX);
        let key = TriggerKey::Finding(FindingKind::BusyPoller, SubjectKey::Thread(8));
        assert_eq!(s.newest_for(&key).map(|c| c.id), Some(8));
        let other = TriggerKey::Finding(FindingKind::CpuHog, SubjectKey::Thread(8));
        assert!(s.newest_for(&other).is_none());
    }

    #[test]
    fn files_are_written_new_and_removed_with_their_capture() {
        let dir = std::env::temp_dir().join(format!("wakemeter-trigger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let loop_subject = serde_json::json!({"type": "loop", "name": "io/../x y", "tid": null});
        let trigger = Trigger::Finding(finding("sleep_overhead", loop_subject));
        let profile = off_cpu_profile();
        let files = write_files(&dir, 3, &trigger, &profile, true).expect("files");
        let name = files
            .svg
            .file_name()
            .and_then(|n| n.to_str())
            .expect("name");
        assert!(
            name.starts_with("wakemeter-42-0-3-sleep_overhead-loop-io____x_y-off_cpu"),
            "{name}"
        );
        let folded = std::fs::read_to_string(&files.folded).expect("folded");
        assert!(folded.contains("log_request"));
        let sizes: u64 = files
            .paths()
            .map(|p| std::fs::metadata(p).expect("written").len())
            .sum();
        assert_eq!(files.bytes, sizes);
        // Never over an existing file.
        assert!(matches!(
            write_files(&dir, 3, &trigger, &profile, false),
            Err(ProfileError::File { .. })
        ));
        assert!(files.folded.exists(), "the existing file is untouched");
        let kept = Arc::new(TriggeredProfile {
            id: 3,
            trigger,
            profile,
            files: Some(files.clone()),
        });
        remove_files(&[kept]).expect("removed");
        assert!(files.paths().all(|p| !p.exists()));
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn options_out_of_range_are_typed_errors() {
        let sampler = Sampler::new().expect("sampler");
        let bad = [
            AutoProfiler::builder().with_max_kept(0),
            AutoProfiler::builder().with_max_kept_bytes(0),
            AutoProfiler::builder().with_thread_cpu_percent(101.0),
            AutoProfiler::builder().with_process_cpu_percent(f64::NAN),
            AutoProfiler::builder().with_cpu_window(Duration::ZERO),
        ];
        for b in bad {
            assert!(
                matches!(b.start(&sampler), Err(ProfileError::TriggerOption { .. })),
                "accepted"
            );
        }
        assert!(matches!(
            AutoProfiler::builder()
                .with_capture(Duration::ZERO)
                .start(&sampler),
            Err(ProfileError::DurationOutOfRange { .. })
        ));
    }

    /// Without snapshots nothing is captured, and dropping returns.
    #[test]
    fn idle_profiler_stops() {
        let sampler = Sampler::new().expect("sampler");
        let auto = AutoProfiler::builder().start(&sampler).expect("started");
        assert_eq!(auto.stats(), AutoProfilerStats::default());
        assert!(auto.findings().is_empty() && auto.captures().is_empty());
        auto.stop();
    }
}
