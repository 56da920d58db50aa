//! The reads of one sample: a thread's CPU clock, `schedstat`, `stat` and
//! `status`, and the process's files, through kept descriptors or
//! open-read-close.

use super::*;

/// Everything that reads: the syscalls, the scratch buffer and the
/// process-level descriptors (split from the tracking table so both can be
/// borrowed at once).
pub(super) struct Reader<S: Sys> {
    pub(super) sys: S,
    pub(super) self_target: bool,
    pub(super) counter_file: CounterFile,
    pub(super) buf: Box<[u8]>,
    pub(super) next_serial: u64,
    /// Kept process-level descriptors; `None` when the backend keeps none
    /// (opened, read and closed each sample: see `ProcessFiles`).
    pub(super) statm: Option<S::File>,
    pub(super) status: Option<S::File>,
    pub(super) fds: Descriptors,
    /// Highest resident set seen so far, in bytes (`VmHWM` or a later RSS).
    pub(super) peak_rss_bytes: Option<u64>,
}
impl<S: Sys> Reader<S> {
    pub(super) fn cpu_time_source(&self) -> CpuTimeSource {
        match (self.self_target, self.counter_file) {
            (true, _) => CpuTimeSource::ThreadClock,
            (false, CounterFile::Schedstat) => CpuTimeSource::Schedstat,
            (false, CounterFile::Stat) => CpuTimeSource::StatTicks,
        }
    }

    /// Reads a per-thread file into the scratch buffer: through its kept
    /// descriptor, or else by opening it, keeping the new descriptor in
    /// `kept` when the policy allows and closing it otherwise.
    pub(super) fn read_task_file(
        &mut self,
        tid: u32,
        file: TaskFile,
        kept: &mut Option<S::File>,
    ) -> FileRead {
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
    pub(super) fn discover(&mut self, tid: u32, short: &mut bool) -> Option<Tracked<S::File>> {
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
            last_fresh: false,
            split: None,
        })
    }

    /// Reads one tracked thread's counters. Sets `short` when a file could
    /// not be read for want of descriptors.
    pub(super) fn measure(
        &mut self,
        tid: u32,
        t: &mut Tracked<S::File>,
        request: SampleRequest<'_>,
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
    pub(super) fn schedstat_counters(
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
                    t.last_fresh = true;
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
            t.last_fresh = true;
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
            t.last_fresh = false;
            return Ok(None);
        }
        Ok(sched)
    }

    /// Reads and parses `schedstat`; `Err` when the thread (or the thread
    /// this TID belonged to) has exited.
    pub(super) fn read_schedstat(
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
    pub(super) fn clock_first(&mut self, tid: u32, last: LastRead) -> Result<ClockFirst, Exited> {
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
    pub(super) fn clock_after_schedstat(
        &mut self,
        tid: u32,
        sched: Option<Sched>,
    ) -> Result<u64, Exited> {
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
    pub(super) fn stat_counters(
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
    pub(super) fn switch_counts(
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
    pub(super) fn process_error(&mut self, e: io::Error, file: &str) -> Error {
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
            // EMFILE/ENFILE of a file opened for this sample: out of
            // descriptors (this sample fails, the next may not).
            Error::from_open(format!("{}/{file}", self.sys.base()), e)
        }
    }

    /// Reads a process-level file into the scratch buffer: through its kept
    /// descriptor, or opened, read and closed.
    fn read_process_file(&mut self, file: ProcessFile) -> io::Result<usize> {
        let kept = match file {
            ProcessFile::Statm => &self.statm,
            _ => &self.status,
        };
        match kept {
            Some(f) => self.sys.pread(f, &mut self.buf),
            None => {
                let f = self.sys.open_process(file)?;
                self.sys.pread(&f, &mut self.buf)
            }
        }
    }

    /// Reads the process `status`: (`Threads:` count, `VmHWM:` in KiB).
    pub(super) fn process_status(&mut self) -> Result<(Option<u64>, Option<u64>)> {
        let n = match self.read_process_file(ProcessFile::Status) {
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
    pub(super) fn process_counts(
        &mut self,
        request: SampleRequest<'_>,
    ) -> Result<(Option<u64>, Option<u64>)> {
        if self.self_target
            && !request.switch_split
            && self.peak_rss_bytes.is_some()
            && let Some(n) = self.sys.task_count()
        {
            return Ok((Some(n), None));
        }
        self.process_status()
    }

    pub(super) fn process_sample(
        &mut self,
        thread_count: u32,
        peak_kib: Option<u64>,
    ) -> Result<ProcessSample> {
        let n = match self.read_process_file(ProcessFile::Statm) {
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
