//! tokio integration (feature `tokio`, stable tokio, no `tokio_unstable`).
//!
//! - [`instrument`] makes every worker of a runtime a loop: a park is a wait,
//!   an unpark a wakeup, so wakeups/s and parked vs busy time of each worker
//!   appear in snapshots and findings like any [`LoopProbe`].
//!   [`instrument_with`] does the same and runs the application's own
//!   thread hooks ([`WorkerHooks`]) too, since tokio keeps one hook of each
//!   kind per builder (a later `on_thread_park` replaces an earlier one).
//! - Timer-driven wakeups of workers (a 1 ms `tokio::time::interval`) are
//!   found as `periodic_wakeups` of the worker thread, from its wakes
//!   (voluntary switches, or the kernel view's wakes): tokio's stable hooks
//!   do not say whether a park ended on the timer, so the worker's loop
//!   probe does not claim timeouts it cannot see.
//! - A task that never waits (a loop on `yield_now`) keeps one worker from
//!   ever parking while the runtime wakes another thousands of times a
//!   second: `busy_poller` names the worker that never waits, from the
//!   workers' probes and threads (a worker that never parked has no probe;
//!   it is found by its thread name).
//! - [`runtime_stats`] reads tokio's stable runtime metrics: per-worker
//!   parks and busy time; polls, steals and schedule counts, and which
//!   thread a worker is, need `tokio_unstable` and are not read.
//! - [`watch`] yields a [`Report`] after each stored snapshot.

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::runtime::{Builder, Handle};
use tokio::sync::mpsc;

use crate::model::LoopKind;
use crate::probe::LoopProbe;
use crate::probe::duration_ns;
use crate::sampler::{Report, SampleWait, Sampler};

thread_local! {
    /// The probe of the runtime worker running on this thread, created at its first park.
    static WORKER_PROBE: RefCell<Option<LoopProbe>> = const { RefCell::new(None) };
}

/// Instruments `builder` so each worker thread reports through a loop probe
/// named `probe_name` of `sampler`. Call before `build()`.
///
/// tokio does not say how many tasks were ready at an unpark, so each
/// wakeup counts as one event: idle-wakeup ratios of workers stay 0, while
/// wakeups/s and utilization (busy vs parked time) are exact. tokio also
/// wakes a parked worker and parks it again without calling the unpark hook
/// when it finds nothing to do; the probe does not see those, but
/// [`RuntimeStats::worker_park_unparks`] counts them: half of it minus the
/// probe's wakeups is the workers' wakeups for nothing.
///
/// tokio keeps one park, one unpark and one stop hook per builder: hooks
/// the application set on `builder` before are replaced, and hooks it
/// sets after replace these. To keep its own, pass them to
/// [`instrument_with`].
pub fn instrument<'b>(
    builder: &'b mut Builder,
    sampler: &Sampler,
    probe_name: &str,
) -> &'b mut Builder {
    instrument_with(builder, sampler, probe_name, WorkerHooks::default())
}

/// A hook of a worker thread, shared by every worker.
type Hook = Arc<dyn Fn() + Send + Sync + 'static>;

/// The application's own worker-thread hooks, run by [`instrument_with`]
/// next to wakemeter's: on park after the probe starts its wait, on unpark
/// before the probe ends it (so the probe's busy time includes neither),
/// on stop before the probe is dropped.
#[derive(Clone, Default)]
pub struct WorkerHooks {
    on_park: Option<Hook>,
    on_unpark: Option<Hook>,
    on_stop: Option<Hook>,
}

impl std::fmt::Debug for WorkerHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerHooks")
            .field("on_park", &self.on_park.is_some())
            .field("on_unpark", &self.on_unpark.is_some())
            .field("on_stop", &self.on_stop.is_some())
            .finish()
    }
}

impl WorkerHooks {
    /// No hooks of the application's.
    pub fn new() -> Self {
        WorkerHooks::default()
    }

    /// What tokio's `Builder::on_thread_park` would run.
    #[must_use]
    pub fn with_on_park(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_park = Some(Arc::new(f));
        self
    }

    /// What tokio's `Builder::on_thread_unpark` would run.
    #[must_use]
    pub fn with_on_unpark(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_unpark = Some(Arc::new(f));
        self
    }

    /// What tokio's `Builder::on_thread_stop` would run.
    #[must_use]
    pub fn with_on_stop(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_stop = Some(Arc::new(f));
        self
    }
}

/// [`instrument`], chaining the application's own worker hooks `hooks`
/// instead of replacing them: each of tokio's park, unpark and stop hooks
/// runs wakemeter's probe and the application's hook.
pub fn instrument_with<'b>(
    builder: &'b mut Builder,
    sampler: &Sampler,
    probe_name: &str,
    hooks: WorkerHooks,
) -> &'b mut Builder {
    let s = sampler.clone();
    let name = probe_name.to_string();
    let WorkerHooks {
        on_park,
        on_unpark,
        on_stop,
    } = hooks;
    builder
        .on_thread_park(move || {
            WORKER_PROBE.with(|cell| {
                let Ok(mut slot) = cell.try_borrow_mut() else {
                    return;
                };
                if slot.is_none() {
                    *slot = s.loop_probe_of_kind(&name, LoopKind::TokioWorker).ok();
                }
                if let Some(p) = slot.as_mut() {
                    p.before_wait(None);
                }
            });
            if let Some(f) = &on_park {
                f();
            }
        })
        .on_thread_unpark(move || {
            if let Some(f) = &on_unpark {
                f();
            }
            WORKER_PROBE.with(|cell| {
                if let Ok(mut slot) = cell.try_borrow_mut()
                    && let Some(p) = slot.as_mut()
                {
                    p.after_wait(1);
                }
            })
        })
        .on_thread_stop(move || {
            if let Some(f) = &on_stop {
                f();
            }
            WORKER_PROBE.with(|cell| {
                if let Ok(mut slot) = cell.try_borrow_mut() {
                    slot.take();
                }
            })
        })
}

/// tokio's stable runtime metrics at one instant (cumulative where counters).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RuntimeStats {
    /// Worker threads.
    pub workers: u32,
    /// Tasks alive in the runtime.
    pub alive_tasks: u64,
    /// Tasks waiting in the global queue.
    pub global_queue_depth: u64,
    /// Per worker: time spent busy (not parked), in nanoseconds.
    pub worker_busy_ns: Vec<u64>,
    /// Per worker: times parked.
    pub worker_parks: Vec<u64>,
    /// Per worker: park/unpark transitions.
    pub worker_park_unparks: Vec<u64>,
}

/// Reads tokio's stable runtime metrics for the runtime of `handle`.
pub fn runtime_stats(handle: &Handle) -> RuntimeStats {
    let m = handle.metrics();
    let n = m.num_workers();
    RuntimeStats {
        workers: u32::try_from(n).unwrap_or(u32::MAX),
        alive_tasks: m.num_alive_tasks() as u64,
        global_queue_depth: m.global_queue_depth() as u64,
        worker_busy_ns: (0..n)
            .map(|w| duration_ns(m.worker_total_busy_duration(w)))
            .collect(),
        worker_parks: (0..n).map(|w| m.worker_park_count(w)).collect(),
        worker_park_unparks: (0..n).map(|w| m.worker_park_unpark_count(w)).collect(),
    }
}

/// A stream of reports, one per period; see [`watch`].
#[derive(Debug)]
pub struct ReportStream {
    rx: mpsc::Receiver<Report>,
    task: tokio::task::JoinHandle<()>,
}

impl ReportStream {
    /// The next report; `None` once the sampler's target is gone.
    pub async fn next(&mut self) -> Option<Report> {
        self.rx.recv().await
    }
}

impl futures_core::Stream for ReportStream {
    type Item = Report;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Report>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for ReportStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A [`Report`] after each snapshot the sampler stores, as a stream. It
/// has no clock of its own: it starts the sampler's background sampling if
/// it is not running (and stops it when the stream is dropped), then waits
/// on the sampler's "sample stored" notification (on tokio's blocking pool,
/// so a worker never blocks), so reports come at the sampler's interval.
/// Making a report counts as sampler overhead. A slow consumer misses
/// reports (at most 8 are buffered) rather than growing memory. The stream
/// ends when background sampling ends (the target exited, or another
/// owner stopped it). Must be called from within a tokio runtime.
pub fn watch(sampler: &Sampler) -> ReportStream {
    let (tx, rx) = mpsc::channel(8);
    let s = sampler.clone();
    let task = tokio::spawn(async move {
        // Ours to stop when the stream goes; `None` when already running.
        let guard = s.start().ok();
        // A bound on one blocking wait, so a dropped stream frees its
        // blocking thread soon.
        let timeout = s.interval().saturating_mul(2).min(Duration::from_secs(1));
        let mut last = None;
        loop {
            let s2 = s.clone();
            let waited = tokio::task::spawn_blocking(move || {
                let w = s2.wait_for_sample(last, timeout);
                match w {
                    SampleWait::Stored { .. } => (w, Some(s2.report())),
                    _ => (w, None),
                }
            })
            .await;
            match waited {
                Ok((SampleWait::Stored { seq }, Some(report))) => {
                    last = Some(seq);
                    if tx.is_closed() {
                        break;
                    }
                    let _ = tx.try_send(report);
                }
                Ok((SampleWait::TimedOut, _)) if s.is_running() && !tx.is_closed() => {}
                // Stopped, the consumer went away, or the blocking pool shut down.
                _ => break,
            }
        }
        drop(guard);
    });
    ReportStream { rx, task }
}
