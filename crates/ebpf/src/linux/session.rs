//! One watched target: its attach to a shared program set, its reads, its
//! detach.

use super::*;

/// The next reader id for the task iterator (never 0: 0 asks for every
/// entry whole).
fn next_reader() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

pub(crate) struct Session {
    pid: u32,
    /// `pid` in the initial PID namespace: the id the programs see.
    kernel_tgid: u32,
    /// Whether ids are reported as a PID namespace of the observer's own
    /// numbers them (the entries' `ns_tid`), not as the map keys.
    in_namespace: bool,
    /// `None` when observing this very process.
    watch: Option<ExitWatch>,
    attach_duration: Duration,
    /// Whether this attach loaded the programs (else it joined a set).
    loaded: bool,
    top_wakers: usize,
    /// Entries the last read fetched.
    last_read_entries: u32,
    /// Thread ids of the last listing (a reused buffer).
    tids: Vec<u32>,
    /// The kind of each socket (by inode) a ready descriptor was, so that
    /// a socket's protocol tables are read once, not at every read.
    socket_kinds: SocketKinds,
    /// This session's id to the task iterator: entries it got whole and
    /// that did not change since come back as a head alone, answered from
    /// `kept`. A new id (after a failed read) asks for everything whole.
    reader: u64,
    /// What the last reads got of each thread's entry, by thread id (the
    /// programs' id), for the task iterator's unchanged rows.
    kept: std::collections::HashMap<u32, Kept>,
    /// Reads so far (`Kept::seen`).
    reads: u64,
    /// Threads the last read found blocked since the read before it, by
    /// reported id, ascending (`KernelSource::quiet_threads`).
    quiet: Vec<u64>,
    /// The list of threads of the last read's sample, given back by the
    /// sampler (`KernelSource::recycle`), sorted by thread id: the next
    /// read updates it in place, an entry unchanged since by growing its
    /// record's span in progress instead of converting it again. Empty
    /// when the last read's sample was not given back.
    previous: Vec<KernelThreadStats>,
    /// When the records of `previous` were converted (`now` of their read),
    /// and which read made them (`reads` then).
    previous_at: (u64, u64),
    /// Which records of the list a read has updated (by index).
    updated: Vec<bool>,
    /// The list the last read handed out: where it lives (to know it when
    /// it comes back; 0: none), that read's `now` and its number.
    lent: (usize, u64, u64),
    /// `None` once the target has exited (it left the set).
    set: Option<Arc<Mutex<ProgramSet>>>,
    /// Kind, hook and capacity of the set, kept after it is gone.
    kind: AttachKind,
    syscall_hook: SyscallHook,
    max_threads: u32,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EbpfSession")
            .field("pid", &self.pid)
            .field("attach_duration", &self.attach_duration)
            .field("loaded_programs", &self.loaded)
            .field("kind", &self.kind)
            .field("syscall_hook", &self.syscall_hook)
            .field("attached", &self.set.is_some())
            .finish()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(set) = self.set.take() {
            lock(&set).leave(self.kernel_tgid);
        }
    }
}

/// The process a target names, and an exit watch when it is another one.
///
/// # Errors
/// [`EbpfError::NoSuchProcess`] for a PID or TID that does not exist;
/// [`EbpfError::UnsupportedTarget`] for a target kind added to the core later.
pub(crate) fn resolve_target(target: Target) -> Result<(u32, Option<ExitWatch>), EbpfError> {
    let own = std::process::id();
    match target {
        Target::SelfProcess => Ok((own, None)),
        Target::Pid(p) => {
            let pid = sys::process_of(p)?;
            let watch = (pid != own).then(|| ExitWatch::new(pid)).transpose()?;
            Ok((pid, watch))
        }
        // A target kind added to the core later: refuse it rather than
        // observe the wrong process.
        other => Err(EbpfError::UnsupportedTarget {
            target: format!("{other:?}"),
        }),
    }
}

impl Session {
    pub(crate) fn attach(options: &EbpfSourceBuilder) -> Result<Session, EbpfError> {
        let started = Instant::now();
        let (pid, watch) = resolve_target(options.target)?;
        let threads = sys::thread_count(pid);
        // Twice its threads now, as a new map would be sized for it alone.
        let reserve = threads
            .unwrap_or(1)
            .saturating_mul(2)
            .clamp(2, MAX_THREADS_LIMIT);
        object(false)?;
        sys::check_kernel_btf(options.kernel_btf.as_deref())?;
        sys::check_privileges()?;
        let btf = kernel_btf(options.kernel_btf.as_deref())?;
        let btf = btf.as_ref();
        let namespace = pid_ns::proc_namespace();
        let kernel_tgid = match namespace {
            Some(ns) => ns.host_ids(pid, btf)?.tgid,
            None => pid,
        };
        let pidns_ino = namespace.map_or(0u64, |ns| ns.ino);

        let (set, loaded) = program_set(
            options,
            kernel_tgid,
            reserve,
            auto_max_threads(threads),
            btf,
            pidns_ino,
        )?;
        let (kind, syscall_hook, max_threads) = {
            let mut s = lock(&set);
            let new = s.join(kernel_tgid, reserve)?;
            // In another PID namespace the /proc ids are not the map's keys.
            if new && namespace.is_none() {
                s.seed_blocked_threads(pid, kernel_tgid);
            }
            (s.kind, s.syscall_hook, s.capacity())
        };
        Ok(Session {
            pid,
            kernel_tgid,
            in_namespace: namespace.is_some(),
            watch,
            attach_duration: started.elapsed(),
            loaded,
            top_wakers: options.top_wakers.min(abi::WAKER_SLOTS),
            last_read_entries: 0,
            tids: Vec::new(),
            socket_kinds: SocketKinds::default(),
            reader: next_reader(),
            kept: std::collections::HashMap::new(),
            reads: 0,
            quiet: Vec::new(),
            previous: Vec::new(),
            previous_at: (0, 0),
            updated: Vec::new(),
            lent: (0, 0, 0),
            set: Some(set),
            kind,
            syscall_hook,
            max_threads,
        })
    }

    pub(crate) fn max_threads(&self) -> u32 {
        self.max_threads
    }

    pub(crate) fn loaded_programs(&self) -> bool {
        self.loaded
    }

    pub(crate) fn watched_processes(&self) -> usize {
        self.set.as_ref().map_or(0, |s| lock(s).members.len())
    }

    /// The program set, or [`KernelSourceError::TargetExited`] once the
    /// target is gone, leaving the set the moment that is noticed.
    pub(super) fn live_set(&mut self) -> Result<Arc<Mutex<ProgramSet>>, KernelSourceError> {
        let exited = self.watch.as_ref().is_some_and(ExitWatch::has_exited)
            || self
                .set
                .as_ref()
                .and_then(|s| lock(s).target(self.kernel_tgid).ok())
                .is_some_and(|t| t.dead != 0);
        if exited {
            // Leave now rather than when the source is dropped, and let go
            // of the process handle too.
            if let Some(set) = self.set.take() {
                lock(&set).leave(self.kernel_tgid);
            }
            self.watch = None;
        }
        let pid = self.pid;
        self.set
            .clone()
            .ok_or(KernelSourceError::TargetExited { pid })
    }

    pub(crate) fn map_usage(&mut self) -> Result<MapUsage, KernelSourceError> {
        let last_read_entries = self.last_read_entries;
        let max_threads = self.max_threads;
        let tgid = u64::from(self.kernel_tgid);
        let set = self.live_set()?;
        let mut set = lock(&set);
        let mut waker_slots = 0usize;
        let mut threads = 0u32;
        let set_threads = set.live.for_each_thread(|_, raw| {
            if raw.tgid == tgid {
                threads += 1;
                waker_slots += raw.waker_slots_used();
            }
        })?;
        Ok(MapUsage {
            task_storage: set.live.store.is_task(),
            threads,
            set_threads,
            max_threads,
            waker_slots: u32::try_from(waker_slots).unwrap_or(u32::MAX),
            last_read_entries,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn attach_duration(&self) -> Duration {
        self.attach_duration
    }

    pub(crate) fn load_duration(&self) -> Option<Duration> {
        self.set.as_ref().map(|s| lock(s).load_duration)
    }

    pub(crate) fn attach_kind(&self) -> AttachKind {
        self.kind
    }

    pub(crate) fn syscall_hook(&self) -> SyscallHook {
        self.syscall_hook
    }

    pub(crate) fn program_stats(&self) -> Result<Vec<ProgramRunStats>, EbpfError> {
        let Some(set) = &self.set else {
            return Ok(Vec::new());
        };
        let set = lock(set);
        let live = &set.live;
        live.programs
            .iter()
            .map(|&name| {
                let program = live
                    .ebpf
                    .program(name)
                    .ok_or(EbpfError::ObjectMismatch { name })?;
                let info = program.info().map_err(program_error(name))?;
                Ok(ProgramRunStats {
                    name: name.to_owned(),
                    run_time_ns: u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
                    run_count: info.run_count(),
                })
            })
            .collect()
    }

    /// Threads the last read found blocked since the read before it (see
    /// `KernelSource::quiet_threads`), ascending.
    pub(crate) fn quiet_threads(&self) -> &[u64] {
        &self.quiet
    }

    /// Keeps `sample`'s list of threads for the next read to update in
    /// place, up to [`MAX_KEPT_RECORDS`] threads. A list other than the
    /// last read's is dropped.
    pub(crate) fn recycle(&mut self, sample: KernelSample) {
        let threads = sample.threads;
        let (at, now, read) = std::mem::take(&mut self.lent);
        if at != 0 && threads.as_ptr().addr() == at && threads.len() <= MAX_KEPT_RECORDS {
            self.previous = threads;
            self.previous_at = (now, read);
        }
    }

    pub(crate) fn read(&mut self) -> Result<KernelSample, KernelSourceError> {
        self.quiet.clear();
        let pid = self.pid;
        let tgid = self.kernel_tgid;
        let top_wakers = self.top_wakers;
        let in_namespace = self.in_namespace;
        let set = self.live_set()?;
        let mut set = lock(&set);
        // A clock step (settimeofday, an NTP step) since the last read
        // reaches the kernel side here.
        set.live
            .realtime_offset
            .set(0, &realtime_offset_ns(), 0)
            .map_err(read_error("realtime_offset"))?;
        let now = wakemeter::monotonic_ns();

        // The last read's list, when its sample came back, is updated in
        // place: an entry unchanged since keeps its record, its span grown
        // to `now` (converting it again was 13% of a 1,000-thread
        // watcher's CPU), and a list of 1,000 threads (about 400 KiB) is
        // not allocated anew (it was mapped, faulted in page by page and
        // unmapped at every read). Thread ids there are the programs' own
        // (no namespace to map). One list, not two: a second, kept between
        // reads, broke the watcher's memory bound (`ebpf_memory.rs`).
        let store_is_task = set.live.store.is_task();
        let (then, made_by) = self.previous_at;
        let mut threads = std::mem::take(&mut self.previous);
        if made_by != self.reads || in_namespace || !store_is_task {
            threads.clear();
        }
        // Sized by the last read: grown by doubling, the list of a process
        // of 20,000 threads (about 360 bytes an entry) would hold up to
        // twice what it needs.
        threads.reserve((self.last_read_entries as usize).saturating_sub(threads.len()));
        // The last read's records are the list's first ones (sorted, and
        // searched there); records of threads they lack go after them.
        let mut earlier = Earlier::new(threads.len(), &mut self.updated);
        // An entry's stats without its ready descriptors (whose kinds come
        // from /proc: see `with_fds`). `None`: an entry without an id in
        // the observer's PID namespace.
        let base = |tid: u32, raw: &WmThread| -> Option<KernelThreadStats> {
            if !in_namespace {
                Some(thread_stats(tid, raw, now, top_wakers))
            } else if let Ok(ns_tid) = u32::try_from(raw.ns_tid)
                && ns_tid != 0
            {
                // A thread of the target is always visible where the
                // target is; an entry without an id there cannot be joined
                // to the threads of /proc, so it is left out.
                let mut t = thread_stats(ns_tid, raw, now, top_wakers);
                for w in &mut t.top_wakers {
                    w.tid = namespace_waker(raw, w.tid);
                }
                Some(t)
            } else {
                None
            }
        };
        let socket_kinds = &mut self.socket_kinds;
        let mut with_fds = |mut t: KernelThreadStats, raw: &WmThread| {
            t.ready_fds = socket_kinds.ready_fds(pid, raw);
            t
        };

        // Alone in its set (or named by another PID namespace's ids), a
        // process reads the whole map in batches. Beside others, it looks
        // up its own threads, listed from /proc: a read then costs its own
        // threads, not every watched process's.
        let mine = set.members.get(&tgid).map_or(0, |m| m.reserved);
        let alone = mine.saturating_mul(2) >= set.reserved;
        // The task iterator writes out this process's entries only, and
        // of those only the ones that changed since this session's last
        // read whole: the others come from `kept`.
        let Live { ebpf, store, .. } = &mut set.live;
        let fetched = if store.is_task() {
            self.reads = self.reads.wrapping_add(1);
            let seq = self.reads;
            let kept = &mut self.kept;
            let quiet = &mut self.quiet;
            let mut lost = false;
            let walked = store.for_each_of(ebpf, (tgid, pid), &[], self.reader, |tid, raw| {
                match raw {
                    Some(raw) if raw.tgid == u64::from(tgid) => {
                        let stats = base(tid, raw).map(|t| with_fds(t, raw));
                        let fds = stats.as_ref().map_or(&[][..], |t| &t.ready_fds[..]);
                        kept.insert(tid, Kept::new(raw, fds, seq));
                        if let Some(t) = stats {
                            match earlier.find(&mut threads, tid) {
                                Some(record) => *record = t,
                                None => threads.push(t),
                            }
                        }
                    }
                    Some(_) => {}
                    None => match kept.get_mut(&tid) {
                        Some(k) => {
                            k.seen = seq;
                            // As the whole entry would be converted: the
                            // span in progress grows to `now`.
                            let reported = match earlier.find(&mut threads, tid) {
                                Some(record) => {
                                    convert::advance(record, k.span, then, now);
                                    Some(record.tid)
                                }
                                None => base(tid, &k.raw()).map(|mut t| {
                                    t.ready_fds = k.ready_fds();
                                    let id = t.tid;
                                    threads.push(t);
                                    id
                                }),
                            };
                            // Blocked when last read whole, and not
                            // switched, woken or renamed since.
                            if let Some(id) = reported
                                && k.blocked
                            {
                                quiet.push(id);
                            }
                        }
                        // Never seen whole by this session: cannot be.
                        None => lost = true,
                    },
                }
            });
            // After a failed walk (or an unchanged row this session has no
            // copy of) the kernel's marks and `kept` may disagree: a new
            // reader id makes the next walk hand every entry whole.
            if walked.is_err() || lost {
                self.reader = next_reader();
                self.kept.clear();
                self.quiet.clear();
            } else {
                self.kept.retain(|_, k| k.seen == seq);
            }
            walked?
        } else {
            let mut each = |tid: u32, raw: &WmThread| {
                if raw.tgid == u64::from(tgid)
                    && let Some(t) = base(tid, raw)
                {
                    threads.push(with_fds(t, raw));
                }
            };
            if alone || in_namespace || !sys::list_tids(pid, &mut self.tids) {
                store.for_each(ebpf, &mut each)?
            } else {
                store.for_each_of(ebpf, (tgid, pid), &self.tids, 0, |tid, raw| {
                    if let Some(raw) = raw {
                        each(tid, raw);
                    }
                })?
            }
        };
        // The last read's records of threads no entry was read for go
        // (they exited).
        earlier.keep_updated(&mut threads);
        // Thread ids are unique: the unstable sort needs no scratch copy
        // (the stable one allocates half the list again).
        threads.sort_unstable_by_key(|t| t.tid);
        self.quiet.sort_unstable();
        let record = set.target(tgid)?;
        self.last_read_entries = fetched;

        self.lent = (threads.as_ptr().addr(), now, self.reads);
        let mut sample = KernelSample::default();
        sample.source = "ebpf".to_owned();
        sample.pid = pid;
        sample.threads = threads;
        sample.total_dropped_events = record.dropped;
        sample.total_thread_exits = record.exits;
        Ok(sample)
    }
}

/// The most threads whose records a session keeps between reads (about
/// 1 KiB each with their names, wakers and histograms): a process with more
/// has its unchanged entries converted again at each read and its list
/// allocated anew. Kept at 20,000 threads, they raised the watcher's peak
/// from 50 to 70 MB, past its 64 MiB bound (RELIABILITY.md).
pub(crate) const MAX_KEPT_RECORDS: usize = 4096;

/// Finds the last read's records, the first ones of the list, by thread
/// id, and notes which were updated: the record after the last one found
/// is tried first (the task iterator walks a process's threads in the
/// order they were made, mostly that of their ids), then a binary search
/// (those records are sorted by thread id, each id once).
struct Earlier<'a> {
    next: usize,
    updated: &'a mut Vec<bool>,
}

impl<'a> Earlier<'a> {
    /// For a list whose first `len` records are the last read's;
    /// `updated` is scratch space.
    fn new(len: usize, updated: &'a mut Vec<bool>) -> Self {
        updated.clear();
        updated.resize(len, false);
        Earlier { next: 0, updated }
    }

    /// The last read's record of `tid` in `records`, noted as updated.
    fn find<'r>(
        &mut self,
        records: &'r mut [KernelThreadStats],
        tid: u32,
    ) -> Option<&'r mut KernelThreadStats> {
        let tid = u64::from(tid);
        let records = records.get_mut(..self.updated.len())?;
        let at = match records.get(self.next) {
            Some(r) if r.tid == tid => self.next,
            _ => records.binary_search_by_key(&tid, |r| r.tid).ok()?,
        };
        self.next = at + 1;
        *self.updated.get_mut(at)? = true;
        records.get_mut(at)
    }

    /// Drops the last read's records not updated (the records after them
    /// are new, and stay).
    fn keep_updated(&self, records: &mut Vec<KernelThreadStats>) {
        let mut at = 0;
        records.retain(|_| {
            let keep = self.updated.get(at).copied().unwrap_or(true);
            at += 1;
            keep
        });
    }
}

pub(super) fn map_error(map: &'static str) -> impl Fn(MapError) -> EbpfError {
    move |source| EbpfError::Map { map, source }
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC` now, in nanoseconds: the monotonic
/// clock read on both sides of the real-time one, so the error is half the
/// time between the two monotonic reads (well under a microsecond). 1 when
/// the two clocks happen to agree, since the kernel side reads 0 as unknown.
pub(super) fn realtime_offset_ns() -> i64 {
    let before = wakemeter::monotonic_ns();
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
    let after = wakemeter::monotonic_ns();
    let mono = (i128::from(before) + i128::from(after)) / 2;
    let offset = i64::try_from(real - mono).unwrap_or(0);
    if offset == 0 { 1 } else { offset }
}

pub(super) fn read_error(map: &'static str) -> impl Fn(MapError) -> KernelSourceError {
    move |e| KernelSourceError::Read(format!("eBPF map {map}: {e}"))
}

pub(super) fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, EbpfError> {
    ebpf.take_map(name)
        .ok_or(EbpfError::ObjectMismatch { name })
}
