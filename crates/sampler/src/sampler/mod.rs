//! The sampler: on-demand and background sampling into history, readers,
//! findings and reports. `builder` configures it, `background` runs it on
//! its own thread, `report` holds the records about it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::diagnose::{self, Finding, Thresholds};
#[cfg(any(doc, test))]
use crate::error::Error;
use crate::error::Result;
use crate::history::{BYTES_PER_STORED_THREAD_SAMPLE, Encoders, Header, History, Stored};
use crate::interval::{
    Interval, SharedEnd, between_in_history, between_in_history_reusing, percent,
};
use crate::kernel::{KernelSource, KernelSourceError};
use crate::model::{
    LoopKind, SampleWarning, Snapshot, SystemInfo, Target, TargetIdentity, ThreadRow,
};
use crate::platform::{self, Backend, SampleRequest, clock, ticks};
use crate::probe::{LoopProbe, ProbeRegistry, SleepProbe};
use crate::sync::lock;

mod background;
mod builder;
mod readings;
mod report;

pub use crate::config::{
    DEFAULT_HISTORY, DEFAULT_INTERVAL, DEFAULT_SWITCH_SPLIT_EVERY, MAX_HISTORY, MIN_INTERVAL,
    SamplerConfig,
};
pub use background::SamplingGuard;
pub use builder::SamplerBuilder;
use readings::{Diagnosis, Key, Readings, ReportBody};
pub use report::{REPORT_SCHEMA_VERSION, Report, SamplerStats};
use report::{folded, interval_over_in, interval_over_sharing, warnings_in};

/// What only the sampling path touches (one sample at a time).
struct State {
    backend: Box<dyn Backend>,
    kernel: Option<Box<dyn KernelSource>>,
    scratch: Vec<ThreadRow>,
    encoders: Encoders,
    /// The kernel source's `dropped_events` at the previous snapshot.
    dropped_events: u64,
    /// Whether the previous snapshot read the kernel source whole (no
    /// events lost) and then the backend: only then do the threads the
    /// source calls quiet keep what that backend read found.
    kernel_then_backend: bool,
    /// Snapshots the history held when storing the previous snapshot
    /// dropped one for its byte budget; `None` when it did not.
    held_over_budget: Option<u32>,
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
    /// Signalled after each stored snapshot and when a background run ends:
    /// the one "sample stored" notification every consumer waits on.
    stored_lock: Mutex<()>,
    stored: Condvar,
    /// Findings and the report body of the newest snapshot, shared by
    /// every reader until a newer one is stored.
    readings: Readings,
    /// Severities of the last findings of the configured thresholds, for
    /// their hysteresis.
    severities: Mutex<diagnose::SeverityMemory>,
    /// Thread records of a diagnosis's intervals no longer needed, written
    /// over by the next diagnosis's (at most two intervals' worth).
    spare_records: Mutex<Vec<Vec<crate::interval::ThreadInterval>>>,
    /// The previous read of who competes for CPU, which the next one
    /// differences against.
    competition: Mutex<platform::competition::CompetitionProbe>,
}

/// Whether a computed interval is kept for the other followers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// When it is the interval between the two newest snapshots.
    Newest,
    /// Never: the caller takes it whole (an owned copy), and keeping it
    /// would cost that caller a copy.
    No,
}

/// What [`Sampler::wait_for_sample`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SampleWait {
    /// A snapshot newer than the one asked about is in history; `seq` is
    /// the newest one's (snapshots may have been stored in between).
    Stored {
        /// Sequence number of the newest snapshot.
        seq: u64,
    },
    /// The timeout passed without a newer snapshot.
    TimedOut,
    /// The background run in progress when the wait began ended (its guard
    /// was dropped, or the target exited) without a newer snapshot.
    Stopped,
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
    /// [`Error::NoSuchProcess`] once the target has exited ([`Error::PidReused`]
    /// when its PID now names another process); [`Error::Unreadable`]
    /// when the process-level `/proc` files cannot be read.
    pub fn sample_now(&self) -> Result<Snapshot> {
        self.inner.take_snapshot()
    }

    /// Blocks until a snapshot newer than `after_seq` is stored (any
    /// snapshot when `None`), the timeout passes, or the background run in
    /// progress ends. The one clock of every consumer (listeners, streams,
    /// the CLI): they wake when a snapshot is stored, never on a schedule of
    /// their own.
    pub fn wait_for_sample(&self, after_seq: Option<u64>, timeout: Duration) -> SampleWait {
        let i = &self.inner;
        // `samples_taken` is the newest seq + 1.
        let newer = |taken: u64| match after_seq {
            None => taken > 0,
            Some(a) => taken > a.saturating_add(1),
        };
        let deadline = clock::monotonic_ns().saturating_add(clock::duration_ns(timeout));
        let mut g = lock(&i.stored_lock);
        let run = i.run.load(Ordering::Acquire);
        loop {
            let taken = i.samples_taken.load(Ordering::Acquire);
            if newer(taken) {
                return SampleWait::Stored { seq: taken - 1 };
            }
            if run != 0 && i.run.load(Ordering::Acquire) != run {
                return SampleWait::Stopped;
            }
            let now = clock::monotonic_ns();
            if now >= deadline {
                return SampleWait::TimedOut;
            }
            g = match i
                .stored
                .wait_timeout(g, Duration::from_nanos(deadline - now))
            {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Runs `work` on the calling thread and counts the CPU time it used
    /// as the sampler's own overhead (in [`SamplerStats`] and each
    /// interval's `sampler_cpu_percent`). For work done on the sampler's
    /// behalf outside it, such as a listener dispatcher's bookkeeping;
    /// the sampler's own readers (intervals, findings, reports) count
    /// themselves.
    ///
    /// Taking a reading another reader already computed and kept (the
    /// shared interval, the findings) is not timed: it is a lock and a
    /// reference count, under a microsecond, where timing it would read
    /// the thread's CPU clock twice (about 0.4 µs each on the machine
    /// this was measured on: BENCHMARKS.md, "Perfetto trace writer").
    pub fn account<T>(&self, work: impl FnOnce() -> T) -> T {
        let before = clock::current_thread_cpu_ns();
        let out = work();
        self.inner
            .add_overhead(clock::current_thread_cpu_ns().saturating_sub(before));
        out
    }

    /// A new [`LoopProbe`] reported in this sampler's snapshots.
    ///
    /// # Errors
    /// [`Error::TooManyProbes`] when [`crate::probe::MAX_PROBES`] probes are
    /// alive; [`Error::ProbeNameTooLong`] for a name over
    /// [`crate::probe::MAX_PROBE_NAME_BYTES`].
    pub fn loop_probe(&self, name: &str) -> Result<LoopProbe> {
        self.inner.probes.loop_probe(name, LoopKind::Application)
    }

    /// A new [`LoopProbe`] of a loop of `kind` (the tokio integration's
    /// workers), as [`Sampler::loop_probe`].
    #[cfg(feature = "tokio")]
    pub(crate) fn loop_probe_of_kind(&self, name: &str, kind: LoopKind) -> Result<LoopProbe> {
        self.inner.probes.loop_probe(name, kind)
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
    ///
    /// When another follower of the snapshots has computed it
    /// ([`Sampler::latest_interval_shared`]), a copy of that one (a copy
    /// costs about 40% of computing it); else computed now and not kept,
    /// since keeping it would cost this call a copy. Followers that share
    /// it call [`Sampler::latest_interval_shared`].
    pub fn latest_interval(&self) -> Option<Interval> {
        self.account(|| {
            let to = self.newest_key()?.seq;
            self.between_shared(to.checked_sub(1)?, to, Keep::No)
        })
        .map(Arc::unwrap_or_clone)
    }

    /// [`Sampler::latest_interval`] without a copy: the interval the
    /// sampler keeps for every consumer that follows each snapshot (a
    /// trace writer, a metrics exporter, a listener), computed by the
    /// first of them to ask and kept until a reader computes the next
    /// pair's. Two readers that ask at the same instant may both compute
    /// it; they get equal intervals.
    pub fn latest_interval_shared(&self) -> Option<Arc<Interval>> {
        let to = self.newest_key()?.seq;
        self.interval_between_shared(to.checked_sub(1)?, to)
    }

    /// The interval from the snapshot taken nearest to `window` before the
    /// newest one (of two equally near, the later) to the newest one;
    /// `None` with fewer than two snapshots.
    pub fn interval_over(&self, window: Duration) -> Option<Interval> {
        self.account(|| interval_over_in(&self.history(), window))
    }

    /// The interval from snapshot `from_seq` to snapshot `to_seq`, both
    /// still in history (`from_seq < to_seq`); `None` otherwise. For
    /// consumers that add up consecutive intervals (an exporter's
    /// counters, a recording), so that no stored snapshot is skipped.
    ///
    /// The interval between the two newest snapshots is served from the
    /// one the sampler keeps for every follower when there is one, as by
    /// [`Sampler::latest_interval`] (a copy, and none is kept by this
    /// call); [`Sampler::interval_between_shared`] shares it.
    pub fn interval_between(&self, from_seq: u64, to_seq: u64) -> Option<Interval> {
        if from_seq >= to_seq {
            return None;
        }
        self.account(|| self.between_shared(from_seq, to_seq, Keep::No))
            .map(Arc::unwrap_or_clone)
    }

    /// [`Sampler::interval_between`] without a copy: when `to_seq` is the
    /// newest snapshot and `from_seq` the one before, the interval every
    /// follower of the snapshots shares ([`Sampler::latest_interval_shared`]),
    /// computed here if no follower has yet; any other pair is computed
    /// at each call.
    pub fn interval_between_shared(&self, from_seq: u64, to_seq: u64) -> Option<Arc<Interval>> {
        if from_seq >= to_seq {
            return None;
        }
        if let Some(kept) = self.inner.readings.interval(from_seq, to_seq) {
            return Some(kept); // kept: not timed (see `account`)
        }
        self.account(|| self.between_shared(from_seq, to_seq, Keep::Newest))
    }

    /// The interval `from_seq`..`to_seq`: the one kept, or computed now
    /// (and kept, with [`Keep::Newest`], when it is the newest pair).
    fn between_shared(&self, from_seq: u64, to_seq: u64, keep: Keep) -> Option<Arc<Interval>> {
        let readings = &self.inner.readings;
        if let Some(kept) = readings.interval(from_seq, to_seq) {
            return Some(kept);
        }
        let h = self.history();
        let from = h.iter().find(|s| s.header.seq == from_seq)?;
        let to = h.iter().rev().find(|s| s.header.seq == to_seq)?;
        let interval = match keep {
            // The interval it replaces is written over, not freed.
            Keep::Newest => {
                let spare = readings.take_spare(to_seq);
                between_in_history_reusing(&h, from, to, spare)
            }
            Keep::No => between_in_history(&h, from, to),
        };
        let interval = Arc::new(interval);
        if let (Keep::Newest, Some(newest)) = (keep, h.latest()) {
            readings.keep_interval(&interval, newest.header.seq);
        }
        Some(interval)
    }

    /// Facts about the machine, read once at build.
    pub fn system(&self) -> &SystemInfo {
        &self.inner.system
    }

    /// The process this sampler observes.
    pub fn target(&self) -> Target {
        self.inner.config.target
    }

    /// The sampling period, [`SamplerConfig::interval`](crate::SamplerConfig::interval).
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

    /// The target's identity with its name as it is now: a target that
    /// called `execve` has a new name (same PID, same start time). A PID
    /// now naming another process (another start time) keeps the old name.
    fn current_identity(&self) -> TargetIdentity {
        let built = &self.inner.identity;
        let mut id = built.clone();
        let now = platform::identity(self.inner.config.target);
        if built.start_time_unix_ns.is_some()
            && now.start_time_unix_ns == built.start_time_unix_ns
            && !now.name.is_empty()
        {
            id.name = now.name;
        }
        id
    }

    /// Whether background sampling is running (as [`SamplerStats::running`],
    /// without reading the other counters).
    pub fn is_running(&self) -> bool {
        self.inner.run.load(Ordering::Acquire) != 0
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
        let (history_len, history_bytes, budget, for_bytes, for_count) = {
            let h = lock(&i.history);
            (
                h.len(),
                h.bytes(),
                h.budget(),
                h.dropped_for_bytes(),
                h.dropped_for_count(),
            )
        };
        SamplerStats {
            total_samples: samples,
            total_sampler_cpu_time_ns: cpu,
            sampler_cpu_percent: percent(cpu, elapsed),
            mean_sample_cost_ns: cpu.checked_div(samples).unwrap_or(0),
            history_len: u32::try_from(history_len).unwrap_or(u32::MAX),
            bytes_per_stored_thread_sample: BYTES_PER_STORED_THREAD_SAMPLE as u32,
            history_bytes: history_bytes as u64,
            history_budget_bytes: budget as u64,
            total_history_dropped_for_bytes: for_bytes,
            total_history_dropped_for_count: for_count,
            running: i.run.load(Ordering::Acquire) != 0,
            last_error: lock(&i.last_error).clone(),
        }
    }

    /// Findings over the history with the configured thresholds, most
    /// severe first. The sampler's own thread is never a subject.
    ///
    /// Computed once per stored snapshot: every later call (and
    /// [`Sampler::report`]) until the next snapshot gets a copy.
    pub fn findings(&self) -> Vec<Finding> {
        self.account(|| self.diagnosis().findings.clone())
    }

    /// [`Sampler::findings`] without a copy: calls `f` with the findings
    /// kept for the newest snapshot (computed now if no reader has yet)
    /// and returns what it returns. For followers of every snapshot (a
    /// trace writer, an exporter) that only read them; the time in `f` is
    /// the caller's.
    pub fn with_findings<R>(&self, f: impl FnOnce(&[Finding]) -> R) -> R {
        // Kept: not timed (see `account`).
        let diagnosis = self
            .kept_diagnosis()
            .unwrap_or_else(|| self.account(|| self.diagnosis()));
        f(&diagnosis.findings)
    }

    /// Findings with the configured thresholds and the interval over the
    /// report's window they were computed with: those kept for the newest
    /// snapshot, or computed now and kept.
    fn diagnosis(&self) -> Arc<Diagnosis> {
        if let Some(kept) = self.kept_diagnosis() {
            return kept;
        }
        let diagnosis = Arc::new(self.diagnose_history(&self.history()));
        if let Some(k) = diagnosis.key {
            self.inner.readings.keep_diagnosis(k, diagnosis.clone());
        }
        diagnosis
    }

    /// The findings kept for the newest snapshot, if a reader computed
    /// them.
    fn kept_diagnosis(&self) -> Option<Arc<Diagnosis>> {
        self.newest_key()
            .and_then(|k| self.inner.readings.diagnosis(k))
    }

    /// Findings over `h` with the configured thresholds, with the interval
    /// over the report's window and its warnings. The rate rules' window
    /// is the report's: it is computed here and handed to the rules.
    fn diagnose_history(&self, h: &History) -> Diagnosis {
        // The report's interval and the rules' all end at the newest
        // snapshot: decoded once for all of them, and dropped after. Their
        // records are written over those of the last diagnosis's.
        let spare = std::mem::take(&mut *lock(&self.inner.spare_records));
        let mut shared = SharedEnd::with_spare(spare);
        let diagnosis = self.diagnose_history_sharing(h, &mut shared);
        *lock(&self.inner.spare_records) = shared.into_spare();
        diagnosis
    }

    /// Gives the records of a diagnosis's window back for the next
    /// diagnosis, when no reader holds the diagnosis any more.
    fn recycle_window(&self, diagnosis: Arc<Diagnosis>) {
        if let Some(window) = Arc::into_inner(diagnosis).and_then(|d| d.window) {
            let mut spare =
                SharedEnd::with_spare(std::mem::take(&mut *lock(&self.inner.spare_records)));
            spare.give_back(window.threads);
            *lock(&self.inner.spare_records) = spare.into_spare();
        }
    }

    /// [`Sampler::diagnose_history`], its intervals' newest end decoded
    /// with `shared`.
    fn diagnose_history_sharing(&self, h: &History, shared: &mut SharedEnd) -> Diagnosis {
        let key = self.key(h);
        let t = &self.inner.config.thresholds;
        let window = interval_over_sharing(h, t.window, shared);
        let tid = key.map_or(0, |k| k.exclude_tid);
        // The configured thresholds' findings carry hysteresis from one
        // stored snapshot's diagnosis to the next.
        let mut memory = lock(&self.inner.severities);
        let mut findings = self.diagnose_in(h, t, tid, window.as_ref(), &mut memory, shared);
        drop(memory);
        // Who competes is read from the machine, so only when contention
        // from outside the process was found, once per stored snapshot
        // (this diagnosis is kept for every reader of it).
        if findings.iter().any(diagnose::competition_is_outside)
            && let Some(c) = lock(&self.inner.competition).probe(self.inner.identity.pid)
        {
            diagnose::name_competitors(&mut findings, &c);
        }
        let warnings = window
            .as_ref()
            .map(|i| warnings_in(h, i.from_seq, i.to_seq))
            .unwrap_or_default();
        Diagnosis {
            key,
            findings,
            window,
            warnings,
        }
    }

    /// Findings with other thresholds (computed on every call, without
    /// the hysteresis of the configured thresholds' findings: no earlier
    /// report of these thresholds is known).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when a threshold is out of range.
    pub fn findings_with(&self, thresholds: &Thresholds) -> Result<Vec<Finding>> {
        thresholds.validate()?;
        Ok(self.account(|| {
            let tid = self.inner.sampler_tid.load(Ordering::Relaxed);
            let mut memory = diagnose::SeverityMemory::default();
            let mut shared = SharedEnd::default();
            let h = self.history();
            self.diagnose_in(&h, thresholds, tid, None, &mut memory, &mut shared)
        }))
    }

    /// The configured thresholds.
    pub fn thresholds(&self) -> &Thresholds {
        &self.inner.config.thresholds
    }

    /// Which history is stored now, for the shared readings, without
    /// copying the ring (None when empty).
    fn newest_key(&self) -> Option<Key> {
        self.key(&lock(&self.inner.history))
    }

    /// Which history `h` is, for the shared readings (None when empty).
    fn key(&self, h: &History) -> Option<Key> {
        Some(Key {
            seq: h.latest()?.header.seq,
            exclude_tid: self.inner.sampler_tid.load(Ordering::Relaxed),
        })
    }

    /// Findings over `h`, leaving out thread `exclude_tid` (0: none);
    /// `known` is an interval of `h` already computed; `shared` holds its
    /// newest snapshot decoded, when an interval of it was computed.
    fn diagnose_in(
        &self,
        h: &History,
        t: &Thresholds,
        exclude_tid: u64,
        known: Option<&Interval>,
        memory: &mut diagnose::SeverityMemory,
        shared: &mut SharedEnd,
    ) -> Vec<Finding> {
        let exclude = (exclude_tid != 0).then_some(exclude_tid);
        diagnose::diagnose(h, t, &self.inner.system, exclude, known, memory, shared)
    }

    /// Everything a report needs: machine, sampler cost, the interval over
    /// the findings window, and the findings. Serializes to JSON with serde.
    ///
    /// Everything in it comes from one copy of the history, taken under
    /// the lock; the work is done after releasing it. What depends on the
    /// history only (interval, findings, groups, warnings) is computed once
    /// per stored snapshot and shared with [`Sampler::findings`]; `stats`
    /// and `unix_time_ns` are read at each call.
    pub fn report(&self) -> Report {
        self.account(|| self.report_uncounted())
    }

    fn report_uncounted(&self) -> Report {
        let readings = &self.inner.readings;
        let body = match self.newest_key().and_then(|k| readings.body(k)) {
            Some(kept) => ReportBody::clone(&kept),
            None => {
                let diagnosis = self.diagnosis();
                let body = self.report_body(&diagnosis);
                if let Some(k) = diagnosis.key {
                    readings.keep_body(k, Arc::new(body.clone()));
                }
                // The body holds what a report needs of the window.
                self.recycle_window(diagnosis);
                body
            }
        };
        Report {
            schema_version: REPORT_SCHEMA_VERSION,
            library_version: env!("CARGO_PKG_VERSION").to_string(),
            target: self.current_identity(),
            config: self.inner.config.clone(),
            unix_time_ns: clock::unix_ns(),
            system: self.inner.system.clone(),
            stats: self.stats(),
            findings: body.findings,
            interval: body.interval,
            thread_groups: body.thread_groups,
            threads_folded: body.threads_folded,
            warnings: body.warnings,
        }
    }

    /// What a report says about the history a diagnosis came from: the
    /// interval over the findings window with at most `report_threads`
    /// threads listed, its warnings, the findings and the thread groups.
    fn report_body(&self, diagnosis: &Diagnosis) -> ReportBody {
        let findings = diagnosis.findings.clone();
        let keep = usize::try_from(self.inner.config.report_threads).unwrap_or(usize::MAX);
        let (interval, thread_groups, threads_folded) = match &diagnosis.window {
            Some(i) => {
                let (i, groups, folded) = folded(i, &findings, keep);
                (Some(i), groups, folded)
            }
            None => (None, Vec::new(), 0),
        };
        ReportBody {
            interval,
            thread_groups,
            threads_folded,
            findings,
            warnings: diagnosis.warnings.clone(),
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
        let switch_split = seq.is_multiple_of(u64::from(self.config.switch_split_every));
        let monotonic_ns = clock::monotonic_ns();
        let unix_time_ns = clock::unix_ns();
        // The loop probes' counter clock rides on the samples (a few reads).
        ticks::calibrate();
        let mut warnings = Vec::new();
        // The kernel source first: the threads it saw blocked since its
        // previous read (which came before the previous `/proc` read) keep
        // the `/proc` counters that read found, and are not read again.
        let mut kernel_warnings = Vec::new();
        let kernel = match st.kernel.as_mut().map(|k| k.read()) {
            None => None,
            Some(Ok(sample)) => {
                let dropped = sample
                    .total_dropped_events
                    .saturating_sub(st.dropped_events);
                st.dropped_events = sample.total_dropped_events;
                if dropped > 0 {
                    kernel_warnings.push(SampleWarning::KernelEventsDropped {
                        dropped_events: dropped,
                    });
                }
                Some((sample, dropped))
            }
            Some(Err(e)) => {
                if matches!(e, KernelSourceError::TargetExited { .. }) {
                    st.kernel = None;
                }
                kernel_warnings.push(SampleWarning::KernelSourceFailed {
                    message: e.to_string(),
                });
                None
            }
        };
        // Only from a healthy read: one that lost events may have missed
        // a thread's switch or wake.
        let healthy = matches!(kernel, Some((_, 0)));
        let paired = std::mem::replace(&mut st.kernel_then_backend, false);
        let quiet = match &st.kernel {
            Some(k) if healthy && paired => k.quiet_threads(),
            _ => &[],
        };
        let request = SampleRequest {
            switch_split,
            quiet,
        };
        let process = match st.backend.sample(request, &mut st.scratch, &mut warnings) {
            Ok(p) => p,
            Err(e) => {
                if e.target_gone() {
                    // The target is gone: detach the kernel source now
                    // (programs, maps, links), not when the sampler is dropped.
                    st.kernel = None;
                }
                return Err(e);
            }
        };
        st.kernel_then_backend = healthy;
        warnings.append(&mut kernel_warnings);
        let kernel = kernel.map(|(sample, _)| sample);
        if let Some(held) = st.held_over_budget {
            warnings.push(SampleWarning::HistoryOverBudget {
                held_snapshots: held,
                configured_snapshots: self.config.history,
                budget_bytes: self.config.history_budget_bytes,
            });
        }
        let (loops, sleeps) = self.probes.collect();
        let threads = std::mem::take(&mut st.scratch);
        let header = Header {
            seq,
            monotonic_ns,
            unix_time_ns,
            process,
            switch_split_read: switch_split,
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
        // Stored packed: the source may write its next read into it.
        if let (Some(source), Some(sample)) = (st.kernel.as_mut(), kernel) {
            source.recycle(sample);
        }
        let cost = clock::current_thread_cpu_ns().saturating_sub(cpu_before);
        let total = self.add_overhead(cost);
        stored.header.sampler_cost_ns = cost;
        stored.header.total_sampler_cpu_time_ns = total;
        let _ = self.first_monotonic_ns.compare_exchange(
            0,
            monotonic_ns.saturating_add(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        let stored = Arc::new(stored);
        {
            let mut history = lock(&self.history);
            let dropped_before = history.dropped_for_bytes();
            st.scratch = history.push(stored.clone());
            st.held_over_budget = (history.dropped_for_bytes() > dropped_before)
                .then(|| u32::try_from(history.len()).unwrap_or(u32::MAX));
        }
        self.samples_taken.store(seq + 1, Ordering::Release);
        self.notify_stored();
        Ok(stored)
    }

    /// Adds CPU time to the sampler's overhead; returns the new total, in ns.
    fn add_overhead(&self, cpu_ns: u64) -> u64 {
        self.sampler_cpu_time_ns
            .fetch_add(cpu_ns, Ordering::Relaxed)
            .saturating_add(cpu_ns)
    }

    /// Wakes every [`Sampler::wait_for_sample`]. Taking the lock orders
    /// this after a waiter's check, so no wakeup is lost.
    fn notify_stored(&self) {
        let _g = lock(&self.stored_lock);
        self.stored.notify_all();
    }
}

#[cfg(test)]
mod tests;
