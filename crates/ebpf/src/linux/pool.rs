//! The program pool: one loaded set of programs shared by every source of
//! the host process with the same options.

use super::*;

/// Maps and programs of one loaded program set. Field order is drop order:
/// the programs detach first.
pub(super) struct Live {
    pub(super) ebpf: Ebpf,
    /// The per-thread entries, shared by every watched process of the set.
    pub(super) store: Store,
    /// The watched-process bitmap (`abi::TGID_WORDS` words).
    pub(super) watched: Array<MapData, u64>,
    /// Per watched process: exits, drops, death ([`WmTarget`]).
    pub(super) targets: HashMap<MapData, u32, WmTarget>,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC` for the kernel side (see
    /// [`realtime_offset_ns`]), refreshed at every read.
    pub(super) realtime_offset: Array<MapData, i64>,
    /// Names of the programs that are attached.
    pub(super) programs: Vec<&'static str>,
    /// Capacity of the per-thread hash map, in entries; with task storage,
    /// which has none, what it would have been (see [`MapUsage::max_threads`]).
    pub(super) max_threads: usize,
}

impl Live {
    /// Calls `each` with every entry of every watched process.
    pub(super) fn for_each_thread(
        &mut self,
        each: impl FnMut(u32, &WmThread),
    ) -> Result<u32, KernelSourceError> {
        self.store.for_each(&mut self.ebpf, each)
    }
}

/// One watched process of a [`ProgramSet`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Member {
    /// Entries of the per-thread map set aside for it (twice its threads at
    /// join).
    pub(super) reserved: u32,
    /// Sessions watching it (two samplers may watch one process).
    pub(super) sessions: u32,
}

/// One loaded and attached set of kernel programs and the processes it
/// watches. Every [`Session`] with the same options shares one (see
/// [`shared_set`]), so watching N processes costs one attach and one set of
/// hooks: the machine-wide cost of a syscall or a switch does not grow with N.
pub(super) struct ProgramSet {
    pub(super) live: Live,
    /// Watched processes by initial-namespace id.
    pub(super) members: std::collections::BTreeMap<u32, Member>,
    /// Sum of the members' reservations, in entries.
    pub(super) reserved: u32,
    /// The nonzero words of the watched bitmap, as last written.
    pub(super) words: std::collections::HashMap<u32, u64>,
    pub(super) kind: AttachKind,
    pub(super) syscall_hook: SyscallHook,
    /// What loading and attaching took.
    pub(super) load_duration: Duration,
}

/// Options two sessions must agree on to share a [`ProgramSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ShareKey {
    pub(super) syscalls: bool,
    pub(super) kind: AttachKind,
}

/// The program sets that sessions may join, by their options. Weak: a set
/// goes (programs detached, maps freed) when its last session drops.
pub(super) static SHARED_SETS: Mutex<Vec<(ShareKey, Weak<Mutex<ProgramSet>>)>> =
    Mutex::new(Vec::new());

// A panic while holding a lock leaves plain maps behind, still usable.
pub(super) use wakemeter::sync::lock;

impl ProgramSet {
    /// Loads the object and attaches its programs as `options` ask, with
    /// the entries in task storage where every hook attaches as `tp_btf`
    /// and the task iterator loads (Linux 5.11+), else in a hash map of
    /// `max_threads` entries. A fixed capacity
    /// ([`EbpfSourceBuilder::with_max_threads`]) asks for the hash map.
    pub(super) fn load(
        options: &EbpfSourceBuilder,
        max_threads: u32,
        btf: &Btf,
        pidns_ino: u64,
    ) -> Result<ProgramSet, EbpfError> {
        let started = Instant::now();
        let task_store = options.kind != AttachKind::RawTracepoint && options.max_threads.is_none();
        let mut set =
            match task_store.then(|| Self::load_as(options, max_threads, btf, pidns_ino, true)) {
                Some(Ok(set)) => set,
                // Dropping the failed attempt detached and freed all of it.
                _ => Self::load_as(options, max_threads, btf, pidns_ino, false)?,
            };
        set.load_duration = started.elapsed();
        Ok(set)
    }

    /// One attempt of [`ProgramSet::load`]: with `task_store`, every hook
    /// must attach as `tp_btf`.
    pub(super) fn load_as(
        options: &EbpfSourceBuilder,
        max_threads: u32,
        btf: &Btf,
        pidns_ino: u64,
        task_store: bool,
    ) -> Result<ProgramSet, EbpfError> {
        // The store not used gets a single entry (hash maps are allocated
        // in full at creation).
        let (threads_entries, seeds_entries) = if task_store {
            (1, max_threads)
        } else {
            (max_threads, 1)
        };
        let mut ebpf = EbpfLoader::new()
            // aya has no type for task storage maps; it creates them all
            // the same, and only the programs use this one.
            .allow_unsupported_maps()
            .btf(btf)
            .override_global("pidns_ino", &pidns_ino, true)
            .override_global("syscalls_on", &u32::from(options.syscalls), true)
            .override_global("parts_off", &options.parts_off, true)
            .map_max_entries("threads", threads_entries)
            .map_max_entries("seeds", seeds_entries)
            .load(object(task_store)?)
            .map_err(|source| EbpfError::Load { source })?;

        // Before any program runs: absolute CLOCK_REALTIME sleeps need it.
        let mut realtime_offset = Array::try_from(take_map(&mut ebpf, "realtime_offset")?)
            .map_err(map_error("realtime_offset"))?;
        realtime_offset
            .set(0, &realtime_offset_ns(), 0)
            .map_err(map_error("realtime_offset"))?;
        let watched =
            Array::try_from(take_map(&mut ebpf, "watched")?).map_err(map_error("watched"))?;
        let targets =
            HashMap::try_from(take_map(&mut ebpf, "targets")?).map_err(map_error("targets"))?;
        let store = if task_store {
            // Loaded before any hook attaches: without it the entries
            // could not be read.
            let iterator: &mut Iter = program_of(&mut ebpf, store::ITERATOR)?;
            iterator
                .load("task", btf)
                .map_err(program_error(store::ITERATOR))?;
            let ctl = take_map(&mut ebpf, "iter_ctl")?;
            let seeds = take_map(&mut ebpf, "seeds")?;
            Store::task(ctl, seeds).map_err(map_error("seeds"))?
        } else {
            let threads = take_map(&mut ebpf, "threads")?;
            let capacity = usize::try_from(max_threads).unwrap_or(usize::MAX);
            Store::hash(threads, capacity).map_err(map_error("threads"))?
        };
        let kind = if task_store {
            AttachKind::BtfTracepoint
        } else {
            options.kind
        };

        let mut programs = Vec::with_capacity(HOOKS.len());
        let (mut on_btf, mut on_raw) = (0usize, 0usize);
        let calibration = options.calibration.then_some(&CALIBRATION);
        let hooks = HOOKS
            .iter()
            .filter(|h| options.syscalls || !h.tracepoint.starts_with("sys_"))
            .chain(calibration);
        let mut syscall_hook = SyscallHook::Off;
        for hook in hooks {
            if hook.tracepoint == "sys_exit" {
                syscall_hook = SyscallHook::SysExit;
                // Auto prefers the per-syscall tracepoints where tracefs is
                // mounted; any failure there falls back to sys_exit.
                if options.kind == AttachKind::Auto
                    && per_syscall_tracepoints_available()
                    && attach_per_syscall(&mut ebpf).is_ok()
                {
                    syscall_hook = SyscallHook::PerSyscall;
                    programs.push(PER_SYSCALL_PROGRAM);
                    continue;
                }
            }
            let name = attach_hook(&mut ebpf, hook, kind, btf)?;
            if name == hook.btf_program {
                on_btf += 1;
            } else {
                on_raw += 1;
            }
            programs.push(name);
        }
        let kind = match (on_btf, on_raw) {
            (_, 0) => AttachKind::BtfTracepoint,
            (0, _) => AttachKind::RawTracepoint,
            _ => AttachKind::Mixed,
        };

        Ok(ProgramSet {
            live: Live {
                ebpf,
                store,
                watched,
                targets,
                realtime_offset,
                programs,
                max_threads: usize::try_from(max_threads).unwrap_or(usize::MAX),
            },
            members: std::collections::BTreeMap::new(),
            reserved: 0,
            words: std::collections::HashMap::new(),
            kind,
            syscall_hook,
            load_duration: Duration::ZERO,
        })
    }

    /// Capacity of the per-thread map, in entries.
    pub(super) fn capacity(&self) -> u32 {
        u32::try_from(self.live.max_threads).unwrap_or(u32::MAX)
    }

    /// Whether a process needing `reserve` entries fits beside the members.
    /// Task storage has no capacity to share: only the number of
    /// processes is bounded.
    pub(super) fn has_room(&self, tgid: u32, reserve: u32) -> bool {
        self.members.contains_key(&tgid)
            || (self.members.len() < abi::MAX_TARGETS
                && (self.live.store.is_task()
                    || self.reserved.saturating_add(reserve) <= self.capacity()))
    }

    /// Adds process `tgid` (initial-namespace id) to the watched set: its
    /// record first, then its bit, so the programs never see a watched
    /// process without a record. From the next event on its threads are
    /// counted, with no new attach.
    /// Returns whether the process is new to the set.
    pub(super) fn join(&mut self, tgid: u32, reserve: u32) -> Result<bool, EbpfError> {
        if let Some(m) = self.members.get_mut(&tgid) {
            m.sessions = m.sessions.saturating_add(1);
            return Ok(false);
        }
        let word = tgid >> 6;
        if word >= abi::TGID_WORDS {
            // Above PID_MAX_LIMIT: no process can have this id.
            return Err(EbpfError::UnsupportedTarget {
                target: format!("process id {tgid}"),
            });
        }
        self.live
            .targets
            .insert(&tgid, &WmTarget::default(), 0)
            .map_err(map_error("targets"))?;
        let bits = self.words.get(&word).copied().unwrap_or(0) | (1u64 << (tgid & 63));
        if let Err(e) = self.live.watched.set(word, &bits, 0) {
            let _ = self.live.targets.remove(&tgid);
            return Err(map_error("watched")(e));
        }
        self.words.insert(word, bits);
        self.members.insert(
            tgid,
            Member {
                reserved: reserve,
                sessions: 1,
            },
        );
        self.reserved = self.reserved.saturating_add(reserve);
        Ok(true)
    }

    /// Gives every thread of process `pid` (`tgid` in the initial PID
    /// namespace) that is blocked right now an entry saying since when (now)
    /// and in what, read from `/proc/<pid>/task/<tid>/syscall` and `stat`.
    /// A thread blocked since before the attach has no switch for the
    /// programs to see until it wakes: without this, one that sleeps for
    /// minutes (redis's `bio_*` threads, an idle pool) has no kernel view
    /// at all while its alike neighbour that woke once is charged with the
    /// whole wait. An entry the programs created meanwhile is never
    /// overwritten (`BPF_NOEXIST`). Best effort: a thread that exits or
    /// runs in between is simply not seeded.
    pub(super) fn seed_blocked_threads(&mut self, pid: u32, tgid: u32) {
        let mut tids = Vec::new();
        if !sys::list_tids(pid, &mut tids) {
            return;
        }
        let now = wakemeter::monotonic_ns();
        let entry_of = |tid: u32| {
            let blocked = sys::blocked_in(pid, tid)?;
            let mut entry = WmThread::ZERO;
            entry.tgid = u64::from(tgid);
            entry.off_since_ns = now;
            entry.off_cause = blocked.cause as u64;
            if let Some(nr) = blocked.poll_or_sleep_syscall
                && blocked.cause == abi::OFF_POLL
            {
                // As if the programs had seen it block now: its return is
                // then a blocking call, timed from here, timeout unknown
                // (else a poll that blocked would count as one that found
                // nothing without waiting). A sleep is left to be read at
                // its return, where its request is still in its arguments.
                entry.sc_block_nr = nr;
                entry.sc_block_ns = now;
                entry.sc_arg_ns = abi::ARG_UNKNOWN;
            }
            entry.comm = blocked.comm;
            Some(entry)
        };
        let Live { ebpf, store, .. } = &mut self.live;
        store.seed(ebpf, (tgid, pid), &tids, entry_of);
    }

    /// One session of `tgid` leaves; with the last one, the process leaves
    /// the watched set: its bit is cleared first (no new entries), then its
    /// threads' entries and its record are deleted.
    pub(super) fn leave(&mut self, tgid: u32) {
        let Some(m) = self.members.get_mut(&tgid) else {
            return;
        };
        m.sessions = m.sessions.saturating_sub(1);
        if m.sessions > 0 {
            return;
        }
        let reserved = m.reserved;
        self.members.remove(&tgid);
        self.reserved = self.reserved.saturating_sub(reserved);
        let word = tgid >> 6;
        let bits = self.words.get(&word).copied().unwrap_or(0) & !(1u64 << (tgid & 63));
        // Best effort: a failed update leaves the bit set, and the dead
        // flag still keeps a reused id from being counted.
        let _ = self.live.watched.set(word, &bits, 0);
        if bits == 0 {
            self.words.remove(&word);
        } else {
            self.words.insert(word, bits);
        }
        let Live { ebpf, store, .. } = &mut self.live;
        store.forget_process(ebpf, tgid);
        let _ = self.live.targets.remove(&tgid);
    }

    /// The record of `tgid` (zero when it has none).
    pub(super) fn target(&self, tgid: u32) -> Result<WmTarget, KernelSourceError> {
        match self.live.targets.get(&tgid, 0) {
            Ok(t) => Ok(t),
            Err(MapError::KeyNotFound) => Ok(WmTarget::default()),
            Err(e) => Err(read_error("targets")(e)),
        }
    }
}

/// A program set for `options` that has room for `reserve` entries: a
/// shared one with the same options when one has room, else a new one
/// (shared from then on, unless `options` ask for a private one). Returns
/// the set and whether this call loaded it.
pub(super) fn program_set(
    options: &EbpfSourceBuilder,
    tgid: u32,
    reserve: u32,
    capacity: u32,
    btf: &Btf,
    pidns_ino: u64,
) -> Result<(Arc<Mutex<ProgramSet>>, bool), EbpfError> {
    // A fixed capacity, a calibration program, parts switched off or
    // another BTF file are asked for by tests and benches: those get a set
    // of their own.
    let private = options.max_threads.is_some()
        || options.calibration
        || options.parts_off != 0
        || options.kernel_btf.is_some();
    if private {
        let max_threads = options.max_threads.unwrap_or(capacity);
        let set = ProgramSet::load(options, max_threads, btf, pidns_ino)?;
        return Ok((Arc::new(Mutex::new(set)), true));
    }
    let key = ShareKey {
        syscalls: options.syscalls,
        kind: options.kind,
    };
    // Held while loading, so that concurrent attaches wait and join one
    // set instead of loading two.
    let mut shared = lock(&SHARED_SETS);
    shared.retain(|(_, weak)| weak.strong_count() > 0);
    for (k, weak) in shared.iter() {
        if *k != key {
            continue;
        }
        if let Some(set) = weak.upgrade()
            && lock(&set).has_room(tgid, reserve)
        {
            return Ok((set, false));
        }
    }
    let set = ProgramSet::load(options, capacity, btf, pidns_ino)?;
    let set = Arc::new(Mutex::new(set));
    shared.push((key, Arc::downgrade(&set)));
    Ok((set, true))
}
