//! The sampler: configuration, on-demand and background sampling, history.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::diagnose::{self, Finding, Thresholds};
use crate::history::{BYTES_PER_STORED_THREAD_SAMPLE, Encoders, Header, History, Stored};
use crate::interval::{Interval, between_in_history, percent};
use crate::kernel::{KernelSource, KernelSourceError};
use crate::model::{SampleWarning, Snapshot, SystemInfo, TargetIdentity};
use crate::platform::{self, Backend, PackedThread, SampleRequest, Target, clock};
use crate::probe::{LoopProbe, ProbeRegistry, SleepProbe};
use crate::{Error, Result, lock};

pub use crate::config::{
    DEFAULT_HISTORY, DEFAULT_INTERVAL, DEFAULT_SWITCH_SPLIT_EVERY, MAX_HISTORY, MIN_INTERVAL,
    SamplerConfig,
};

/// Configures and builds a [`Sampler`]: a [`SamplerConfig`] plus what is not
/// plain data (a kernel source).
///
/// ```
/// # use std::time::Duration;
/// let sampler = wakemeter::SamplerBuilder::new()
///     .with_interval(Duration::from_millis(500))
///     .with_history(120)
///     .build()?;
/// let snapshot = sampler.sample_now()?;
/// assert!(!snapshot.threads.is_empty());
/// # Ok::<(), wakemeter::Error>(())
/// ```
#[must_use]
#[derive(Default)]
pub struct SamplerBuilder {
    config: SamplerConfig,
    kernel_source: Option<Box<dyn KernelSource>>,
}

impl std::fmt::Debug for SamplerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SamplerBuilder")
            .field("config", &self.config)
            .field("kernel_source", &self.kernel_source.is_some())
            .finish()
    }
}

impl SamplerBuilder {
    /// The defaults of [`SamplerConfig::default`]: 1 s interval, 300
    /// snapshots, this process, switch split every 10th sample.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts from a whole configuration.
    pub fn from_config(config: SamplerConfig) -> Self {
        SamplerBuilder {
            config,
            kernel_source: None,
        }
    }

    /// Time between background samples (at least [`MIN_INTERVAL`]).
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.config.interval = interval;
        self
    }

    /// Number of snapshots kept in history (1 to [`MAX_HISTORY`]).
    pub fn with_history(mut self, snapshots: u32) -> Self {
        self.config.history = snapshots;
        self
    }

    /// The process to observe (default: this one).
    pub fn with_target(mut self, target: Target) -> Self {
        self.config.target = target;
        self
    }

    /// Read voluntary/involuntary switch counts every `n`th sample (1 = every
    /// sample). Total switches are read on every sample regardless.
    pub fn with_switch_split_every(mut self, n: u32) -> Self {
        self.config.switch_split_every = n;
        self
    }

    /// Name of the background sampling thread (at most 15 bytes, no NUL).
    pub fn with_thread_name(mut self, name: impl Into<String>) -> Self {
        self.config.thread_name = name.into();
        self
    }

    /// Thresholds of the findings engine (default: [`Thresholds::default`]).
    pub fn with_thresholds(mut self, thresholds: Thresholds) -> Self {
        self.config.thresholds = thresholds;
        self
    }

    /// Attaches a kernel-side source (e.g. `wakemeter-ebpf`) read with every snapshot.
    pub fn with_kernel_source(mut self, source: Box<dyn KernelSource>) -> Self {
        self.kernel_source = Some(source);
        self
    }

    /// Validates the configuration and opens the platform backend.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a zero or too-short interval, a zero or
    /// too-large history, a zero split period or a bad thread name;
    /// [`Error::NoSuchProcess`] for a target PID that does not exist;
    /// [`Error::Unreadable`] when `/proc` is missing or unreadable;
    /// [`Error::Unsupported`] on a platform without a backend.
    pub fn build(self) -> Result<Sampler> {
        let config = self.config;
        config.validate()?;
        let backend = platform::backend_for(config.target)?;
        let identity = platform::identity(config.target);
        Ok(Sampler {
            inner: Arc::new(Inner {
                system: system_info(),
                identity,
                state: Mutex::new(State {
                    backend,
                    kernel: self.kernel_source,
                    scratch: Vec::new(),
                    encoders: Encoders::default(),
                    dropped_events: 0,
                }),
                history: Mutex::new(History::new(config.history as usize)),
                config,
                samples_taken: AtomicU64::new(0),
                sampler_cpu_time_ns: AtomicU64::new(0),
                first_monotonic_ns: AtomicU64::new(0),
                run: AtomicU64::new(0),
                next_run: AtomicU64::new(1),
                last_error: Mutex::new(None),
                probes: ProbeRegistry::default(),
                sampler_tid: AtomicU64::new(0),
            }),
        })
    }
}

fn system_info() -> SystemInfo {
    SystemInfo {
        total_memory_bytes: platform::total_memory_bytes(),
        cpu_count: platform::cpu_count(),
        os: platform::os_name().to_string(),
    }
}

/// What only the sampling path touches (one sample at a time).
struct State {
    backend: Box<dyn Backend>,
    kernel: Option<Box<dyn KernelSource>>,
    scratch: Vec<PackedThread>,
    encoders: Encoders,
    /// The kernel source's `dropped_events` at the previous snapshot.
    dropped_events: u64,
}

struct Inner {
    config: SamplerConfig,
    system: SystemInfo,
    identity: TargetIdentity,
    /// Held while a sample is taken.
    state: Mutex<State>,
    /// Held only to push a snapshot or to copy the ring (one pointer per snapshot).
    history: Mutex<History>,
    /// Written under `state`, read without any lock by `stats()`.
    samples_taken: AtomicU64,
    sampler_cpu_time_ns: AtomicU64,
    /// Monotonic time of the first snapshot, plus one (0: none yet).
    first_monotonic_ns: AtomicU64,
    /// Id of the background run in progress (0: none).
    run: AtomicU64,
    next_run: AtomicU64,
    last_error: Mutex<Option<String>>,
    probes: ProbeRegistry,
    /// OS id of the background sampling thread while it runs (0: none).
    sampler_tid: AtomicU64,
}

/// Stops one background run: its guard sets `stop`, its thread waits on `wake`.
#[derive(Default)]
struct RunControl {
    stop: Mutex<bool>,
    wake: Condvar,
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
    /// Whether background sampling is running: false once the sampling
    /// thread stopped, by its guard or on a fatal error such as the
    /// target's exit (see `last_error`).
    pub running: bool,
    /// The last error of the background thread, as text, if any.
    pub last_error: Option<String>,
}

/// Samples a process's threads; cheap to clone (all clones share one state)
/// and safe to use from any thread.
#[derive(Clone)]
pub struct Sampler {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("target", &self.inner.config.target)
            .field("interval", &self.inner.config.interval)
            .finish()
    }
}

impl Sampler {
    /// A sampler of this process with the default configuration.
    ///
    /// # Errors
    /// As [`SamplerBuilder::build`].
    pub fn new() -> Result<Sampler> {
        SamplerBuilder::new().build()
    }

    /// Takes a snapshot now and stores it in history without copying it out
    /// (what the background thread does); returns its sequence number.
    ///
    /// # Errors
    /// As [`Sampler::sample_now`].
    pub fn sample(&self) -> Result<u64> {
        self.inner.take()
    }

    /// Takes a snapshot now, stores it in history and returns it.
    ///
    /// # Errors
    /// [`Error::NoSuchProcess`] once the target has exited; [`Error::Unreadable`]
    /// when the process-level `/proc` files cannot be read.
    pub fn sample_now(&self) -> Result<Snapshot> {
        self.inner.take_snapshot()
    }

    /// Starts background sampling on a named thread every configured
    /// interval; sampling stops when the returned guard is dropped.
    ///
    /// # Errors
    /// [`Error::AlreadyRunning`] if a guard is alive; [`Error::Spawn`] if the
    /// thread cannot be created.
    pub fn start(&self) -> Result<SamplingGuard> {
        let id = self.inner.next_run.fetch_add(1, Ordering::Relaxed);
        if self
            .inner
            .run
            .compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::AlreadyRunning);
        }
        let control = Arc::new(RunControl::default());
        let (inner, thread_control) = (self.inner.clone(), control.clone());
        let handle = std::thread::Builder::new()
            .name(self.inner.config.thread_name.clone())
            .spawn(move || inner.run(id, &thread_control))
            .map_err(|e| {
                self.inner.end_run(id);
                Error::Spawn(e)
            })?;
        Ok(SamplingGuard {
            inner: self.inner.clone(),
            id,
            control,
            handle: Some(handle),
        })
    }

    /// A new [`LoopProbe`] reported in this sampler's snapshots.
    ///
    /// # Errors
    /// [`Error::TooManyProbes`] when [`crate::probe::MAX_PROBES`] probes are
    /// alive; [`Error::ProbeNameTooLong`] for a name over
    /// [`crate::probe::MAX_PROBE_NAME_BYTES`].
    pub fn loop_probe(&self, name: &str) -> Result<LoopProbe> {
        self.inner.probes.loop_probe(name)
    }

    /// A new [`SleepProbe`] reported in this sampler's snapshots.
    ///
    /// # Errors
    /// As [`Sampler::loop_probe`].
    pub fn sleep_probe(&self, name: &str) -> Result<SleepProbe> {
        self.inner.probes.sleep_probe(name)
    }

    /// A copy of the history ring (one pointer per snapshot): readers work
    /// on it after releasing the lock, so they never hold up sampling.
    fn history(&self) -> History {
        lock(&self.inner.history).clone()
    }

    /// The newest snapshot, if any.
    pub fn latest(&self) -> Option<Snapshot> {
        self.history().latest().map(Stored::to_snapshot)
    }

    /// Every snapshot in history, oldest first.
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.history().iter().map(Stored::to_snapshot).collect()
    }

    /// The interval between the two newest snapshots.
    pub fn latest_interval(&self) -> Option<Interval> {
        let h = self.history();
        let n = h.len();
        Some(between_in_history(
            &h,
            h.get(n.checked_sub(2)?)?,
            h.get(n - 1)?,
        ))
    }

    /// The interval from the oldest snapshot within `window` of the newest
    /// one to the newest one; `None` with fewer than two snapshots.
    pub fn interval_over(&self, window: Duration) -> Option<Interval> {
        interval_over_in(&self.history(), window)
    }

    /// Facts about the machine, read once at build.
    pub fn system(&self) -> &SystemInfo {
        &self.inner.system
    }

    /// The process this sampler observes.
    pub fn target(&self) -> Target {
        self.inner.config.target
    }

    /// The configured background interval.
    pub fn interval(&self) -> Duration {
        self.inner.config.interval
    }

    /// The configuration the sampler was built with.
    pub fn config(&self) -> &SamplerConfig {
        &self.inner.config
    }

    /// The process this sampler observes, as identified when it was built.
    pub fn target_identity(&self) -> &TargetIdentity {
        &self.inner.identity
    }

    /// Counters about the sampler itself, including its own CPU overhead.
    pub fn stats(&self) -> SamplerStats {
        let i = &self.inner;
        let samples = i.samples_taken.load(Ordering::Acquire);
        let cpu = i.sampler_cpu_time_ns.load(Ordering::Relaxed);
        let first = i.first_monotonic_ns.load(Ordering::Relaxed);
        let elapsed = match first {
            0 => 0,
            f => clock::monotonic_ns().saturating_sub(f - 1),
        };
        let (history_len, history_bytes) = {
            let h = lock(&i.history);
            (h.len(), h.bytes())
        };
        SamplerStats {
            total_samples: samples,
            total_sampler_cpu_time_ns: cpu,
            sampler_cpu_percent: percent(cpu, elapsed),
            mean_sample_cost_ns: cpu.checked_div(samples).unwrap_or(0),
            history_len: u32::try_from(history_len).unwrap_or(u32::MAX),
            bytes_per_stored_thread_sample: BYTES_PER_STORED_THREAD_SAMPLE as u32,
            history_bytes: history_bytes as u64,
            running: i.run.load(Ordering::Acquire) != 0,
            last_error: lock(&i.last_error).clone(),
        }
    }

    /// Findings over the history with the configured thresholds, most
    /// severe first. The sampler's own thread is never a subject.
    pub fn findings(&self) -> Vec<Finding> {
        self.diagnose(&self.inner.config.thresholds)
    }

    /// Findings with other thresholds.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when a threshold is out of range.
    pub fn findings_with(&self, thresholds: &Thresholds) -> Result<Vec<Finding>> {
        thresholds.validate()?;
        Ok(self.diagnose(thresholds))
    }

    /// The configured thresholds.
    pub fn thresholds(&self) -> &Thresholds {
        &self.inner.config.thresholds
    }

    fn diagnose(&self, t: &Thresholds) -> Vec<Finding> {
        self.diagnose_in(&self.history(), t)
    }

    fn diagnose_in(&self, h: &History, t: &Thresholds) -> Vec<Finding> {
        let tid = self.inner.sampler_tid.load(Ordering::Relaxed);
        diagnose::diagnose(h, t, &self.inner.system, (tid != 0).then_some(tid))
    }

    /// Everything a report needs: machine, sampler cost, the interval over
    /// the findings window, and the findings. Serializes to JSON with serde.
    ///
    /// Everything in it comes from one copy of the history, taken under
    /// the lock; the work is done after releasing it.
    pub fn report(&self) -> Report {
        let h = self.history();
        let interval = interval_over_in(&h, self.inner.config.thresholds.window);
        let warnings = interval
            .as_ref()
            .map(|i| warnings_in(&h, i.from_seq, i.to_seq))
            .unwrap_or_default();
        Report {
            schema_version: REPORT_SCHEMA_VERSION,
            library_version: env!("CARGO_PKG_VERSION").to_string(),
            target: self.inner.identity.clone(),
            config: self.inner.config.clone(),
            unix_time_ns: clock::unix_ns(),
            system: self.inner.system.clone(),
            stats: self.stats(),
            findings: self.diagnose_in(&h, &self.inner.config.thresholds),
            interval,
            warnings,
        }
    }
}

impl Inner {
    /// Takes one snapshot into history; returns its sequence number.
    fn take(&self) -> Result<u64> {
        self.take_stored().map(|s| s.header.seq)
    }

    /// Takes one snapshot into history and returns it as a record.
    fn take_snapshot(&self) -> Result<Snapshot> {
        self.take_stored().map(|s| s.to_snapshot())
    }

    /// Takes one snapshot, stores it and returns the stored form.
    fn take_stored(&self) -> Result<Arc<Stored>> {
        let cpu_before = clock::current_thread_cpu_ns();
        let mut st = lock(&self.state);
        let st = &mut *st;
        let seq = self.samples_taken.load(Ordering::Relaxed);
        let request = SampleRequest {
            switch_split: seq.is_multiple_of(u64::from(self.config.switch_split_every)),
        };
        let monotonic_ns = clock::monotonic_ns();
        let unix_time_ns = clock::unix_ns();
        let mut warnings = Vec::new();
        let process = match st.backend.sample(request, &mut st.scratch, &mut warnings) {
            Ok(p) => p,
            Err(e) => {
                if matches!(e, Error::NoSuchProcess { .. }) {
                    // The target is gone: detach the kernel source now
                    // (programs, maps, links), not when the sampler is dropped.
                    st.kernel = None;
                }
                return Err(e);
            }
        };
        let kernel = match st.kernel.as_mut().map(|k| k.read()) {
            None => None,
            Some(Ok(sample)) => {
                let dropped = sample
                    .total_dropped_events
                    .saturating_sub(st.dropped_events);
                st.dropped_events = sample.total_dropped_events;
                if dropped > 0 {
                    warnings.push(SampleWarning::KernelEventsDropped {
                        dropped_events: dropped,
                    });
                }
                Some(sample)
            }
            Some(Err(e)) => {
                if matches!(e, KernelSourceError::TargetExited { .. }) {
                    st.kernel = None;
                }
                warnings.push(SampleWarning::KernelSourceFailed {
                    message: e.to_string(),
                });
                None
            }
        };
        let (loops, sleeps) = self.probes.collect();
        let threads = std::mem::take(&mut st.scratch);
        let header = Header {
            seq,
            monotonic_ns,
            unix_time_ns,
            process,
            switch_split_read: request.switch_split,
            sampler_cost_ns: 0,
            total_sampler_cpu_time_ns: 0,
            warnings,
        };
        // Packing is part of the sample's cost; the cost is known only
        // after it, so it is written into the header last.
        let mut stored = Stored::new(
            &mut st.encoders,
            header,
            threads,
            &loops,
            &sleeps,
            kernel.as_ref(),
        );
        let cost = clock::current_thread_cpu_ns().saturating_sub(cpu_before);
        let total = self
            .sampler_cpu_time_ns
            .load(Ordering::Relaxed)
            .saturating_add(cost);
        stored.header.sampler_cost_ns = cost;
        stored.header.total_sampler_cpu_time_ns = total;
        self.sampler_cpu_time_ns.store(total, Ordering::Relaxed);
        let _ = self.first_monotonic_ns.compare_exchange(
            0,
            monotonic_ns.saturating_add(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        let stored = Arc::new(stored);
        st.scratch = lock(&self.history).push(stored.clone());
        self.samples_taken.store(seq + 1, Ordering::Release);
        Ok(stored)
    }

    /// Marks background run `id` as finished, unless another run started since.
    fn end_run(&self, id: u64) {
        let _ = self
            .run
            .compare_exchange(id, 0, Ordering::AcqRel, Ordering::Acquire);
        let _ = self.sampler_tid.compare_exchange(
            crate::probe::current_tid(),
            0,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// The background loop: sample, then wait until the next tick or a stop.
    /// Ends on a stop or a fatal error (the target exited); either way the
    /// run is marked finished, so `stats().running` turns false and
    /// `start()` works again.
    fn run(&self, id: u64, control: &RunControl) {
        self.sampler_tid
            .store(crate::probe::current_tid(), Ordering::Relaxed);
        self.run_loop(control);
        self.end_run(id);
    }

    fn run_loop(&self, control: &RunControl) {
        let interval = crate::probe::duration_ns(self.config.interval);
        let mut next = clock::monotonic_ns();
        loop {
            if let Err(e) = self.take() {
                let fatal = matches!(e, Error::NoSuchProcess { .. });
                *lock(&self.last_error) = Some(e.to_string());
                if fatal {
                    return;
                }
            }
            // Fixed-rate ticks; if a sample overran, skip the missed ticks.
            let now = clock::monotonic_ns();
            next = next.saturating_add(interval);
            if next <= now {
                next = now.saturating_add(interval);
            }
            let mut stop = lock(&control.stop);
            loop {
                if *stop {
                    return;
                }
                let now = clock::monotonic_ns();
                if now >= next {
                    break;
                }
                stop = match control
                    .wake
                    .wait_timeout(stop, Duration::from_nanos(next - now))
                {
                    Ok((g, _)) => g,
                    Err(e) => e.into_inner().0,
                };
            }
        }
    }
}

/// Version of the [`Report`] layout, in [`Report::schema_version`]: raised
/// whenever a field of the report (or of a record inside it) is renamed,
/// removed or changes meaning, so a saved report is read with the right
/// expectations. Version 1 is the first published layout.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

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
    /// The interval over the findings window (None with fewer than two snapshots).
    pub interval: Option<Interval>,
    /// Findings, most severe first.
    pub findings: Vec<Finding>,
    /// What made the snapshots of the interval less complete than
    /// configured, each kind once; lost kernel events are summed.
    pub warnings: Vec<SampleWarning>,
}

/// The interval over `window` ending at the newest snapshot of `h`.
fn interval_over_in(h: &History, window: Duration) -> Option<Interval> {
    let to = h.latest()?;
    let since = to
        .header
        .monotonic_ns
        .saturating_sub(crate::probe::duration_ns(window));
    let from = h.first_since(since)?;
    if from.header.seq == to.header.seq {
        let n = h.len();
        return Some(between_in_history(h, h.get(n.checked_sub(2)?)?, to));
    }
    Some(between_in_history(h, from, to))
}

/// The warnings of the snapshots after `from_seq` up to `to_seq`, each once
/// (the newest of its kind), with lost kernel events summed.
fn warnings_in(h: &History, from_seq: u64, to_seq: u64) -> Vec<SampleWarning> {
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

/// Keeps background sampling running; dropping it stops the sampling thread
/// and waits for it to finish (at most one sample's duration).
#[must_use = "sampling stops when the guard is dropped"]
pub struct SamplingGuard {
    inner: Arc<Inner>,
    id: u64,
    control: Arc<RunControl>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SamplingGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SamplingGuard").finish_non_exhaustive()
    }
}

impl SamplingGuard {
    /// Stops sampling now (same as dropping the guard).
    pub fn stop(self) {}
}

impl Drop for SamplingGuard {
    fn drop(&mut self) {
        *lock(&self.control.stop) = true;
        self.control.wake.notify_all();
        if let Some(h) = self.handle.take() {
            // The sampling thread never panics; if it did, there is nothing
            // useful to propagate from a destructor.
            let _ = h.join();
        }
        self.inner.end_run(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_rejects_bad_config_with_typed_errors() {
        let field = |b: SamplerBuilder| match b.build() {
            Err(Error::InvalidConfig { field, .. }) => field,
            other => panic!("expected InvalidConfig, got {other:?}"),
        };
        assert_eq!(
            field(SamplerBuilder::new().with_interval(Duration::ZERO)),
            "interval"
        );
        assert_eq!(
            field(SamplerBuilder::new().with_interval(Duration::from_micros(10))),
            "interval"
        );
        assert_eq!(field(SamplerBuilder::new().with_history(0)), "history");
        assert_eq!(
            field(SamplerBuilder::new().with_history(MAX_HISTORY + 1)),
            "history"
        );
        assert_eq!(
            field(SamplerBuilder::new().with_switch_split_every(0)),
            "switch_split_every"
        );
        assert_eq!(
            field(SamplerBuilder::new().with_thread_name("a-name-longer-than-15")),
            "thread_name"
        );
    }

    /// A reader holds the history lock only to copy the ring: while
    /// `report()` and `snapshots()` run on a long history, the lock the
    /// sampler needs is free nearly all the time (both used to hold it for
    /// their whole run).
    #[test]
    fn report_does_not_hold_the_history_lock_while_it_works() {
        // Many threads per snapshot: the reader's work (intervals over every
        // thread) is then far larger than its copy of the ring.
        let gate = Arc::new(std::sync::Barrier::new(101));
        let parked: Vec<_> = (0..100)
            .map(|_| {
                let g = gate.clone();
                std::thread::spawn(move || {
                    g.wait();
                })
            })
            .collect();
        let s = SamplerBuilder::new().with_history(2_000).build().unwrap();
        for _ in 0..2_000 {
            s.sample().unwrap();
        }
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (s, done) = (s.clone(), done.clone());
            std::thread::spawn(move || {
                for _ in 0..3 {
                    std::hint::black_box(s.report());
                    std::hint::black_box(s.snapshots());
                }
                done.store(true, Ordering::Release);
            })
        };
        let (mut tries, mut free) = (0u64, 0u64);
        while !done.load(Ordering::Acquire) {
            tries += 1;
            free += u64::from(s.inner.history.try_lock().is_ok());
            std::thread::yield_now();
        }
        reader.join().unwrap();
        gate.wait();
        for p in parked {
            p.join().unwrap();
        }
        assert!(
            tries >= 10,
            "the reports ended before the check began ({tries} tries)"
        );
        assert!(
            free * 4 >= tries * 3,
            "history lock free in only {free} of {tries} tries while report() ran"
        );
    }
}
