//! Linux and Android backend: `/proc/<pid>/task`, per-thread CPU clocks,
//! `schedstat`/`status`/`stat` with kept descriptors read by `pread`.
//!
//! Thread identity: each tracked thread keeps its `schedstat` (or `stat`)
//! descriptor open. A procfs descriptor is bound to the task it was opened
//! for, so once that thread exits it returns `ESRCH` even if the TID has been
//! reused. The CPU clock is addressed by TID, so it is checked against the
//! descriptor. The first time a thread is measured, `schedstat` is read first
//! and the clock second, and a clock behind the run time just read means the
//! TID changed hands in between. After that the clock is read first (it is
//! the cheaper read, and says whether `schedstat` can have changed): a clock
//! behind the last one means a new thread, and a moved clock is followed by
//! the `schedstat` read through the kept descriptor. Without `schedstat`,
//! the clock is read first and the `stat` descriptor second.
//!
//! Reads that cannot have changed are skipped: a thread whose CPU clock has
//! not moved since the last sample (and that was off CPU then) has not been
//! scheduled in, so its `schedstat` is unchanged; one with no switch since
//! its last `status` read keeps its switch counts. A thread renamed by
//! another thread while it sleeps shows its new name once it runs.
//!
//! Descriptors: the sampler is a guest in the host's descriptor table and
//! keeps at most a share of it (see [`descriptors`]: [`KEPT_SHARE_DIVISOR`](descriptors::KEPT_SHARE_DIVISOR),
//! [`HEADROOM_DESCRIPTORS`] and [`EXHAUSTION_BACKOFF_SAMPLES`](descriptors::EXHAUSTION_BACKOFF_SAMPLES)). Threads
//! beyond that share are read by open-read-close: the same counters, at
//! up to several times the cost of a `pread` on a kept descriptor
//! (BENCHMARKS.md, "Per-thread reads"). Such a thread's TID
//! is checked against its previous counters instead of a kept descriptor:
//! counters that went backwards mean a new thread, but a reused TID whose
//! new thread already has more run time and more switches goes unseen.
//! [`SampleWarning::DescriptorsExhausted`] is reported only for threads that
//! even open-read-close could not read.

mod descriptors;
mod reader;
mod sys;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::sync::Arc;

use descriptors::Descriptors;
pub(crate) use descriptors::{DescriptorPool, HEADROOM_DESCRIPTORS};
use reader::*;
pub(crate) use sys::{LinuxSys, ProcessFile, Sys, TaskFile};
use wakemeter_procfs::parse;

use crate::error::{Error, Result};
use crate::model::{ABSENT, Target, ThreadIdent, ThreadRow};
use crate::model::{CpuTimeSource, ProcessSample, SampleWarning};
use crate::platform::{Backend, SampleRequest};

#[cfg(test)]
use fake::FakeThread;

/// Size of the scratch buffer for `status` files (they are ~1.5 KiB).
const READ_BUF: usize = 8 * 1024;

/// Which per-thread file gives the cumulative counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CounterFile {
    /// `schedstat`: run ns, run-queue wait ns, switches.
    Schedstat,
    /// `stat`: utime + stime ticks (kernels without schedstat).
    Stat,
}

/// How reading one per-thread file went; on success the bytes are in the
/// scratch buffer.
enum FileRead {
    /// This many bytes were read.
    Bytes(usize),
    /// The thread has exited.
    Gone,
    /// No descriptor could be had: the process or system is out of them.
    Exhausted,
    /// Not readable for another reason (e.g. `EACCES`): sample without it.
    Unavailable,
}

struct Tracked<F> {
    ident: Arc<ThreadIdent>,
    /// Kept `schedstat` or `stat` descriptor; `None` when the descriptor
    /// policy keeps none for this thread (read by open-read-close).
    counters: Option<F>,
    /// Kept `status` descriptor; `None` as for `counters`.
    status: Option<F>,
    /// Generation of the last sample that saw this thread.
    seen: u64,
    /// `schedstat` (run ns, switches) and CPU clock at the last sample.
    last: Option<LastRead>,
    /// Whether `last` was read (or carried) by the sample that last saw
    /// this thread: only then may the next one carry it.
    last_fresh: bool,
    /// `schedstat` (run ns, switches) and switch counts at the last `status` read.
    split: Option<SplitRead>,
}

/// What the last sample read of a thread (to skip reads that cannot have changed).
#[derive(Debug, Clone, Copy)]
struct LastRead {
    run_ns: u64,
    wait_ns: u64,
    switches: u64,
    clock_ns: u64,
}

/// The last `status` read of a thread.
#[derive(Debug, Clone, Copy)]
struct SplitRead {
    run_ns: u64,
    switches: u64,
    voluntary: u64,
    involuntary: u64,
}

/// Outcome of measuring one tracked thread.
enum Measured {
    Sample(ThreadRow),
    /// The tracked thread has exited (its kept descriptor answers ESRCH or
    /// its clock is invalid).
    Exited,
    /// Alive, but nothing measurable: another process's thread for which no
    /// descriptor could be opened.
    Unmeasurable,
}

/// `schedstat`: (run ns, run-queue wait ns, switches).
type Sched = (u64, u64, u64);

/// The tracked thread has exited (or its TID now names another thread).
struct Exited;

/// What a thread's CPU clock, read before its `schedstat`, says.
enum ClockFirst {
    /// Not scheduled in since the last sample: `schedstat` is unchanged.
    Unchanged,
    /// The clock now, in ns: `schedstat` must be read.
    Moved(u64),
}

fn is_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ESRCH) | Some(libc::ENOENT))
}

fn is_exhausted(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// The Linux backend, generic over its syscalls.
pub(crate) struct LinuxBackend<S: Sys> {
    reader: Reader<S>,
    tracked: HashMap<u32, Tracked<S::File>, BuildHasherDefault<TidHasher>>,
    tids: Vec<u32>,
    generation: u64,
    /// Samples so far that read the switch split (for [`Pass::full_read_slot`]).
    split_samples: u64,
}

/// Hasher for TID keys. TIDs are small distinct integers chosen by the
/// kernel, not by an attacker, so a multiplicative hash is enough, and
/// several times cheaper than SipHash per lookup (two lookups per thread;
/// BENCHMARKS.md, "Per-thread reads").
#[derive(Default)]
pub(crate) struct TidHasher(u64);

impl Hasher for TidHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = u64::from(v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl<S: Sys> LinuxBackend<S> {
    /// The backend with the default descriptor policy.
    #[cfg(test)]
    pub(crate) fn new(sys: S, target: Target) -> Result<Self> {
        Self::with_process_files(sys, target, false)
    }

    /// Opens the process-level files and detects whether `schedstat`
    /// exists; with `per_sample`, a backend of another process keeps no
    /// process-level descriptor whatever the budget.
    ///
    /// # Errors
    /// [`Error::NoSuchProcess`] or [`Error::Unreadable`] when the target's
    /// `statm`/`status` cannot be opened.
    pub(crate) fn with_process_files(mut sys: S, target: Target, per_sample: bool) -> Result<Self> {
        let open_proc = |sys: &mut S, rel: &str| {
            sys.open(rel).map_err(|e| {
                if is_gone(&e) {
                    Error::NoSuchProcess { pid: sys.pid() }
                } else {
                    Error::from_open(format!("{}/{rel}", sys.base()), e)
                }
            })
        };
        let mut statm = Some(open_proc(&mut sys, "statm")?);
        let status = open_proc(&mut sys, "status")?;
        // A sampler built while the host is at the top of its table would
        // take the host's last descriptors for as long as it lives: refuse
        // it with the error an open at the limit gives (see
        // [`HEADROOM_DESCRIPTORS`]).
        if let Some(limit) = sys.nofile_limit()
            && sys.descriptor_number(&status) >= limit.saturating_sub(HEADROOM_DESCRIPTORS)
        {
            return Err(Error::DescriptorsExhausted {
                path: format!("{}/status", sys.base()),
                source: io::Error::from_raw_os_error(libc::EMFILE),
            });
        }
        let main = sys.pid();
        let counter_file = match sys.open_task(main, TaskFile::Schedstat) {
            Ok(_) => CounterFile::Schedstat,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => CounterFile::Stat,
            Err(e) => {
                return Err(Error::from_open(
                    format!("{}/task/{main}/schedstat", sys.base()),
                    e,
                ));
            }
        };
        // The task directory, `statm` and `status` stay open while the
        // sampler lives, counted against the shared budget, when they fit
        // in its part for process files; another process's sampler built
        // beyond it holds none between samples (see
        // [`descriptors::PROCESS_FILES_SHARE_DIVISOR`]).
        let pool = sys.descriptor_pool();
        let mut fixed = sys.fixed_descriptors() + 2;
        let process_files_allowed = sys.nofile_limit().map_or(u64::MAX, |l| {
            l / descriptors::KEPT_SHARE_DIVISOR / descriptors::PROCESS_FILES_SHARE_DIVISOR
        });
        let mut status = Some(status);
        if matches!(target, Target::SelfProcess) {
            pool.add(fixed);
        } else if per_sample || !pool.try_add(fixed, process_files_allowed) {
            sys.release();
            (statm, status, fixed) = (None, None, 0);
        }
        Ok(LinuxBackend {
            reader: Reader {
                sys,
                self_target: matches!(target, Target::SelfProcess),
                counter_file,
                buf: vec![0u8; READ_BUF].into_boxed_slice(),
                next_serial: 0,
                statm,
                status,
                fds: Descriptors::new(pool, fixed),
                peak_rss_bytes: None,
            },
            tracked: HashMap::default(),
            tids: Vec::new(),
            generation: 0,
            split_samples: 0,
        })
    }
}

/// Bookkeeping of one sampling pass.
struct Pass<'a> {
    request: SampleRequest<'a>,
    generation: u64,
    /// On a sample that reads the switch split, the quiet threads whose
    /// serial is this modulo [`QUIET_FULL_READ_EVERY`] are read in full
    /// (see [`carried`]); `None` on other samples.
    full_read_slot: Option<u64>,
    /// Threads sampled with fewer sources for want of descriptors.
    without_descriptors: u32,
    /// Threads found alive in this pass.
    seen: u64,
}

type Tracking<S> = HashMap<u32, Tracked<<S as Sys>::File>, BuildHasherDefault<TidHasher>>;

/// Samples one listed TID. With `discover`, an untracked (or reused) TID
/// starts being tracked; without it, only already tracked threads are read.
fn visit<S: Sys>(
    tracked: &mut Tracking<S>,
    reader: &mut Reader<S>,
    tid: u32,
    discover: bool,
    pass: &mut Pass<'_>,
    threads: &mut Vec<ThreadRow>,
) {
    // At most two rounds: a tracked thread found exited while its TID is
    // listed may mean the TID was reused; track the new thread.
    for _round in 0..2 {
        let mut short = false;
        let t = match tracked.entry(tid) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) if discover => match reader.discover(tid, &mut short) {
                Some(t) => e.insert(t),
                None => return, // exited between listing and opening
            },
            Entry::Vacant(_) => return,
        };
        let quiet = std::mem::replace(&mut t.last_fresh, false)
            && pass.request.quiet.binary_search(&u64::from(tid)).is_ok();
        let measured = match quiet.then(|| carried(t, pass)).flatten() {
            Some(row) => {
                t.last_fresh = true;
                Measured::Sample(row)
            }
            None => reader.measure(tid, t, pass.request, &mut short),
        };
        if !matches!(measured, Measured::Exited) {
            if short {
                pass.without_descriptors += 1;
            }
            t.seen = pass.generation;
            pass.seen += 1;
        }
        match measured {
            Measured::Sample(p) => {
                threads.push(p);
                return;
            }
            Measured::Unmeasurable => return,
            Measured::Exited => {
                // Dropping the entry closes its descriptors.
                if let Some(t) = tracked.remove(&tid) {
                    reader.fds.forget(&t);
                }
                if !discover {
                    return;
                }
            }
        }
    }
}

/// A quiet thread (see [`SampleRequest::quiet`]) is read in full on one
/// in this many samples that read the switch split, the threads taking
/// turns by serial: its `status` is read then whatever its counters say,
/// so a name a sibling wrote to `/proc/TID/comm` while it slept (which
/// changes no counter and no kernel entry) shows within this many split
/// samples (32 s in `watch`, which reads the split every second; 320 s at
/// the default of one sample in ten), and the carried counters are
/// checked against `/proc`. Each split sample then reads one quiet thread
/// in 32 (two `pread`s each), where a sample without the kernel view
/// reads every thread's `schedstat`.
pub(crate) const QUIET_FULL_READ_EVERY: u64 = 32;

/// The row of a thread a kernel source saw blocked since just before the
/// previous sample, from the counters that sample read: `None` when they
/// are not all at hand (first sample, no `schedstat`, a switch split
/// older than the last counters) or when this sample is its turn to be
/// read in full. Its `/proc` counters cannot have moved: it has not been
/// scheduled in (run time, switches and run-queue wait move only then; a
/// blocked thread is on no run queue, so no migration adds wait) nor
/// woken. One case is not told apart: a thread woken just before the
/// source's previous read (its entry then shows the wake, and it is off
/// CPU for a cause other than preemption) that is still waiting for a CPU
/// a whole sample later and is migrated meanwhile has the wait so far
/// added to its `schedstat` at the migration; carried, that wait shows
/// one sample late, when the thread runs and its entry changes (the
/// counter is cumulative, so nothing is lost).
fn carried<F>(t: &mut Tracked<F>, pass: &Pass<'_>) -> Option<ThreadRow> {
    let last = t.last?;
    if pass.full_read_slot == Some(t.ident.serial % QUIET_FULL_READ_EVERY) {
        // Read `status` too, whatever the counters say: the name.
        t.split = None;
        return None;
    }
    let (vol, invol) = match t.split {
        Some(sp) if sp.run_ns == last.run_ns && sp.switches == last.switches => {
            (sp.voluntary, sp.involuntary)
        }
        _ if pass.request.switch_split => return None,
        _ => (ABSENT, ABSENT),
    };
    let split = pass.request.switch_split;
    Some(ThreadRow {
        ident: t.ident.clone(),
        total_cpu_time_ns: last.clock_ns,
        total_run_queue_wait_ns: last.wait_ns,
        total_switches: last.switches,
        total_voluntary_switches: if split { vol } else { ABSENT },
        total_involuntary_switches: if split { invol } else { ABSENT },
    })
}

impl<S: Sys> LinuxBackend<S> {
    /// Lists the target's threads into `out`.
    fn list(&mut self, out: &mut Vec<u32>) -> Result<()> {
        match self.reader.sys.list_tasks(out) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.reader.process_error(e, "task")),
        }
    }
}

impl<S: Sys> Backend for LinuxBackend<S> {
    // Listing `/proc/<pid>/task` costs more per thread than the thread's CPU
    // clock read (the kernel instantiates a dentry per entry; BENCHMARKS.md,
    // "Per-thread reads"), a large share of a sample. The thread
    // count (`Sys::task_count`, or the process `status`) says how many
    // threads exist; when the tracked threads all answer and their number
    // equals it, the set is
    // unchanged and the listing is skipped. Any exit or new thread makes the
    // numbers differ, and the sample lists and discovers as usual.
    fn sample(
        &mut self,
        request: SampleRequest<'_>,
        threads: &mut Vec<ThreadRow>,
        warnings: &mut Vec<SampleWarning>,
    ) -> Result<ProcessSample> {
        // A backend that keeps no process-level descriptor opens its task
        // directory for this sample only.
        let transient = self.reader.status.is_none();
        if transient && let Err(e) = self.reader.sys.reacquire() {
            return Err(self.reader.process_error(e, "task"));
        }
        let sampled = self.sample_open(request, threads, warnings);
        if transient {
            self.reader.sys.release();
        }
        sampled
    }
}

impl<S: Sys> LinuxBackend<S> {
    /// One sample, the task directory open.
    fn sample_open(
        &mut self,
        request: SampleRequest<'_>,
        threads: &mut Vec<ThreadRow>,
        warnings: &mut Vec<SampleWarning>,
    ) -> Result<ProcessSample> {
        threads.clear();
        let (thread_count, peak_kib) = self.reader.process_counts(request)?;
        self.generation = self.generation.wrapping_add(1);
        let limit = self.reader.sys.nofile_limit();
        let count = thread_count.unwrap_or(self.tracked.len() as u64);
        self.reader.fds.begin(limit, count, self.generation);
        let full_read_slot = request.switch_split.then(|| {
            self.split_samples = self.split_samples.wrapping_add(1);
            self.split_samples % QUIET_FULL_READ_EVERY
        });
        let mut pass = Pass {
            request,
            generation: self.generation,
            full_read_slot,
            without_descriptors: 0,
            seen: 0,
        };
        let mut tids = std::mem::take(&mut self.tids);
        let listed_first = tids.is_empty() || thread_count.is_none();
        if listed_first && let Err(e) = self.list(&mut tids) {
            self.tids = tids;
            return Err(e);
        }
        for &tid in &tids {
            visit(
                &mut self.tracked,
                &mut self.reader,
                tid,
                listed_first,
                &mut pass,
                threads,
            );
        }
        if !listed_first && Some(pass.seen) != thread_count {
            // The set changed: list again and pick up the threads not seen yet.
            if let Err(e) = self.list(&mut tids) {
                self.tids = tids;
                return Err(e);
            }
            let generation = self.generation;
            for &tid in &tids {
                if self.tracked.get(&tid).is_none_or(|t| t.seen != generation) {
                    visit(
                        &mut self.tracked,
                        &mut self.reader,
                        tid,
                        true,
                        &mut pass,
                        threads,
                    );
                }
            }
        }
        // Threads not seen any more have exited: close their descriptors.
        let generation = self.generation;
        let fds = &mut self.reader.fds;
        self.tracked.retain(|_, t| {
            let live = t.seen == generation;
            if !live {
                fds.forget(t);
            }
            live
        });
        // Closed after reading, so they still served this sample: what a
        // lowered limit or an EMFILE in this pass no longer allows.
        if fds.over_budget() {
            fds.release_excess(&mut self.tracked);
        }
        tids.retain(|tid| self.tracked.contains_key(tid));
        self.tids = tids;
        if pass.without_descriptors > 0 {
            warnings.push(SampleWarning::DescriptorsExhausted {
                threads_without_descriptors: pass.without_descriptors,
            });
        }
        let count = u32::try_from(threads.len()).unwrap_or(u32::MAX);
        self.reader.process_sample(count, peak_kib)
    }
}

#[cfg(test)]
impl<S: Sys> LinuxBackend<S> {
    /// Number of threads currently tracked.
    pub(crate) fn tracked_len(&self) -> usize {
        self.tracked.len()
    }

    /// Per-thread descriptors kept open now, as counted by the policy and
    /// as found in the tracking table (they must agree).
    pub(crate) fn kept_descriptors(&self) -> (u64, u64) {
        let held = self
            .tracked
            .values()
            .map(|t| u64::from(t.counters.is_some()) + u64::from(t.status.is_some()))
            .sum();
        (self.reader.fds.kept, held)
    }
}
