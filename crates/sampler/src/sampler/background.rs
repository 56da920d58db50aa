//! Background sampling: one thread per run, ticking at the configured
//! interval until its [`SamplingGuard`] is dropped or the target exits.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Inner, Sampler};
use crate::error::{Error, Result};
use crate::platform::clock;
use crate::sync::lock;

/// Stops one background run: its guard sets `stop`, its thread waits on `wake`.
#[derive(Default)]
pub(super) struct RunControl {
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Sampler {
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
}

impl Inner {
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
        // Waiters of this run learn that it ended.
        self.notify_stored();
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
                let fatal = e.target_gone();
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
