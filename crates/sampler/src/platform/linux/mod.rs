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
pub(crate) use sys::{LinuxSys, Sys, TaskFile};
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
}

/// Everything that reads: the syscalls, the scratch buffer and the
/// process-level descriptors (split from the tracking table so both can be
/// borrowed at once).
struct Reader<S: Sys> {
    sys: S,
    self_target: bool,
    counter_file: CounterFile,
    buf: Box<[u8]>,
    next_serial: u64,
    statm: S::File,
    status: S::File,
    fds: Descriptors,
    /// Highest resident set seen so far, in bytes (`VmHWM` or a later RSS).
    peak_rss_bytes: Option<u64>,
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
    /// Opens the process-level files and detects whether `schedstat` exists.
    ///
    /// # Errors
    /// [`Error::NoSuchProcess`] or [`Error::Unreadable`] when the target's
    /// `statm`/`status` cannot be opened.
    pub(crate) fn new(mut sys: S, target: Target) -> Result<Self> {
        let open_proc = |sys: &mut S, rel: &str| {
            sys.open(rel).map_err(|e| {
                if is_gone(&e) {
                    Error::NoSuchProcess { pid: sys.pid() }
                } else {
                    Error::from_open(format!("{}/{rel}", sys.base()), e)
                }
            })
        };
        let statm = open_proc(&mut sys, "statm")?;
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
        // sampler lives: they count against the shared budget.
        let pool = sys.descriptor_pool();
        let fixed = sys.fixed_descriptors() + 2;
        pool.add(fixed);
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
        })
    }
}

impl<S: Sys> Reader<S> {
    fn cpu_time_source(&self) -> CpuTimeSource {
        match (self.self_target, self.counter_file) {
            (true, _) => CpuTimeSource::ThreadClock,
            (false, CounterFile::Schedstat) => CpuTimeSource::Schedstat,
            (false, CounterFile::Stat) => CpuTimeSource::StatTicks,
        }
    }

    /// Reads a per-thread file into the scratch buffer: through its kept
    /// descriptor, or else by opening it, keeping the new descriptor in
    /// `kept` when the policy allows and closing it otherwise.
    fn read_task_file(&mut self, tid: u32, file: TaskFile, kept: &mut Option<S::File>) -> FileRead {
        if let Some(f) = kept.as_ref() {
            return match self.sys.pread(f, &mut self.buf) {
                Ok(n) => FileRead::Bytes(n),
                Err(e) if is_gone(&e) => FileRead::Gone,
                Err(_) => FileRead::Bytes(0),
            };
        }
        if self.fds.exhausted {
            return FileRead::Exhausted;
        }
        let f = match self.sys.open_task(tid, file) {
            Ok(f) => f,
            Err(e) if is_gone(&e) => return FileRead::Gone,
            Err(e) if is_exhausted(&e) => {
                self.fds.on_exhausted();
                return FileRead::Exhausted;
            }
            // Other errors (e.g. EACCES on a hardened /proc): sample without it.
            Err(_) => return FileRead::Unavailable,
        };
        let read = match self.sys.pread(&f, &mut self.buf) {
            Ok(n) => FileRead::Bytes(n),
            Err(e) if is_gone(&e) => return FileRead::Gone,
            Err(_) => FileRead::Bytes(0),
        };
        if self.fds.may_keep(file, self.sys.descriptor_number(&f)) && self.fds.take() {
            *kept = Some(f);
        }
        read
    }

    /// Starts tracking a thread; `None` if it exited already. Sets `short`
    /// when its name could not be read for want of descriptors.
    fn discover(&mut self, tid: u32, short: &mut bool) -> Option<Tracked<S::File>> {
        let mut status = None;
        let mut name: Box<str> = "".into();
        match self.read_task_file(tid, TaskFile::Status, &mut status) {
            FileRead::Bytes(n) => {
                if let Some(raw) = parse::status_name(&self.buf[..n]) {
                    name = String::from_utf8_lossy(raw).into();
                }
            }
            FileRead::Gone => return None,
            FileRead::Exhausted => *short = true,
            FileRead::Unavailable => {}
        }
        let serial = self.next_serial;
        self.next_serial += 1;
        Some(Tracked {
            ident: Arc::new(ThreadIdent {
                tid: u64::from(tid),
                serial,
                name,
                cpu_time_source: self.cpu_time_source(),
            }),
            counters: None,
            status,
            seen: 0,
            last: None,
            split: None,
        })
    }

    /// Reads one tracked thread's counters. Sets `short` when a file could
    /// not be read for want of descriptors.
    fn measure(
        &mut self,
        tid: u32,
        t: &mut Tracked<S::File>,
        request: SampleRequest,
        short: &mut bool,
    ) -> Measured {
        let mut out = ThreadRow {
            ident: t.ident.clone(),
            total_cpu_time_ns: ABSENT,
            total_run_queue_wait_ns: ABSENT,
            total_switches: ABSENT,
            total_voluntary_switches: ABSENT,
            total_involuntary_switches: ABSENT,
        };
        let counted = match self.counter_file {
            CounterFile::Schedstat => self.schedstat_counters(tid, t, &mut out, short),
            CounterFile::Stat => self.stat_counters(tid, t, &mut out, short).map(|()| None),
        };
        let Ok(sched) = counted else {
            return Measured::Exited;
        };
        if request.switch_split && self.switch_counts(tid, t, sched, &mut out, short).is_err() {
            return Measured::Exited;
        }
        if out.total_cpu_time_ns == ABSENT {
            return Measured::Unmeasurable;
        }
        Measured::Sample(out)
    }

    /// Fills CPU time, run-queue wait and switches from `schedstat` (and,
    /// for the calling process, the thread's CPU clock). Returns the
    /// `schedstat` triple when it is trustworthy.
    fn schedstat_counters(
        &mut self,
        tid: u32,
        t: &mut Tracked<S::File>,
        out: &mut ThreadRow,
        short: &mut bool,
    ) -> Result<Option<Sched>, Exited> {
        // The calling process's threads seen before: clock first (see
        // [`Self::clock_first`]); `None` means schedstat must be read.
        let clock = match (self.self_target, t.last) {
            (true, Some(last)) => match self.clock_first(tid, last)? {
                ClockFirst::Unchanged => {
                    out.total_cpu_time_ns = last.clock_ns;
                    out.total_run_queue_wait_ns = last.wait_ns;
                    out.total_switches = last.switches;
                    return Ok(Some((last.run_ns, last.wait_ns, last.switches)));
                }
                ClockFirst::Moved(clock) => Some(clock),
            },
            _ => None,
        };
        let sched = self.read_schedstat(tid, t, short)?;
        if let Some((run, wait, slices)) = sched {
            out.total_cpu_time_ns = run;
            out.total_run_queue_wait_ns = wait;
            out.total_switches = slices;
        }
        if self.self_target {
            out.total_cpu_time_ns = match clock {
                Some(clock) => clock,
                None => self.clock_after_schedstat(tid, sched)?,
            };
        }
        if let Some((run, wait, slices)) = sched {
            t.last = Some(LastRead {
                run_ns: run,
                wait_ns: wait,
                switches: slices,
                clock_ns: out.total_cpu_time_ns,
            });
        }
        // Kernels without sched_info print "0 0 0" for every thread: a
        // thread whose clock has moved cannot have run for 0 ns, so its
        // run-queue wait and switches are unknown.
        if self.self_target
            && sched.is_some_and(|(run, _, slices)| run == 0 && slices == 0)
            && out.total_cpu_time_ns > 0
        {
            out.total_run_queue_wait_ns = ABSENT;
            out.total_switches = ABSENT;
            t.last = None;
            return Ok(None);
        }
        Ok(sched)
    }

    /// Reads and parses `schedstat`; `Err` when the thread (or the thread
    /// this TID belonged to) has exited.
    fn read_schedstat(
        &mut self,
        tid: u32,
        t: &mut Tracked<S::File>,
        short: &mut bool,
    ) -> Result<Option<Sched>, Exited> {
        // Without a kept descriptor, nothing ties the file to the thread
        // tracked under this TID (see the module docs).
        let bound = t.counters.is_some();
        let sched = match self.read_task_file(tid, TaskFile::Schedstat, &mut t.counters) {
            FileRead::Bytes(n) => parse::schedstat(&self.buf[..n]),
            FileRead::Gone => return Err(Exited),
            FileRead::Exhausted => {
                *short = true;
                None
            }
            FileRead::Unavailable => None,
        };
        if !bound
            && let (Some((run, _, slices)), Some(last)) = (sched, t.last)
            && (run < last.run_ns || slices < last.switches)
        {
            // Counters never go backwards: the TID has a new thread.
            return Err(Exited);
        }
        Ok(sched)
    }

    /// Reads the CPU clock of one of the calling process's threads before
    /// its `schedstat`, and says whether `schedstat` can be skipped.
    ///
    /// A clock that has not moved since the last sample, of a thread that
    /// was off CPU then (its clock equalled its run time), means the thread
    /// has not been scheduled in since: its run time, switches and
    /// run-queue wait have not changed either (the wait is added when the
    /// thread gets a CPU; a queued thread migrated to another CPU has it
    /// added at the migration, and shows it at its next run). After a gap
    /// the clock costs a fraction of a `pread` of `schedstat` (the procfs
    /// read touches the file, its seq_file buffer, the inode and the task,
    /// all cold after a gap; BENCHMARKS.md, "Cold samples: where the time
    /// goes"), so an idle thread costs a fraction of what it did.
    ///
    /// The clock is addressed by TID, so it could belong to a new thread
    /// that reused the TID: a clock behind the last one means exactly that;
    /// a moved clock is followed by the `schedstat` read, whose kept
    /// descriptor answers `ESRCH` for an exited thread; a new thread whose
    /// clock equals the old one's to the nanosecond goes unseen until it
    /// runs.
    fn clock_first(&mut self, tid: u32, last: LastRead) -> Result<ClockFirst, Exited> {
        let clock = self.sys.thread_cpu_ns(tid).ok_or(Exited)?;
        if clock < last.clock_ns {
            return Err(Exited);
        }
        if clock == last.clock_ns && last.clock_ns == last.run_ns {
            return Ok(ClockFirst::Unchanged);
        }
        Ok(ClockFirst::Moved(clock))
    }

    /// The CPU clock of one of the calling process's threads, read after its
    /// `schedstat` (`sched`), the first time the thread is measured.
    fn clock_after_schedstat(&mut self, tid: u32, sched: Option<Sched>) -> Result<u64, Exited> {
        let clock = self.sys.thread_cpu_ns(tid).ok_or(Exited)?;
        // A thread's clock never runs behind the run time read just before
        // it; if it does, the TID now belongs to another thread (see the
        // module docs).
        if sched.is_some_and(|(run, _, _)| clock < run) {
            return Err(Exited);
        }
        Ok(clock)
    }

    /// Fills CPU time from the thread clock (calling process) or `stat`
    /// ticks (another process), on kernels without `schedstat`.
    fn stat_counters(
        &mut self,
        tid: u32,
        t: &mut Tracked<S::File>,
        out: &mut ThreadRow,
        short: &mut bool,
    ) -> Result<(), Exited> {
        // Clock first, descriptor second (see the module docs).
        if self.self_target {
            out.total_cpu_time_ns = self.sys.thread_cpu_ns(tid).ok_or(Exited)?;
        }
        // For the calling process the clock gave the CPU time; `stat` only
        // serves to bind the TID, which a descriptor not kept cannot do:
        // skip the open unless it may be kept.
        let useful =
            !self.self_target || t.counters.is_some() || self.fds.could_keep(TaskFile::Stat);
        if !useful {
            return Ok(());
        }
        let ticks = match self.read_task_file(tid, TaskFile::Stat, &mut t.counters) {
            FileRead::Bytes(n) => parse::stat_cpu_ticks(&self.buf[..n]),
            FileRead::Gone => return Err(Exited),
            FileRead::Exhausted => {
                *short = true;
                None
            }
            FileRead::Unavailable => None,
        };
        if let (false, Some(ticks)) = (self.self_target, ticks) {
            let tck = self.sys.ticks_per_sec().max(1);
            out.total_cpu_time_ns = ticks.saturating_mul(1_000_000_000 / tck);
        }
        Ok(())
    }

    /// Fills the voluntary/involuntary switch counts from `status` (and
    /// follows a rename), or keeps the last ones when the thread has not
    /// switched since.
    fn switch_counts(
        &mut self,
        tid: u32,
        t: &mut Tracked<S::File>,
        sched: Option<Sched>,
        out: &mut ThreadRow,
        short: &mut bool,
    ) -> Result<(), Exited> {
        // No switch since the last status read: every switch-out adds to the
        // run time, so unchanged (run, switches) means unchanged switch
        // counts. Idle threads skip the read, the costliest of a sample
        // (BENCHMARKS.md, "Per-thread reads").
        if let (Some((run, _, slices)), Some(sp)) = (sched, t.split)
            && run != 0
            && sp.run_ns == run
            && sp.switches == slices
        {
            out.total_voluntary_switches = sp.voluntary;
            out.total_involuntary_switches = sp.involuntary;
            return Ok(());
        }
        let n = match self.read_task_file(tid, TaskFile::Status, &mut t.status) {
            FileRead::Bytes(n) => n,
            FileRead::Gone => return Err(Exited),
            FileRead::Exhausted => {
                *short = true;
                return Ok(());
            }
            FileRead::Unavailable => return Ok(()),
        };
        let bytes = &self.buf[..n];
        if let Some((vol, invol)) = parse::status_switches(bytes) {
            out.total_voluntary_switches = vol;
            out.total_involuntary_switches = invol;
            t.split = sched.map(|(run, _, slices)| SplitRead {
                run_ns: run,
                switches: slices,
                voluntary: vol,
                involuntary: invol,
            });
        }
        if let Some(raw) = parse::status_name(bytes)
            && raw != t.ident.name.as_bytes()
        {
            // Renamed (pthread_setname_np): new identity record, same serial.
            t.ident = Arc::new(ThreadIdent {
                tid: t.ident.tid,
                serial: t.ident.serial,
                name: String::from_utf8_lossy(raw).into(),
                cpu_time_source: t.ident.cpu_time_source,
            });
            out.ident = t.ident.clone();
        }
        Ok(())
    }

    /// Maps a failed process-level read to the right error.
    fn process_error(&mut self, e: io::Error, file: &str) -> Error {
        let alive = self.sys.target_alive();
        if is_gone(&e) && alive && !self.self_target {
            // The kept descriptor is bound to the process it was opened
            // for, which is gone; a process with its PID exists: another one.
            Error::PidReused {
                pid: self.sys.pid(),
            }
        } else if is_gone(&e) || !alive {
            Error::NoSuchProcess {
                pid: self.sys.pid(),
            }
        } else {
            Error::Unreadable {
                path: format!("{}/{file}", self.sys.base()),
                source: e,
            }
        }
    }

    /// Reads the process `status`: (`Threads:` count, `VmHWM:` in KiB).
    fn process_status(&mut self) -> Result<(Option<u64>, Option<u64>)> {
        let n = match self.sys.pread(&self.status, &mut self.buf) {
            Ok(n) => n,
            Err(e) => return Err(self.process_error(e, "status")),
        };
        let bytes = &self.buf[..n];
        let threads = parse::status_field(bytes, b"Threads");
        // A zombie (or dead) process has exited and waits to be reaped: its
        // files stay readable until then, so it must not read as alive
        // forever. `State` is the leader's: a leader that called
        // `pthread_exit` is a zombie while its other threads run, and then
        // `Threads` still counts them (the zombie leader counts until reaped).
        let leader_done = parse::status_line(bytes, b"State")
            .and_then(|s| s.iter().find(|b| !b.is_ascii_whitespace()))
            .is_some_and(|c| matches!(c, b'Z' | b'X'));
        if leader_done && threads.is_none_or(|n| n <= 1) {
            return Err(Error::NoSuchProcess {
                pid: self.sys.pid(),
            });
        }
        Ok((threads, parse::status_field(bytes, b"VmHWM")))
    }

    /// The thread count and peak RSS (KiB) for this sample. The calling
    /// process's `status` is read only on samples that read the switch
    /// split (one in ten by default): it cannot be a zombie while it runs
    /// this code, its thread count comes from [`Sys::task_count`], and its
    /// peak is carried over, raised by the RSS read each sample. Another
    /// process's `status` is read every sample, since only it tells a zombie.
    fn process_counts(&mut self, request: SampleRequest) -> Result<(Option<u64>, Option<u64>)> {
        if self.self_target
            && !request.switch_split
            && self.peak_rss_bytes.is_some()
            && let Some(n) = self.sys.task_count()
        {
            return Ok((Some(n), None));
        }
        self.process_status()
    }

    fn process_sample(
        &mut self,
        thread_count: u32,
        peak_kib: Option<u64>,
    ) -> Result<ProcessSample> {
        let n = match self.sys.pread(&self.statm, &mut self.buf) {
            Ok(n) => n,
            Err(e) => return Err(self.process_error(e, "statm")),
        };
        let rss_pages = parse::statm_resident_pages(&self.buf[..n]).unwrap_or(0);
        let rss_bytes = rss_pages.saturating_mul(self.sys.page_size());
        // A peak read now, or the last one raised by the RSS seen now.
        let peak = peak_kib
            .map(|k| k.saturating_mul(1024))
            .or(self.peak_rss_bytes)
            .map(|p| p.max(rss_bytes));
        self.peak_rss_bytes = peak;
        Ok(ProcessSample {
            pid: self.sys.pid(),
            rss_bytes,
            peak_rss_bytes: peak,
            phys_footprint_bytes: None,
            total_cpu_time_ns: self.sys.process_cpu_ns().unwrap_or(0),
            thread_count,
            total_interrupt_wakeups: None,
            total_platform_idle_wakeups: None,
        })
    }
}

/// Bookkeeping of one sampling pass.
struct Pass {
    request: SampleRequest,
    generation: u64,
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
    pass: &mut Pass,
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
        let measured = reader.measure(tid, t, pass.request, &mut short);
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
        request: SampleRequest,
        threads: &mut Vec<ThreadRow>,
        warnings: &mut Vec<SampleWarning>,
    ) -> Result<ProcessSample> {
        threads.clear();
        let (thread_count, peak_kib) = self.reader.process_counts(request)?;
        self.generation = self.generation.wrapping_add(1);
        let limit = self.reader.sys.nofile_limit();
        let count = thread_count.unwrap_or(self.tracked.len() as u64);
        self.reader.fds.begin(limit, count, self.generation);
        let mut pass = Pass {
            request,
            generation: self.generation,
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
