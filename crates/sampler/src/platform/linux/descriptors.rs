//! The descriptor budget: the sampler is a guest in the host's descriptor
//! table and keeps at most a share of it, counted for every sampler of the
//! process together.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{TaskFile, TidHasher, Tracked};

/// The share of the soft `RLIMIT_NOFILE` that the descriptors kept by all
/// samplers of the process together may hold, as a divisor: at most
/// `limit / 4` descriptors (256 under the common limit of 1024), counting
/// each sampler's process-level files (task directory, `statm`, `status`)
/// and every kept per-thread file ([`DescriptorPool`]). When a sampler's
/// threads' two files fit in what is left of the share, both are kept;
/// otherwise only `schedstat` (or `stat`) descriptors are, since they are
/// read on every sample while `status` is read on one sample in N and only
/// for threads that switched.
///
/// Why: a kept descriptor lives as long as its thread, so without a cap a
/// process with many threads would hand most of its table to the sampler
/// and the host's own `open()` would fail with `EMFILE`. Threads beyond the
/// share are read by open-read-close (costlier per file; see the module docs).
/// The limit is re-read (`getrlimit`, no allocation) on every sample, so a
/// host that raises or lowers it is followed; descriptors kept beyond a
/// lowered share are closed on the next sample.
pub(crate) const KEPT_SHARE_DIVISOR: u64 = 4;

/// The part of the share ([`KEPT_SHARE_DIVISOR`]) that samplers' kept
/// process-level files (task directory, `statm`, `status`) may fill, as a
/// divisor of the share: half. A sampler of another process built when
/// they would pass it keeps none: it opens its task directory at the start
/// of each sample (checking the process's start time against its PID),
/// opens `statm` and `status` for their reads, and closes all of them when
/// the sample ends.
///
/// Why: with three descriptors held for life per sampler, `watch --name`
/// under `ulimit -n 256` fitted 62 of 300 processes. Kept, they cost
/// nothing per sample; opened per sample, about four opens (BENCHMARKS.md,
/// "Process files kept or opened per sample"). So the first samplers keep
/// them, up to half the share (the other half stays for per-thread
/// files, read on every sample too), and the rest, however many, hold none.
pub(crate) const PROCESS_FILES_SHARE_DIVISOR: u64 = 2;

/// The top of the descriptor table the sampler never keeps, in descriptors:
/// a freshly opened descriptor numbered `limit - 64` or higher is read and
/// closed at once instead of kept.
///
/// Why: open(2) returns the lowest free number, so a descriptor numbered `n`
/// means every number below `n` was in use: fewer than 64 were left free
/// for the host. This catches a host that uses most of its table itself,
/// which the share alone ([`KEPT_SHARE_DIVISOR`]) would not.
pub(crate) const HEADROOM_DESCRIPTORS: u64 = 64;

/// After one of the sampler's opens fails with `EMFILE` or `ENFILE`, the
/// number of samples during which it keeps no descriptor at all, closing
/// those it holds after reading them.
///
/// Why: the process (or the system) is out of descriptors. Giving back the
/// kept ones lets the host's next `open()` succeed; and not keeping any for
/// a while stops the sampler from re-taking every descriptor the host frees
/// while it is still at its limit. Meanwhile threads are read by
/// open-read-close; every further failure restarts the count. 60 samples is
/// a minute at the default one-second interval.
pub(crate) const EXHAUSTION_BACKOFF_SAMPLES: u64 = 60;

/// The descriptors held by every sampler of one host process, counted
/// together so that the share ([`KEPT_SHARE_DIVISOR`]) is one budget for the
/// whole process, not one per sampler: a host (or `wakemeter watch --name`)
/// with hundreds of samplers keeps no more than one sampler did.
///
/// Why an atomic and not a lock: samplers take and give back descriptors on
/// their sampling paths, which never block.
#[derive(Debug, Default)]
pub(crate) struct DescriptorPool {
    /// Descriptors held now: process-level files of every live sampler plus
    /// every kept per-thread file.
    held: AtomicU64,
}

impl DescriptorPool {
    /// The pool of this process, shared by every sampler built on the real
    /// `/proc` ([`LinuxSys`]).
    pub(crate) fn process() -> Arc<DescriptorPool> {
        static POOL: std::sync::OnceLock<Arc<DescriptorPool>> = std::sync::OnceLock::new();
        POOL.get_or_init(Arc::default).clone()
    }

    /// Descriptors held now by every sampler of the pool.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Counts `n` descriptors that are held whatever the budget (a
    /// sampler's process-level files).
    pub(super) fn add(&self, n: u64) {
        self.held.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` descriptors if the pool then holds at most `allowed`;
    /// `false` (nothing counted) otherwise.
    pub(super) fn try_add(&self, n: u64, allowed: u64) -> bool {
        self.held
            .try_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                (h.saturating_add(n) <= allowed).then_some(h + n)
            })
            .is_ok()
    }

    /// Takes one descriptor from the budget if fewer than `allowed` are held.
    fn try_take(&self, allowed: u64) -> bool {
        self.held
            .try_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                (h < allowed).then_some(h + 1)
            })
            .is_ok()
    }

    /// Gives back `n` descriptors.
    fn release(&self, n: u64) {
        // Saturating: a miscount must never wrap into a full budget.
        let _ = self
            .held
            .try_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                Some(h.saturating_sub(n))
            });
    }
}

/// The descriptor policy's state (see [`KEPT_SHARE_DIVISOR`],
/// [`HEADROOM_DESCRIPTORS`], [`EXHAUSTION_BACKOFF_SAMPLES`]).
#[derive(Debug)]
pub(super) struct Descriptors {
    /// The budget shared with the process's other samplers.
    pool: Arc<DescriptorPool>,
    /// Process-level descriptors this sampler holds (counted in `pool`).
    fixed: u64,
    /// Per-thread descriptors kept open now by this sampler (counted in `pool`).
    pub(super) kept: u64,
    /// How many the whole pool may hold during this pass.
    allowed: u64,
    /// Whether `status` descriptors may be kept during this pass.
    keep_status: bool,
    /// Descriptor numbers from this one up are never kept (this pass).
    headroom_from: u64,
    /// Generation of the current pass.
    generation: u64,
    /// No descriptor is kept before this generation.
    backoff_until: u64,
    /// An open failed with `EMFILE`/`ENFILE` in this pass: no more opens in it
    /// (each would fail too, after walking its path).
    pub(super) exhausted: bool,
}

impl Descriptors {
    /// The state of a new backend holding `fixed` process-level
    /// descriptors (already counted in `pool`), keeping none yet.
    pub(super) fn new(pool: Arc<DescriptorPool>, fixed: u64) -> Self {
        Descriptors {
            pool,
            fixed,
            kept: 0,
            allowed: 0,
            keep_status: false,
            headroom_from: 0,
            generation: 0,
            backoff_until: 0,
            exhausted: false,
        }
    }

    /// Sets the budget of a new pass from the soft `RLIMIT_NOFILE` and the
    /// number of threads.
    pub(super) fn begin(&mut self, limit: Option<u64>, threads: u64, generation: u64) {
        self.generation = generation;
        self.exhausted = false;
        (self.allowed, self.headroom_from) = match limit {
            Some(l) => (
                l / KEPT_SHARE_DIVISOR,
                l.saturating_sub(HEADROOM_DESCRIPTORS),
            ),
            None => (u64::MAX, u64::MAX),
        };
        if generation < self.backoff_until {
            self.allowed = 0;
        }
        // What the other samplers hold is not this sampler's to use.
        let others = self.pool.held().saturating_sub(self.kept);
        self.keep_status = threads.saturating_mul(2) <= self.allowed.saturating_sub(others);
    }

    /// Whether one more descriptor of `file` may be kept, if its number allows.
    pub(super) fn could_keep(&self, file: TaskFile) -> bool {
        !self.exhausted
            && self.pool.held() < self.allowed
            && (file != TaskFile::Status || self.keep_status)
    }

    /// Counts a descriptor about to be kept; `false` when another sampler
    /// took the last of the budget since [`Self::could_keep`].
    pub(super) fn take(&mut self) -> bool {
        if !self.pool.try_take(self.allowed) {
            return false;
        }
        self.kept += 1;
        true
    }

    /// Gives back `n` kept descriptors that were just closed.
    pub(super) fn give_back(&mut self, n: u64) {
        self.kept = self.kept.saturating_sub(n);
        self.pool.release(n);
    }

    /// Whether a descriptor of `file` just opened with this number may be kept.
    pub(super) fn may_keep(&self, file: TaskFile, number: u64) -> bool {
        self.could_keep(file) && number < self.headroom_from
    }

    /// Whether some kept descriptors must be closed (see [`Self::release_excess`]).
    pub(super) fn over_budget(&self) -> bool {
        self.kept > 0 && (self.pool.held() > self.allowed || !self.keep_status)
    }

    pub(super) fn on_exhausted(&mut self) {
        self.exhausted = true;
        self.allowed = 0;
        self.backoff_until = self.generation.saturating_add(EXHAUSTION_BACKOFF_SAMPLES);
    }

    /// Closes the kept descriptors the budget no longer allows: `status`
    /// ones first (they are read less often), then counter ones.
    pub(super) fn release_excess<F>(
        &mut self,
        tracked: &mut HashMap<u32, Tracked<F>, BuildHasherDefault<TidHasher>>,
    ) {
        for t in tracked.values_mut() {
            if (!self.keep_status || self.pool.held() > self.allowed) && t.status.take().is_some() {
                self.give_back(1);
            }
        }
        for t in tracked.values_mut() {
            if self.pool.held() <= self.allowed {
                break;
            }
            if t.counters.take().is_some() {
                self.give_back(1);
            }
        }
    }

    /// Accounts for a tracked thread dropped with its descriptors.
    pub(super) fn forget<F>(&mut self, t: &Tracked<F>) {
        self.give_back(u64::from(t.counters.is_some()) + u64::from(t.status.is_some()));
    }
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // The backend (and with it every descriptor it holds) goes away.
        self.pool.release(self.fixed + self.kept);
    }
}
