//! The options of an [`AutoProfiler`] and its start.

use wakemeter_outfile::Dir;

use super::files::file_error;
use super::worker::{Worker, current_tid};
use super::*;

/// Options of an [`AutoProfiler`]; start one with
/// [`AutoProfilerBuilder::start`].
#[derive(Debug, Clone)]
pub struct AutoProfilerBuilder {
    pub(super) capture: Duration,
    pub(super) cooldown: Duration,
    pub(super) repeat_after: Duration,
    pub(super) check_every: Duration,
    pub(super) max_kept: usize,
    pub(super) max_kept_bytes: u64,
    pub(super) process_cpu_percent: Option<f64>,
    pub(super) thread_cpu_percent: Option<f64>,
    pub(super) cpu_window: Duration,
    pub(super) findings: Vec<(FindingKind, StackKind)>,
    pub(super) options: ProfileOptions,
    pub(super) output_dir: Option<PathBuf>,
    pub(super) pprof: bool,
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
    /// [`ProfileError::File`] when the output directory cannot be created
    /// or opened (a link, or a directory other users can change:
    /// `wakemeter_outfile::Dir::open`);
    /// [`ProfileError::Thread`] when the thread cannot be started.
    /// Privilege is not checked here: a capture that cannot start is
    /// counted in [`AutoProfilerStats::total_failed`] with its reason.
    pub fn start(self, sampler: &Sampler) -> Result<AutoProfiler, ProfileError> {
        self.validate()?;
        // Opened once (made if missing): every capture's files are
        // created through this descriptor, never through a link.
        let dir = match &self.output_dir {
            Some(path) => Some(Dir::open_or_create(path).map_err(|e| file_error(path, e))?),
            None => None,
        };
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
                    dir,
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
