//! The Linux implementation: loads the embedded object with aya, attaches
//! it, and turns its maps into [`KernelSample`]s.

mod abi;
mod pid_ns;
pub(crate) mod stacks;
mod store;
mod sys;

use std::borrow::Cow;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap, MapData, MapError};
use aya::programs::{BtfTracePoint, Iter, Program, ProgramError, RawTracePoint, TracePoint};
use aya::{Btf, Ebpf, EbpfLoader};
use wakemeter::histogram::Log2Histogram;
use wakemeter::kernel::{
    OffCpuTime, PollSyscallStats, SleepSyscallStats, Syscall, SyscallCalls, Waker,
};
use wakemeter::{KernelSample, KernelSourceError, KernelThreadStats};

use self::abi::{WmTarget, WmThread};
use self::store::Store;
use self::sys::ExitWatch;
use crate::{
    AttachKind, DEFAULT_MAX_THREADS, EbpfError, EbpfSourceBuilder, MAX_THREADS_LIMIT, MapUsage,
    ProgramRunStats, SyscallHook, Target,
};

/// One tracepoint and the two flavours of its program in the object.
struct Hook {
    tracepoint: &'static str,
    btf_program: &'static str,
    raw_program: &'static str,
}

/// Attach order: exit and exec cleanup first, so no entry is created that
/// nothing would delete; the scheduler switch last, as it is the busiest.
const HOOKS: [Hook; 5] = [
    Hook {
        tracepoint: "sched_process_exit",
        btf_program: "tpbtf_sched_process_exit",
        raw_program: "rawtp_sched_process_exit",
    },
    Hook {
        tracepoint: "sched_process_exec",
        btf_program: "tpbtf_sched_process_exec",
        raw_program: "rawtp_sched_process_exec",
    },
    Hook {
        tracepoint: "sys_exit",
        btf_program: "tpbtf_sys_exit",
        raw_program: "rawtp_sys_exit",
    },
    Hook {
        tracepoint: "sched_waking",
        btf_program: "tpbtf_sched_waking",
        raw_program: "rawtp_sched_waking",
    },
    Hook {
        tracepoint: "sched_switch",
        btf_program: "tpbtf_sched_switch",
        raw_program: "rawtp_sched_switch",
    },
];

/// The empty program attached with [`EbpfSourceBuilder::with_calibration_program`].
const CALIBRATION: Hook = Hook {
    tracepoint: "sched_switch",
    btf_program: "tpbtf_calibrate",
    raw_program: "rawtp_calibrate",
};

/// The program for the per-syscall exit tracepoints ([`SyscallHook::PerSyscall`]).
const PER_SYSCALL_PROGRAM: &str = "tp_sys_exits";

/// The `syscalls/sys_exit_<name>` tracepoints it goes on: the poll, sleep
/// and rename families of the kernel side's `syscall_class`...
const PER_SYSCALL_EXITS: &[&str] = &[
    "epoll_pwait",
    "epoll_pwait2",
    "ppoll",
    "pselect6",
    "nanosleep",
    "clock_nanosleep",
    "prctl",
    "execve",
    "execveat",
];
/// ...and those only x86_64 has (aarch64 has no `poll`, `select` or `epoll_wait`).
#[cfg(target_arch = "x86_64")]
const PER_SYSCALL_EXITS_X86: &[&str] = &["poll", "select", "epoll_wait"];
#[cfg(not(target_arch = "x86_64"))]
const PER_SYSCALL_EXITS_X86: &[&str] = &[];

/// Whether a mounted tracefs offers the per-syscall exit tracepoints.
fn per_syscall_tracepoints_available() -> bool {
    wakemeter_procfs::system::tracepoint_exists("syscalls", "sys_exit_nanosleep")
}

/// The compiled kernel programs, embedded with 8-byte alignment: with
/// the per-thread entries in task storage, or in a hash map.
#[cfg(not(wakemeter_ebpf_no_clang))]
fn object(task_store: bool) -> Result<&'static [u8], EbpfError> {
    Ok(if task_store {
        aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/wakemeter_task_store.bpf.o"))
    } else {
        aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/wakemeter.bpf.o"))
    })
}

#[cfg(wakemeter_ebpf_no_clang)]
fn object(_task_store: bool) -> Result<&'static [u8], EbpfError> {
    Err(EbpfError::BuiltWithoutClang)
}

/// The kernel's BTF: from `/sys/kernel/btf/vmlinux`, parsed once per
/// process and reused (parsing is most of the first attach: BENCHMARKS.md,
/// eBPF section, "Against the targets"), or from the file `path`, parsed
/// at each attach.
fn kernel_btf(path: Option<&std::path::Path>) -> Result<Cow<'static, Btf>, EbpfError> {
    static KERNEL_BTF: OnceLock<Btf> = OnceLock::new();
    if let Some(path) = path {
        return Btf::parse_file(path, aya::Endianness::default())
            .map(Cow::Owned)
            .map_err(|source| EbpfError::Btf { source });
    }
    if let Some(btf) = KERNEL_BTF.get() {
        return Ok(Cow::Borrowed(btf));
    }
    let parsed = Btf::from_sys_fs().map_err(|source| EbpfError::Btf { source })?;
    Ok(Cow::Borrowed(KERNEL_BTF.get_or_init(|| parsed)))
}

/// Capacity of the per-thread map for a target with `threads` threads:
/// twice that, at least [`DEFAULT_MAX_THREADS`], at most [`MAX_THREADS_LIMIT`].
fn auto_max_threads(threads: Option<u32>) -> u32 {
    threads
        .unwrap_or(0)
        .saturating_mul(2)
        .clamp(DEFAULT_MAX_THREADS, MAX_THREADS_LIMIT)
}

/// Maps and programs of one loaded program set. Field order is drop order:
/// the programs detach first.
struct Live {
    ebpf: Ebpf,
    /// The per-thread entries, shared by every watched process of the set.
    store: Store,
    /// The watched-process bitmap (`abi::TGID_WORDS` words).
    watched: Array<MapData, u64>,
    /// Per watched process: exits, drops, death ([`WmTarget`]).
    targets: HashMap<MapData, u32, WmTarget>,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC` for the kernel side (see
    /// [`realtime_offset_ns`]), refreshed at every read.
    realtime_offset: Array<MapData, i64>,
    /// Names of the programs that are attached.
    programs: Vec<&'static str>,
    /// Capacity of the per-thread hash map, in entries; with task storage,
    /// which has none, what it would have been (see [`MapUsage::max_threads`]).
    max_threads: usize,
}

impl Live {
    /// Calls `each` with every entry of every watched process.
    fn for_each_thread(
        &mut self,
        each: impl FnMut(u32, &WmThread),
    ) -> Result<u32, KernelSourceError> {
        self.store.for_each(&mut self.ebpf, each)
    }
}

/// One watched process of a [`ProgramSet`].
#[derive(Debug, Clone, Copy)]
struct Member {
    /// Entries of the per-thread map set aside for it (twice its threads at
    /// join).
    reserved: u32,
    /// Sessions watching it (two samplers may watch one process).
    sessions: u32,
}

/// One loaded and attached set of kernel programs and the processes it
/// watches. Every [`Session`] with the same options shares one (see
/// [`shared_set`]), so watching N processes costs one attach and one set of
/// hooks: the machine-wide cost of a syscall or a switch does not grow with N.
struct ProgramSet {
    live: Live,
    /// Watched processes by initial-namespace id.
    members: std::collections::BTreeMap<u32, Member>,
    /// Sum of the members' reservations, in entries.
    reserved: u32,
    /// The nonzero words of the watched bitmap, as last written.
    words: std::collections::HashMap<u32, u64>,
    kind: AttachKind,
    syscall_hook: SyscallHook,
    /// What loading and attaching took.
    load_duration: Duration,
}

/// Options two sessions must agree on to share a [`ProgramSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ShareKey {
    syscalls: bool,
    kind: AttachKind,
}

/// The program sets that sessions may join, by their options. Weak: a set
/// goes (programs detached, maps freed) when its last session drops.
static SHARED_SETS: Mutex<Vec<(ShareKey, Weak<Mutex<ProgramSet>>)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain maps behind, still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ProgramSet {
    /// Loads the object and attaches its programs as `options` ask, with
    /// the entries in task storage where every hook attaches as `tp_btf`
    /// and the task iterator loads (Linux 5.11+), else in a hash map of
    /// `max_threads` entries. A fixed capacity
    /// ([`EbpfSourceBuilder::with_max_threads`]) asks for the hash map.
    fn load(
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
    fn load_as(
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
    fn capacity(&self) -> u32 {
        u32::try_from(self.live.max_threads).unwrap_or(u32::MAX)
    }

    /// Whether a process needing `reserve` entries fits beside the members.
    /// Task storage has no capacity to share: only the number of
    /// processes is bounded.
    fn has_room(&self, tgid: u32, reserve: u32) -> bool {
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
    fn join(&mut self, tgid: u32, reserve: u32) -> Result<bool, EbpfError> {
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
    fn seed_blocked_threads(&mut self, pid: u32, tgid: u32) {
        let mut tids = Vec::new();
        if !sys::list_tids(pid, &mut tids) {
            return;
        }
        let now = wakemeter::monotonic_ns();
        let mut entries = Vec::new();
        for tid in tids {
            let Some(blocked) = sys::blocked_in(pid, tid) else {
                continue;
            };
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
            entries.push((tid, entry));
        }
        let Live { ebpf, store, .. } = &mut self.live;
        store.seed(ebpf, (tgid, pid), &entries);
    }

    /// One session of `tgid` leaves; with the last one, the process leaves
    /// the watched set: its bit is cleared first (no new entries), then its
    /// threads' entries and its record are deleted.
    fn leave(&mut self, tgid: u32) {
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
    fn target(&self, tgid: u32) -> Result<WmTarget, KernelSourceError> {
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
fn program_set(
    options: &EbpfSourceBuilder,
    tgid: u32,
    reserve: u32,
    capacity: u32,
    btf: &Btf,
    pidns_ino: u64,
) -> Result<(Arc<Mutex<ProgramSet>>, bool), EbpfError> {
    // A fixed capacity, a calibration program or another BTF file are
    // asked for by tests and benches: those get a set of their own.
    let private =
        options.max_threads.is_some() || options.calibration || options.kernel_btf.is_some();
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
    fn live_set(&mut self) -> Result<Arc<Mutex<ProgramSet>>, KernelSourceError> {
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

    pub(crate) fn read(&mut self) -> Result<KernelSample, KernelSourceError> {
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

        let mut threads = Vec::new();
        let mut each = |tid: u32, raw: &WmThread| {
            if raw.tgid != u64::from(tgid) {
                return;
            }
            if !in_namespace {
                threads.push(thread_stats(tid, raw, now, top_wakers));
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
                threads.push(t);
            }
        };
        // Alone in its set (or named by another PID namespace's ids), a
        // process reads the whole map in batches. Beside others, it looks
        // up its own threads, listed from /proc: a read then costs its own
        // threads, not every watched process's.
        let mine = set.members.get(&tgid).map_or(0, |m| m.reserved);
        let alone = mine.saturating_mul(2) >= set.reserved;
        // The task iterator writes out this process's entries only.
        let Live { ebpf, store, .. } = &mut set.live;
        let fetched = if store.is_task() {
            store.for_each_of(ebpf, (tgid, pid), &[], &mut each)?
        } else if alone || in_namespace || !sys::list_tids(pid, &mut self.tids) {
            store.for_each(ebpf, &mut each)?
        } else {
            store.for_each_of(ebpf, (tgid, pid), &self.tids, &mut each)?
        };
        threads.sort_by_key(|t| t.tid);
        let record = set.target(tgid)?;
        self.last_read_entries = fetched;

        let mut sample = KernelSample::default();
        sample.source = "ebpf".to_owned();
        sample.pid = pid;
        sample.threads = threads;
        sample.total_dropped_events = record.dropped;
        sample.total_thread_exits = record.exits;
        Ok(sample)
    }
}

fn map_error(map: &'static str) -> impl Fn(MapError) -> EbpfError {
    move |source| EbpfError::Map { map, source }
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC` now, in nanoseconds: the monotonic
/// clock read on both sides of the real-time one, so the error is half the
/// time between the two monotonic reads (well under a microsecond). 1 when
/// the two clocks happen to agree, since the kernel side reads 0 as unknown.
fn realtime_offset_ns() -> i64 {
    let before = wakemeter::monotonic_ns();
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
    let after = wakemeter::monotonic_ns();
    let mono = (i128::from(before) + i128::from(after)) / 2;
    let offset = i64::try_from(real - mono).unwrap_or(0);
    if offset == 0 { 1 } else { offset }
}

fn read_error(map: &'static str) -> impl Fn(MapError) -> KernelSourceError {
    move |e| KernelSourceError::Read(format!("eBPF map {map}: {e}"))
}

fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, EbpfError> {
    ebpf.take_map(name)
        .ok_or(EbpfError::ObjectMismatch { name })
}

/// Attaches one hook as `kind` asks; returns the name of the program that
/// is now attached.
fn attach_hook(
    ebpf: &mut Ebpf,
    hook: &Hook,
    kind: AttachKind,
    btf: &Btf,
) -> Result<&'static str, EbpfError> {
    let btf_result = if kind == AttachKind::RawTracepoint {
        None
    } else {
        Some(attach_btf(ebpf, hook, btf))
    };
    match btf_result {
        Some(Ok(())) => Ok(hook.btf_program),
        Some(Err(e)) if kind == AttachKind::BtfTracepoint => Err(e),
        _ => attach_raw(ebpf, hook).map(|()| hook.raw_program),
    }
}

/// The error of program `name`.
fn program_error(name: &'static str) -> impl Fn(ProgramError) -> EbpfError {
    move |source| EbpfError::Program {
        program: name,
        source,
    }
}

/// Program `name` of the object, as the program type `P`.
fn program_of<'a, P>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut P, EbpfError>
where
    &'a mut P: TryFrom<&'a mut Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(EbpfError::ObjectMismatch { name })?
        .try_into()
        .map_err(program_error(name))
}

fn attach_btf(ebpf: &mut Ebpf, hook: &Hook, btf: &Btf) -> Result<(), EbpfError> {
    let wrap = program_error(hook.btf_program);
    let program: &mut BtfTracePoint = program_of(ebpf, hook.btf_program)?;
    program.load(hook.tracepoint, btf).map_err(&wrap)?;
    if let Err(e) = program.attach() {
        // Free the verified program before falling back; the error is what matters.
        let _ = program.unload();
        return Err(wrap(e));
    }
    Ok(())
}

fn attach_raw(ebpf: &mut Ebpf, hook: &Hook) -> Result<(), EbpfError> {
    let wrap = program_error(hook.raw_program);
    let program: &mut RawTracePoint = program_of(ebpf, hook.raw_program)?;
    program.load().map_err(&wrap)?;
    program.attach(hook.tracepoint).map_err(&wrap)?;
    Ok(())
}

/// Loads the per-syscall program and attaches it to every tracepoint of
/// [`PER_SYSCALL_EXITS`]; on any failure nothing stays attached.
fn attach_per_syscall(ebpf: &mut Ebpf) -> Result<(), EbpfError> {
    let wrap = program_error(PER_SYSCALL_PROGRAM);
    let program: &mut TracePoint = program_of(ebpf, PER_SYSCALL_PROGRAM)?;
    program.load().map_err(&wrap)?;
    for call in PER_SYSCALL_EXITS.iter().chain(PER_SYSCALL_EXITS_X86) {
        if let Err(e) = program.attach("syscalls", &format!("sys_exit_{call}")) {
            // Unloading detaches the tracepoints attached so far.
            let _ = program.unload();
            return Err(wrap(e));
        }
    }
    Ok(())
}

/// Converts one kernel record, adding the span in progress (on or off CPU)
/// to the totals so that they grow smoothly between switches, with its
/// `top_wakers` most frequent wakers.
fn thread_stats(tid: u32, raw: &WmThread, now_ns: u64, top_wakers: usize) -> KernelThreadStats {
    let in_progress = |since: u64| {
        if since != 0 && now_ns > since {
            now_ns - since
        } else {
            0
        }
    };

    let mut off_ns = raw.off_ns;
    if let Some(cause) = usize::try_from(raw.off_cause)
        .ok()
        .and_then(|c| off_ns.get_mut(c))
    {
        *cause = cause.saturating_add(in_progress(raw.off_since_ns));
    }
    let off_cpu = OffCpuTime::from_causes([
        off_ns[abi::OFF_SLEEP],
        off_ns[abi::OFF_LOCK],
        off_ns[abi::OFF_POLL],
        off_ns[abi::OFF_IO],
        off_ns[abi::OFF_PREEMPTED],
        off_ns[abi::OFF_OTHER],
    ]);

    let mut poll = PollSyscallStats::default();
    poll.total_calls = raw.poll_calls;
    poll.total_idle_calls = raw.poll_zero_returns;
    poll.total_zero_timeout_calls = raw.poll_zero_timeouts;
    poll.total_infinite_timeout_calls = raw.poll_infinite_timeouts;
    poll.timeout_histogram = Log2Histogram::from_buckets(&raw.poll_timeout_hist);
    poll.total_blocked_ns = raw.poll_time_ns;
    poll.total_blocked_calls = raw.poll_blocked_calls;
    poll.total_idle_nonblocking_calls = raw.poll_idle_nonblocking;

    let mut sleep = SleepSyscallStats::default();
    sleep.total_calls = raw.sleep_calls;
    sleep.total_requested_ns = raw.sleep_requested_ns;
    sleep.total_actual_ns = raw.sleep_actual_ns;
    sleep.total_known_request_calls = raw.sleep_known_requests;
    sleep.total_interrupted_calls = raw.sleep_interrupted;
    sleep.total_interrupted_ns = raw.sleep_interrupted_ns;

    let mut t = KernelThreadStats::default();
    t.tid = u64::from(tid);
    t.name = abi::comm_str(&raw.comm);
    t.total_on_cpu_ns = raw.on_cpu_ns.saturating_add(in_progress(raw.on_since_ns));
    t.total_voluntary_switches = raw.voluntary;
    t.total_involuntary_switches = raw.involuntary;
    t.total_off_cpu = off_cpu;
    t.off_cpu_histogram = Log2Histogram::from_buckets(&raw.off_hist);
    t.run_queue_latency_histogram = Log2Histogram::from_buckets(&raw.runq_hist);
    // The kernel side counts each wake once, by its source.
    t.total_wakes = raw.wakes_by.iter().fold(0u64, |a, b| a.saturating_add(*b));
    t.total_interrupt_wakes = raw.wakes_by[abi::WAKE_INTERRUPT];
    t.total_process_thread_wakes = raw.wakes_by[abi::WAKE_TARGET];
    t.total_other_process_wakes = raw.wakes_by[abi::WAKE_OTHER];
    t.calls_by_syscall = Syscall::ALL
        .iter()
        .zip(raw.calls_by_syscall)
        .filter(|(_, n)| *n > 0)
        .map(|(sc, n)| SyscallCalls::new(*sc, n))
        .collect();
    t.poll = poll;
    t.sleep = sleep;
    t.top_wakers = wakers_of(raw, top_wakers);
    t
}

/// The `n` most frequent wakers in a record's slots, most first (ties by tid).
fn wakers_of(raw: &WmThread, n: usize) -> Vec<Waker> {
    let mut slots: Vec<usize> = (0..abi::WAKER_SLOTS)
        .filter(|&i| raw.waker_count[i] != 0)
        .collect();
    slots.sort_by(|&a, &b| {
        raw.waker_count[b]
            .cmp(&raw.waker_count[a])
            .then(raw.waker_tid[a].cmp(&raw.waker_tid[b]))
    });
    slots
        .into_iter()
        .take(n)
        .map(|i| {
            let mut w = Waker::default();
            w.tid = u64::from(raw.waker_tid[i]);
            w.name = abi::comm_str(&raw.waker_comm[i]);
            w.total_wakes = raw.waker_count[i];
            w
        })
        .collect()
}

/// The id in the observer's namespace of waker `host_tid` of `raw` (0 for
/// interrupt context and for wakers outside that namespace).
fn namespace_waker(raw: &WmThread, host_tid: u64) -> u64 {
    (0..abi::WAKER_SLOTS)
        .find(|&i| raw.waker_count[i] != 0 && u64::from(raw.waker_tid[i]) == host_tid)
        .map_or(0, |i| u64::from(raw.waker_ns_tid[i]))
}

/// Holds the `BPF_ENABLE_STATS` fd; statistics stay on while any holder lives.
#[derive(Debug)]
pub(crate) struct RunStats {
    _fd: OwnedFd,
}

impl RunStats {
    pub(crate) fn enable() -> Result<RunStats, EbpfError> {
        aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .map(|fd| RunStats { _fd: fd })
            .map_err(|source| EbpfError::Stats { source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_conversion_adds_span_in_progress() {
        let mut raw = WmThread::ZERO;
        raw.comm[..4].copy_from_slice(b"loop");
        raw.on_cpu_ns = 100;
        raw.voluntary = 3;
        raw.involuntary = 1;
        raw.off_ns[abi::OFF_SLEEP] = 1000;
        raw.off_ns[abi::OFF_POLL] = 7;
        raw.off_cause = abi::OFF_SLEEP as u64;
        raw.off_since_ns = 5_000;
        raw.off_hist[11] = 2;
        raw.poll_timeout_hist[20] = 4;
        raw.poll_calls = 4;
        let t = thread_stats(42, &raw, 5_500, 8);
        assert_eq!(t.tid, 42);
        assert_eq!(t.name, "loop");
        assert_eq!(t.total_on_cpu_ns, 100);
        assert_eq!(t.total_off_cpu.sleep_ns, 1500);
        assert_eq!(t.total_off_cpu.poll_ns, 7);
        assert_eq!(t.total_off_cpu.total_ns(), 1507);
        assert_eq!(t.off_cpu_histogram.buckets.len(), 12);
        assert_eq!(t.off_cpu_histogram.count(), 2);
        assert_eq!(t.poll.timeout_histogram.buckets[20], 4);
        assert_eq!(
            (t.total_voluntary_switches, t.total_involuntary_switches),
            (3, 1)
        );

        raw.off_since_ns = 0;
        raw.on_since_ns = 5_000;
        let t = thread_stats(42, &raw, 6_000, 8);
        assert_eq!(t.total_on_cpu_ns, 1100);
        assert_eq!(t.total_off_cpu.sleep_ns, 1000);
    }

    #[test]
    fn wakers_most_first_from_occupied_slots() {
        let mut raw = WmThread::ZERO;
        for (slot, tid, count, comm) in [
            (0, 7, 5, &b"seven"[..]),
            (3, 0, 9, &b"[interrupt]"[..]),
            (5, 9, 5, &b"nine"[..]),
            (6, 11, 0, &b"free"[..]),
        ] {
            raw.waker_tid[slot] = tid;
            raw.waker_count[slot] = count;
            raw.waker_comm[slot][..comm.len()].copy_from_slice(comm);
        }
        assert_eq!(raw.waker_slots_used(), 3);
        let all: Vec<_> = wakers_of(&raw, 16)
            .into_iter()
            .map(|w| (w.tid, w.name, w.total_wakes))
            .collect();
        assert_eq!(
            all,
            [
                (0, "[interrupt]".to_owned(), 9),
                (7, "seven".to_owned(), 5),
                (9, "nine".to_owned(), 5),
            ]
        );
        assert_eq!(wakers_of(&raw, 1).len(), 1);
        assert!(thread_stats(1, &raw, 0, 0).top_wakers.is_empty());
    }

    #[test]
    fn map_sized_from_thread_count() {
        assert_eq!(auto_max_threads(None), DEFAULT_MAX_THREADS);
        assert_eq!(auto_max_threads(Some(3)), DEFAULT_MAX_THREADS);
        assert_eq!(auto_max_threads(Some(3000)), 6000);
        assert_eq!(auto_max_threads(Some(u32::MAX)), MAX_THREADS_LIMIT);
    }

    #[test]
    fn comm_stops_at_nul() {
        let mut c = [0u8; abi::COMM_LEN];
        c[..3].copy_from_slice(b"abc");
        assert_eq!(abi::comm_str(&c), "abc");
        assert_eq!(abi::comm_str(&[b'x'; abi::COMM_LEN]), "x".repeat(16));
    }
}
