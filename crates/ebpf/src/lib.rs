#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
pub mod stacks;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as imp;

#[cfg(not(target_os = "linux"))]
mod unsupported;
#[cfg(not(target_os = "linux"))]
use unsupported as imp;

use std::time::Duration;

pub use error::EbpfError;
pub use stacks::{SamplingTimer, StackKind, StackSession, StackSessionBuilder};
use wakemeter::{KernelSample, KernelSource, KernelSourceError};

/// Smallest capacity of the per-thread map chosen at attach, in threads of
/// the target (see [`EbpfSourceBuilder::with_max_threads`]).
pub const DEFAULT_MAX_THREADS: u32 = 1024;
/// Largest capacity of the per-thread map, in threads: 65,536 entries of
/// about 2.4 KiB, about 150 MiB of kernel memory allocated at attach.
/// [`EbpfSourceBuilder::with_max_threads`] above it fails with
/// [`EbpfError::MaxThreadsOutOfRange`].
pub const MAX_THREADS_LIMIT: u32 = 65_536;
/// Wakers remembered per thread of the target: the most frequent ones, of
/// which [`EbpfSourceBuilder::with_top_wakers`] are reported.
pub const WAKER_SLOTS: usize = 16;
/// Default number of wakers reported per thread in
/// [`wakemeter::KernelThreadStats::top_wakers`].
pub const DEFAULT_TOP_WAKERS: usize = 8;

/// Drops the kernel's BTF that this process keeps after the first attach
/// to make the next ones faster: about 13 MB (a 6.18 kernel's
/// `/sys/kernel/btf/vmlinux` parsed) that a process attaching no more
/// targets need not hold. The next attach parses it again (a second or
/// more on a busy machine); attached sources and sessions are unaffected.
/// A no-op where eBPF is not supported.
pub fn forget_kernel_btf() {
    #[cfg(target_os = "linux")]
    linux::forget_kernel_btf();
}

/// Which process to observe: the core's [`wakemeter::Target`], one type
/// for the sampler and its kernel source. A [`Target::Pid`] given a thread
/// id is resolved to that thread's process.
pub use wakemeter::Target;

/// How the programs are attached to the kernel's tracepoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AttachKind {
    /// `tp_btf` (BTF-typed raw tracepoints, the cheapest), falling back to
    /// `raw_tp` per program when the kernel refuses `tp_btf`.
    #[default]
    Auto,
    /// `tp_btf` only.
    BtfTracepoint,
    /// `raw_tp` only (untyped raw tracepoints: every field read is a helper call).
    RawTracepoint,
    /// Some programs on `tp_btf`, some on `raw_tp` (only reported, after an
    /// [`AttachKind::Auto`] attach fell back for part of them).
    Mixed,
}

/// Which kernel hook counts the target's poll, sleep and rename syscalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyscallHook {
    /// None: [`EbpfSourceBuilder::with_syscalls`] turned them off.
    Off,
    /// The raw `sys_exit` tracepoint (as `tp_btf` or `raw_tp`): one program
    /// run for every syscall of every process on the machine, filtered on
    /// the process first.
    SysExit,
    /// The per-syscall `syscalls/sys_exit_<name>` tracepoints of those
    /// families, used with [`AttachKind::Auto`] where tracefs is mounted:
    /// the kernel runs no program for the other syscalls, so every other
    /// syscall on the machine pays less (BENCHMARKS.md, "Syscall cost for
    /// every other process").
    PerSyscall,
}

/// A part of the kernel programs that a cost measurement can switch off
/// ([`EbpfSourceBuilder::with_part_off`]), to find what it costs per run.
/// With a part off, the counters it feeds are wrong: for benchmarks only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProgramPart {
    /// The off-CPU cause of `sched_switch`: the saved registers and the
    /// syscall the thread blocks in (every voluntary switch is then
    /// "other", and no poll or sleep call is timed).
    OffCpuCause,
    /// Reaching each thread's own entry (task storage, or the hash map):
    /// every event then writes one per-CPU scratch entry, and reads find
    /// no thread.
    ThreadEntries,
    /// The waker slots of `sched_waking` (wakes are still counted by source).
    WakerSlots,
    /// The schedstat read of `sched_switch` (`sched_info.run_delay`, the
    /// run-queue wait histogram).
    RunDelay,
    /// The clock read of `sched_switch` (on- and off-CPU times then stay 0).
    Clock,
}

impl ProgramPart {
    /// Every part, in the order the benches print them.
    pub const ALL: [ProgramPart; 5] = [
        ProgramPart::OffCpuCause,
        ProgramPart::ThreadEntries,
        ProgramPart::WakerSlots,
        ProgramPart::RunDelay,
        ProgramPart::Clock,
    ];

    /// Its bit in the programs' `parts_off` (`WM_PART_*` of the kernel side).
    pub(crate) fn bit(self) -> u32 {
        match self {
            ProgramPart::OffCpuCause => 1,
            ProgramPart::ThreadEntries => 2,
            ProgramPart::WakerSlots => 4,
            ProgramPart::RunDelay => 8,
            ProgramPart::Clock => 16,
        }
    }

    /// A short name for tables: `cause`, `entries`, `wakers`, `run_delay`, `clock`.
    pub fn name(self) -> &'static str {
        match self {
            ProgramPart::OffCpuCause => "cause",
            ProgramPart::ThreadEntries => "entries",
            ProgramPart::WakerSlots => "wakers",
            ProgramPart::RunDelay => "run_delay",
            ProgramPart::Clock => "clock",
        }
    }
}

/// Options of an attach; start with [`EbpfSource::builder`].
#[derive(Debug, Clone)]
pub struct EbpfSourceBuilder {
    target: Target,
    kind: AttachKind,
    /// `None`: sized from the target's thread count at attach.
    max_threads: Option<u32>,
    top_wakers: usize,
    syscalls: bool,
    calibration: bool,
    /// [`ProgramPart`] bits switched off (0 but in benches).
    parts_off: u32,
    /// `None`: `/sys/kernel/btf/vmlinux`.
    kernel_btf: Option<std::path::PathBuf>,
}

impl EbpfSourceBuilder {
    /// Options with defaults: [`AttachKind::Auto`], a per-thread map sized
    /// from the target's thread count, [`DEFAULT_TOP_WAKERS`].
    pub fn new(target: Target) -> Self {
        EbpfSourceBuilder {
            target,
            kind: AttachKind::Auto,
            max_threads: None,
            top_wakers: DEFAULT_TOP_WAKERS,
            syscalls: true,
            calibration: false,
            parts_off: 0,
            kernel_btf: None,
        }
    }

    /// Chooses the attach kind ([`AttachKind::Mixed`] behaves as `Auto`).
    pub fn with_attach_kind(mut self, kind: AttachKind) -> Self {
        self.kind = kind;
        self
    }

    /// Capacity of the per-thread map, in threads of the target, from 1 to
    /// [`MAX_THREADS_LIMIT`]; otherwise [`EbpfSourceBuilder::attach`]
    /// fails with [`EbpfError::MaxThreadsOutOfRange`]. Each entry takes
    /// about 2.4 KiB of kernel memory, allocated at attach.
    ///
    /// A source with an explicit capacity loads a program set of its own
    /// (see [`EbpfSource::loaded_programs`]). By default a shared set is
    /// joined, whose map was sized when it was loaded at twice its first
    /// process's thread count (`Threads:` of `/proc/<pid>/status`), at
    /// least [`DEFAULT_MAX_THREADS`] and at most [`MAX_THREADS_LIMIT`]. Threads
    /// beyond the capacity are not tracked (absent from the sample), and
    /// every event of theirs counts in
    /// [`KernelSample::total_dropped_events`](wakemeter::KernelSample::total_dropped_events).
    pub fn with_max_threads(mut self, threads: u32) -> Self {
        self.max_threads = Some(threads);
        self
    }

    /// How many wakers to report per thread, most frequent first (at most
    /// [`WAKER_SLOTS`], the number remembered per thread).
    pub fn with_top_wakers(mut self, n: usize) -> Self {
        self.top_wakers = n;
        self
    }

    /// Whether to trace syscall returns (on by default; see
    /// [`SyscallHook`] for which hook).
    ///
    /// It gives the poll-family and sleep statistics (calls, zero returns,
    /// timeouts, requested and actual sleep). Enabling a syscall tracepoint
    /// moves every syscall of every process onto the kernel's traced path
    /// while attached (cost per syscall, by hook: BENCHMARKS.md, "Syscall
    /// cost for every other process"). Without it, `poll` and `sleep` stay
    /// zero; off-CPU time is still split into sleep / lock / poll / I/O /
    /// preempted / other, since the cause is read from the thread's saved
    /// registers when it switches out.
    pub fn with_syscalls(mut self, on: bool) -> Self {
        self.syscalls = on;
        self
    }

    /// Also attaches an empty program to `sched_switch` (off by default).
    /// Its nanoseconds per run in [`EbpfSource::program_stats`] (as
    /// `tpbtf_calibrate` or `rawtp_calibrate`) are the floor that every
    /// program pays on this machine: dispatch plus the kernel's run-time
    /// accounting. Meant for benchmarks.
    pub fn with_calibration_program(mut self, on: bool) -> Self {
        self.calibration = on;
        self
    }

    /// Switches `part` of the kernel programs off, to measure what it costs
    /// per run (the programs' run time against a run with it on). The
    /// counters it feeds are then wrong: meant for benchmarks. Like
    /// [`EbpfSourceBuilder::with_calibration_program`], it loads a program
    /// set of its own.
    pub fn with_part_off(mut self, part: ProgramPart) -> Self {
        self.parts_off |= part.bit();
        self
    }

    /// Reads the kernel's BTF from the file `path` instead of
    /// `/sys/kernel/btf/vmlinux`. The file must describe the running kernel
    /// (a copy of its `/sys/kernel/btf/vmlinux`); it is parsed at each
    /// attach rather than once per process. Meant for tests of a machine
    /// without BTF: a path that does not exist makes attach fail with
    /// [`EbpfError::NoKernelBtf`], as on a kernel built without
    /// `CONFIG_DEBUG_INFO_BTF`.
    pub fn with_kernel_btf_path(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.kernel_btf = Some(path.into());
        self
    }

    /// The process to observe.
    pub fn target(&self) -> Target {
        self.target
    }

    /// Loads and attaches the kernel programs.
    ///
    /// # Errors
    /// See [`EbpfError`]: an option is out of range, the target does not
    /// exist, privileges or kernel BTF are missing, the crate was built
    /// without clang, the OS is not Linux, or the kernel refused to load or
    /// attach a program.
    pub fn attach(self) -> Result<EbpfSource, EbpfError> {
        if let Some(requested) = self.max_threads
            && !(1..=MAX_THREADS_LIMIT).contains(&requested)
        {
            return Err(EbpfError::MaxThreadsOutOfRange {
                requested,
                limit: MAX_THREADS_LIMIT,
            });
        }
        imp::Session::attach(&self).map(|inner| EbpfSource { inner })
    }
}

/// Kernel-side run statistics of one of the loaded programs (from
/// `BPF_ENABLE_STATS`; zero unless [`enable_run_stats`] is in effect).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProgramRunStats {
    /// Program (function) name, e.g. `tpbtf_sched_switch`.
    pub name: String,
    /// Total time spent running the program, in nanoseconds.
    pub run_time_ns: u64,
    /// Number of times the program ran.
    pub run_count: u64,
}

/// How full the kernel maps of an [`EbpfSource`] are (see
/// [`EbpfSource::map_usage`]). For diagnostics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MapUsage {
    /// Whether the per-thread entries are in task-local storage: where
    /// every program attaches as `tp_btf` (Linux 5.11+), each event finds
    /// its thread's entry from the task itself instead of hashing its id
    /// (cheaper per event), reads go through a task iterator, and there is
    /// no capacity to run out of. `false`: a hash map of
    /// [`MapUsage::max_threads`] entries (`raw_tp` programs, or a capacity
    /// fixed with [`EbpfSourceBuilder::with_max_threads`]).
    pub task_storage: bool,
    /// Entries of the per-thread map: threads of the target being tracked
    /// (threads that exited are removed at once).
    pub threads: u32,
    /// Entries of the per-thread map over every process watched by the
    /// same program set (see [`EbpfSource::loaded_programs`]), this one
    /// included.
    pub set_threads: u32,
    /// Capacity of the per-thread map, in threads, fixed when its program
    /// set was loaded (shared by every process the set watches). With
    /// [`MapUsage::task_storage`] nothing is dropped for lack of room: this
    /// is then only what the hash map would have held.
    pub max_threads: u32,
    /// Occupied waker slots, summed over the tracked threads (at most
    /// [`WAKER_SLOTS`] per thread; they are part of the thread's entry).
    pub waker_slots: u32,
    /// Map entries the last [`KernelSource::read`] fetched from the kernel
    /// (0 before the first read): what a read costs, in entries.
    pub last_read_entries: u32,
}

/// Keeps the kernel's BPF run-time statistics on; they go off when the last
/// guard in the system drops. See [`enable_run_stats`].
#[derive(Debug)]
pub struct RunStatsGuard {
    _inner: imp::RunStats,
}

/// Turns on the kernel's per-program run-time statistics (`run_time_ns`,
/// `run_cnt`) while the returned guard lives. They cost every BPF program in
/// the system two clock reads per run, so enable them only to measure.
///
/// # Errors
/// [`EbpfError::Stats`] when the kernel refuses (needs `CAP_SYS_ADMIN`), or
/// [`EbpfError::Unsupported`] off Linux.
pub fn enable_run_stats() -> Result<RunStatsGuard, EbpfError> {
    imp::RunStats::enable().map(|inner| RunStatsGuard { _inner: inner })
}

/// One process observed by kernel programs. Implements [`KernelSource`].
/// Sources of one host process with the same options share one attached set
/// of programs (see [`EbpfSource::loaded_programs`]); dropping a source
/// takes its process out of the set and frees its entries, and dropping the
/// last one detaches and unloads the programs and frees their maps.
#[derive(Debug)]
pub struct EbpfSource {
    inner: imp::Session,
}

impl EbpfSource {
    /// Attaches to `target` with default options (see [`EbpfSourceBuilder`]).
    ///
    /// # Errors
    /// As [`EbpfSourceBuilder::attach`].
    pub fn attach(target: Target) -> Result<EbpfSource, EbpfError> {
        EbpfSourceBuilder::new(target).attach()
    }

    /// Options for an attach.
    pub fn builder(target: Target) -> EbpfSourceBuilder {
        EbpfSourceBuilder::new(target)
    }

    /// The observed process id (as given, or this process's).
    pub fn pid(&self) -> u32 {
        self.inner.pid()
    }

    /// Wall time [`EbpfSource::attach`] took: checks, BTF parse (first time
    /// only), and either the load, verification and attach of every program
    /// or, when it joined programs already attached for other processes
    /// (see [`EbpfSource::loaded_programs`]), two map updates.
    pub fn attach_duration(&self) -> Duration {
        self.inner.attach_duration()
    }

    /// Whether this attach loaded and attached the kernel programs. `false`
    /// when it joined a set already attached by another `EbpfSource` of
    /// this process with the same options: one set of programs serves
    /// every watched process (their ids are kept in a kernel map), so the
    /// cost to every other process on the machine does not grow with the
    /// number watched. A source built with
    /// [`EbpfSourceBuilder::with_max_threads`],
    /// [`EbpfSourceBuilder::with_calibration_program`] or
    /// [`EbpfSourceBuilder::with_kernel_btf_path`] always loads its own.
    pub fn loaded_programs(&self) -> bool {
        self.inner.loaded_programs()
    }

    /// What loading and attaching the programs this source uses took (once,
    /// by whichever source loaded them); `None` once the target has exited.
    pub fn programs_load_duration(&self) -> Option<Duration> {
        self.inner.load_duration()
    }

    /// Processes watched by the program set this source uses (itself
    /// included); 0 once the target has exited.
    pub fn watched_processes(&self) -> usize {
        self.inner.watched_processes()
    }

    /// How the programs ended up attached (`tp_btf`, `raw_tp` or a mix).
    pub fn attach_kind(&self) -> AttachKind {
        self.inner.attach_kind()
    }

    /// Which hook counts the target's syscalls.
    pub fn syscall_hook(&self) -> SyscallHook {
        self.inner.syscall_hook()
    }

    /// Capacity of the per-thread map, in threads, as chosen at attach (see
    /// [`EbpfSourceBuilder::with_max_threads`]).
    pub fn max_threads(&self) -> u32 {
        self.inner.max_threads()
    }

    /// How full the kernel maps are now. Costs about what a
    /// [`KernelSource::read`] costs.
    ///
    /// # Errors
    /// As [`KernelSource::read`].
    pub fn map_usage(&mut self) -> Result<MapUsage, KernelSourceError> {
        self.inner.map_usage()
    }

    /// Run statistics of the attached programs (see [`enable_run_stats`]).
    ///
    /// # Errors
    /// [`EbpfError::Program`] when the kernel cannot report a program's info.
    pub fn program_stats(&self) -> Result<Vec<ProgramRunStats>, EbpfError> {
        self.inner.program_stats()
    }
}

impl KernelSource for EbpfSource {
    /// Reads every tracked thread of the target (cumulative counters; the
    /// on-CPU or off-CPU span in progress is included in the totals, not in
    /// the histograms). Costs one batch of map entries per up to 64
    /// threads of the target, whatever the number of threads or wakers it
    /// had in the past.
    ///
    /// # Errors
    /// [`KernelSourceError::TargetExited`] once the process is gone (the
    /// programs are detached at that point), [`KernelSourceError::Read`]
    /// when a map cannot be read.
    fn read(&mut self) -> Result<KernelSample, KernelSourceError> {
        self.inner.read()
    }

    /// The threads whose entries the last read found unchanged since the
    /// read before it and blocked then (off CPU, not preempted): neither
    /// switched in, woken nor renamed by themselves in between. Read
    /// through the task iterator only (kernels with task storage); empty
    /// otherwise, and after a read that could not tell.
    fn quiet_threads(&self) -> &[u64] {
        self.inner.quiet_threads()
    }

    /// Keeps the sample's list of threads (emptied) for the next read: a
    /// list of 1,000 threads is about 400 KiB, which the allocator maps
    /// and unmaps at each read when it is allocated anew.
    fn recycle(&mut self, sample: KernelSample) {
        self.inner.recycle(sample);
    }
}
