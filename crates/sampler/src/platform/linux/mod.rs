//! Linux and Android backend: `/proc/<pid>/task`, per-thread CPU clocks,
//! `schedstat`/`status`/`stat` with kept descriptors read by `pread`.
//!
//! Thread identity: each tracked thread keeps its `schedstat` (or `stat`)
//! descriptor open. A procfs descriptor is bound to the task it was opened
//! for, so once that thread exits it returns `ESRCH` even if the TID has been
//! reused. The CPU clock is read first and the kept descriptor second: if the
//! descriptor still answers, the clock read belonged to the same thread.

mod parse;
mod sys;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

pub(crate) use sys::{LinuxSys, Sys};

use crate::model::{CpuTimeSource, ProcessSample, SampleWarning};
use crate::platform::{ABSENT, Backend, PackedThread, SampleRequest, Target, ThreadIdent};
use crate::{Error, Result};

#[cfg(test)]
use fake::FakeThread;

/// Size of the scratch buffer for `status` files (they are ~1.5 KiB).
const READ_BUF: usize = 8 * 1024;

/// Which per-thread file gives the cumulative counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CounterFile {
    /// `schedstat`: run ns, run-queue wait ns, timeslices.
    Schedstat,
    /// `stat`: utime + stime ticks (kernels without schedstat).
    Stat,
}

impl CounterFile {
    fn name(self) -> &'static str {
        match self {
            CounterFile::Schedstat => "schedstat",
            CounterFile::Stat => "stat",
        }
    }
}

struct Tracked<F> {
    ident: Arc<ThreadIdent>,
    /// Kept `schedstat` or `stat` descriptor; `None` after descriptor exhaustion.
    counters: Option<F>,
    /// Kept `status` descriptor; `None` after descriptor exhaustion.
    status: Option<F>,
    /// Generation of the last sample that saw this thread.
    seen: u64,
}

/// Outcome of measuring one tracked thread.
enum Measured {
    Sample(PackedThread),
    /// The tracked thread has exited (its kept descriptor answers ESRCH or
    /// its clock is invalid).
    Exited,
    /// Alive, but nothing measurable: another process's thread for which no
    /// descriptor could be opened.
    Unmeasurable,
}

fn is_gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ESRCH) | Some(libc::ENOENT))
}

fn is_exhausted(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// The Linux backend, generic over its syscalls.
pub(crate) struct LinuxBackend<S: Sys> {
    sys: S,
    self_target: bool,
    counter_file: CounterFile,
    tracked: HashMap<u32, Tracked<S::File>>,
    tids: Vec<u32>,
    buf: Box<[u8]>,
    generation: u64,
    next_serial: u64,
    statm: S::File,
    status: S::File,
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
        let main = sys.pid();
        let counter_file = match sys.open(&format!("task/{main}/schedstat")) {
            Ok(_) => CounterFile::Schedstat,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => CounterFile::Stat,
            Err(e) => {
                return Err(Error::from_open(
                    format!("{}/task/{main}/schedstat", sys.base()),
                    e,
                ));
            }
        };
        Ok(LinuxBackend {
            sys,
            self_target: matches!(target, Target::SelfProcess),
            counter_file,
            tracked: HashMap::new(),
            tids: Vec::new(),
            buf: vec![0u8; READ_BUF].into_boxed_slice(),
            generation: 0,
            next_serial: 0,
            statm,
            status,
        })
    }

    fn cpu_time_source(&self) -> CpuTimeSource {
        match (self.self_target, self.counter_file) {
            (true, _) => CpuTimeSource::ThreadClock,
            (false, CounterFile::Schedstat) => CpuTimeSource::Schedstat,
            (false, CounterFile::Stat) => CpuTimeSource::StatTicks,
        }
    }

    /// Opens a per-thread file; `Ok(None)` on descriptor exhaustion,
    /// `Err(())` when the thread is gone.
    fn open_task_file(
        &mut self,
        tid: u32,
        file: &str,
        exhausted: &mut bool,
    ) -> Result<Option<S::File>, ()> {
        if *exhausted {
            return Ok(None);
        }
        match self.sys.open(&format!("task/{tid}/{file}")) {
            Ok(f) => Ok(Some(f)),
            Err(e) if is_gone(&e) => Err(()),
            Err(e) if is_exhausted(&e) => {
                *exhausted = true;
                Ok(None)
            }
            // Other errors (e.g. EACCES on a hardened /proc): sample without it.
            Err(_) => Ok(None),
        }
    }

    /// Starts tracking a thread; `None` if it exited already.
    fn discover(&mut self, tid: u32, exhausted: &mut bool) -> Option<Tracked<S::File>> {
        let counters = self
            .open_task_file(tid, self.counter_file.name(), exhausted)
            .ok()?;
        let status = self.open_task_file(tid, "status", exhausted).ok()?;
        let mut name: Box<str> = "".into();
        if let Some(f) = &status {
            match self.sys.pread(f, &mut self.buf) {
                Ok(n) => {
                    if let Some(raw) = parse::status_name(&self.buf[..n]) {
                        name = String::from_utf8_lossy(raw).into();
                    }
                }
                Err(e) if is_gone(&e) => return None,
                Err(_) => {}
            }
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
            counters,
            status,
            seen: 0,
        })
    }

    /// Reads one tracked thread's counters.
    fn measure(&mut self, tid: u32, t: &mut Tracked<S::File>, request: SampleRequest) -> Measured {
        // Clock first, kept descriptor second (see the module docs).
        let clock_ns = if self.self_target {
            match self.sys.thread_cpu_ns(tid) {
                Some(ns) => Some(ns),
                None => return Measured::Exited,
            }
        } else {
            None
        };
        let mut out = PackedThread {
            ident: t.ident.clone(),
            cpu_time_ns: clock_ns.unwrap_or(ABSENT),
            run_queue_wait_ns: ABSENT,
            timeslices: ABSENT,
            voluntary_switches: ABSENT,
            involuntary_switches: ABSENT,
        };
        if let Some(f) = &t.counters {
            let n = match self.sys.pread(f, &mut self.buf) {
                Ok(n) => n,
                Err(e) if is_gone(&e) => return Measured::Exited,
                Err(_) => 0,
            };
            let bytes = &self.buf[..n];
            match self.counter_file {
                CounterFile::Schedstat => {
                    if let Some((run, wait, slices)) = parse::schedstat(bytes) {
                        if clock_ns.is_none() {
                            out.cpu_time_ns = run;
                        }
                        out.run_queue_wait_ns = wait;
                        out.timeslices = slices;
                    }
                }
                CounterFile::Stat => {
                    if let (None, Some(ticks)) = (clock_ns, parse::stat_cpu_ticks(bytes)) {
                        let tck = self.sys.ticks_per_sec().max(1);
                        out.cpu_time_ns = ticks.saturating_mul(1_000_000_000 / tck);
                    }
                }
            }
        }
        if request.switch_split {
            if let Some(f) = &t.status {
                let n = match self.sys.pread(f, &mut self.buf) {
                    Ok(n) => n,
                    Err(e) if is_gone(&e) => return Measured::Exited,
                    Err(_) => 0,
                };
                let bytes = &self.buf[..n];
                if let Some((vol, invol)) = parse::status_switches(bytes) {
                    out.voluntary_switches = vol;
                    out.involuntary_switches = invol;
                }
                if let Some(raw) = parse::status_name(bytes) {
                    if raw != t.ident.name.as_bytes() {
                        // Renamed (pthread_setname_np): new identity record, same serial.
                        t.ident = Arc::new(ThreadIdent {
                            tid: t.ident.tid,
                            serial: t.ident.serial,
                            name: String::from_utf8_lossy(raw).into(),
                            cpu_time_source: t.ident.cpu_time_source,
                        });
                        out.ident = t.ident.clone();
                    }
                }
            }
        }
        if out.cpu_time_ns == ABSENT {
            return Measured::Unmeasurable;
        }
        Measured::Sample(out)
    }

    fn process_sample(&mut self, thread_count: u32) -> Result<ProcessSample> {
        let gone = |sys: &mut S, e: io::Error, file: &str| {
            if is_gone(&e) || !sys.target_alive() {
                Error::NoSuchProcess { pid: sys.pid() }
            } else {
                Error::Unreadable {
                    path: format!("{}/{file}", sys.base()),
                    source: e,
                }
            }
        };
        let n = match self.sys.pread(&self.statm, &mut self.buf) {
            Ok(n) => n,
            Err(e) => return Err(gone(&mut self.sys, e, "statm")),
        };
        let rss_pages = parse::statm_resident_pages(&self.buf[..n]).unwrap_or(0);
        let n = match self.sys.pread(&self.status, &mut self.buf) {
            Ok(n) => n,
            Err(e) => return Err(gone(&mut self.sys, e, "status")),
        };
        let peak_kib = parse::status_field(&self.buf[..n], b"VmHWM");
        Ok(ProcessSample {
            pid: self.sys.pid(),
            rss_bytes: rss_pages.saturating_mul(self.sys.page_size()),
            peak_rss_bytes: peak_kib.map(|k| k.saturating_mul(1024)),
            phys_footprint_bytes: None,
            cpu_time_ns: self.sys.process_cpu_ns().unwrap_or(0),
            thread_count,
            interrupt_wakeups: None,
            platform_idle_wakeups: None,
        })
    }

    /// Number of threads currently tracked (holding descriptors).
    #[cfg(test)]
    pub(crate) fn tracked_len(&self) -> usize {
        self.tracked.len()
    }
}

impl<S: Sys> Backend for LinuxBackend<S> {
    fn sample(
        &mut self,
        request: SampleRequest,
        threads: &mut Vec<PackedThread>,
        warnings: &mut Vec<SampleWarning>,
    ) -> Result<ProcessSample> {
        threads.clear();
        let mut tids = std::mem::take(&mut self.tids);
        if let Err(e) = self.sys.list_tasks(&mut tids) {
            self.tids = tids;
            return Err(if is_gone(&e) || !self.sys.target_alive() {
                Error::NoSuchProcess {
                    pid: self.sys.pid(),
                }
            } else {
                Error::Unreadable {
                    path: format!("{}/task", self.sys.base()),
                    source: e,
                }
            });
        }
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let mut exhausted = false;
        let mut without_descriptors = 0u32;
        for &tid in &tids {
            // At most two rounds: a tracked thread found exited while its TID
            // is listed means the TID was reused; track the new thread.
            for _round in 0..2 {
                let mut t = match self.tracked.remove(&tid) {
                    Some(t) => t,
                    None => match self.discover(tid, &mut exhausted) {
                        Some(t) => t,
                        None => break, // exited between listing and opening
                    },
                };
                if t.counters.is_none() {
                    t.counters = self
                        .open_task_file(tid, self.counter_file.name(), &mut exhausted)
                        .ok()
                        .flatten();
                }
                if t.status.is_none() {
                    t.status = self
                        .open_task_file(tid, "status", &mut exhausted)
                        .ok()
                        .flatten();
                }
                match self.measure(tid, &mut t, request) {
                    Measured::Sample(p) => {
                        if t.counters.is_none() || t.status.is_none() {
                            without_descriptors += 1;
                        }
                        t.seen = generation;
                        threads.push(p);
                        self.tracked.insert(tid, t);
                        break;
                    }
                    Measured::Unmeasurable => {
                        without_descriptors += 1;
                        t.seen = generation;
                        self.tracked.insert(tid, t);
                        break;
                    }
                    Measured::Exited => {
                        // Dropping `t` closes its descriptors. Without a kept
                        // descriptor the exit came from the clock: the TID is
                        // free, nothing to re-discover.
                        if t.counters.is_none() {
                            break;
                        }
                    }
                }
            }
        }
        // Threads not listed any more have exited: close their descriptors.
        self.tracked.retain(|_, t| t.seen == generation);
        self.tids = tids;
        if without_descriptors > 0 {
            warnings.push(SampleWarning::DescriptorsExhausted {
                threads_without_descriptors: without_descriptors,
            });
        }
        let count = u32::try_from(threads.len()).unwrap_or(u32::MAX);
        self.process_sample(count)
    }
}
