//! Stacks of a process, counted in the kernel: on-CPU samples, off-CPU
//! spans by cause, and the wakers of its threads (program
//! `src/bpf/stacks.bpf.c`). Addresses only; symbolization and output
//! formats are in the `wakemeter-profile` crate.

use std::time::Duration;

use crate::{AttachKind, EbpfError, Target, imp};

/// Default on-CPU sampling frequency, in samples per second per CPU (99 Hz,
/// off the 100 Hz of timer ticks so that samples do not lock step with
/// periodic work).
pub const DEFAULT_FREQUENCY_HZ: u64 = 99;
/// Highest on-CPU sampling frequency accepted, in samples per second per CPU.
pub const MAX_FREQUENCY_HZ: u64 = 10_000;
/// Frames kept per stack (user and kernel stacks separately), as the
/// kernel's default `kernel.perf_event_max_stack`.
pub const STACK_DEPTH: usize = 127;
/// The lowest outermost address of a user stack whose unwinding stopped
/// early (see [`LostStacks::truncated_unwinds`]): such a stack ends in a
/// marker address from 1 to 15 that says why ([`UnwindStop::of_marker`]);
/// no code lies there, so it is never a real frame.
pub const TRUNCATED_FRAME: u64 = 1;

/// Why the kernel's unwinding of a user stack from the unwind table
/// stopped before the outermost frame: the marker address a truncated
/// stack ends in (`WM_STOP_*` of `src/bpf/stacks.h`). The frame before the
/// marker is the one the walk could not step from; its module is the one to
/// look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum UnwindStop {
    /// The stack has [`STACK_DEPTH`] frames: deeper ones are not kept.
    TooDeep,
    /// No CFI row covers the frame's address (code without `.eh_frame`, a
    /// module without rows: JIT code, a module past the table's capacity)
    /// and `%rbp` is 0, so there is no frame pointer to follow either.
    NoCfiRow,
    /// The CFI has a rule for the address that the table does not encode (a
    /// DWARF expression, a CFA or `%rbp` rule on another register), and
    /// `%rbp` is 0.
    UnencodedCfi,
    /// The return address could not be read from the stack: the computed
    /// CFA is a bad address (a wrong frame-pointer guess) or the stack page
    /// is not resident.
    ReturnAddressUnreadable,
    /// The saved `%rbp` could not be read from the stack (as above).
    SavedRbpUnreadable,
    /// A null return address where the CFI does not mark the outermost
    /// frame.
    NullReturnAddress,
}

impl UnwindStop {
    /// The stop a marker address (the last frame of a truncated stack)
    /// stands for; `None` for any other address.
    pub fn of_marker(address: u64) -> Option<UnwindStop> {
        Some(match address {
            1 => UnwindStop::TooDeep,
            2 => UnwindStop::NoCfiRow,
            3 => UnwindStop::UnencodedCfi,
            4 => UnwindStop::ReturnAddressUnreadable,
            5 => UnwindStop::SavedRbpUnreadable,
            6 => UnwindStop::NullReturnAddress,
            _ => return None,
        })
    }

    /// A short snake_case name, as in a profile's JSON.
    pub fn name(self) -> &'static str {
        match self {
            UnwindStop::TooDeep => "too_deep",
            UnwindStop::NoCfiRow => "no_cfi_row",
            UnwindStop::UnencodedCfi => "unencoded_cfi",
            UnwindStop::ReturnAddressUnreadable => "return_address_unreadable",
            UnwindStop::SavedRbpUnreadable => "saved_rbp_unreadable",
            UnwindStop::NullReturnAddress => "null_return_address",
        }
    }
}
/// Default capacity of the stack map, in distinct stacks (1 KiB of frames
/// and about 48 bytes of the kernel's hash-map overhead each: about
/// 8.8 MiB).
pub const DEFAULT_MAX_STACKS: u32 = 8192;
/// Default capacity of the count map, in distinct (thread, cause, user
/// stack, kernel stack) entries (72 bytes of key and value each, about
/// 1.2 MiB with the kernel's own per-entry overhead).
pub const DEFAULT_MAX_ENTRIES: u32 = 16_384;
/// Largest capacity of either map, in entries.
pub const MAX_STACK_ENTRIES_LIMIT: u32 = 262_144;

/// Which stacks a [`StackSession`] collects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StackKind {
    /// On-CPU: the stacks of the target's running threads, sampled by a
    /// software `cpu-clock` perf event on every CPU (works without a
    /// hardware PMU).
    OnCpu,
    /// Off-CPU: the stack of a thread of the target when it leaves the CPU
    /// (`sched_switch`), with the cause, counted with the time until it
    /// runs again.
    OffCpu,
    /// Wakeups: the stacks of whoever wakes a thread of the target
    /// (`sched_waking`, in the waker's context).
    Wakeups,
}

/// Why a thread left the CPU: the classification of the counters
/// ([`wakemeter::kernel::OffCpuTime`]), made by the same kernel code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum OffCpuCause {
    /// In `nanosleep`/`clock_nanosleep`.
    Sleep,
    /// In `futex`/`futex_waitv` (locks, condition variables).
    Lock,
    /// In a poll-family call (`poll`, `select`, `epoll_wait`, ...).
    Poll,
    /// Uninterruptible sleep (`D`) outside the above: disk or other I/O.
    Io,
    /// Preempted while runnable (an involuntary switch).
    Preempted,
    /// Any other voluntary switch (e.g. blocking `read`/`write` on a pipe
    /// or socket).
    Other,
}

impl OffCpuCause {
    /// Lower-case name used in folded stacks and reports (`sleep`, `lock`,
    /// `poll`, `io`, `preempted`, `other`).
    pub fn name(self) -> &'static str {
        match self {
            OffCpuCause::Sleep => "sleep",
            OffCpuCause::Lock => "lock",
            OffCpuCause::Poll => "poll",
            OffCpuCause::Io => "io",
            OffCpuCause::Preempted => "preempted",
            OffCpuCause::Other => "other",
        }
    }
}

/// Why a stack is absent from a [`StackCount`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MissingStack {
    /// Not taken: a wakeup from interrupt context has no waker user stack.
    NotTaken,
    /// The stack was empty: e.g. no kernel stack for a sample taken in user
    /// mode, or no user stack for a kernel thread.
    Empty,
    /// The stack map was full (or every id the stack may take held another
    /// stack, which needs 8 stacks whose hashes share 31 bits); counted in
    /// [`LostStacks::stacks_full`] or [`LostStacks::stack_collisions`].
    Lost,
    /// The stack id was known but its frames were gone when read.
    Evicted,
}

/// One stack: instruction addresses, innermost first, or why there is none.
pub type Stack = Result<Vec<u64>, MissingStack>;

/// One entry of the kernel's counts: a thread, a cause and two stacks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StackCount {
    /// Thread id of the sampled, switched-out or woken thread of the target.
    pub tid: u32,
    /// Its name (kernel `comm`) when the event happened.
    pub thread_name: String,
    /// [`StackKind::OffCpu`]: why it left the CPU; `None` otherwise.
    pub cause: Option<OffCpuCause>,
    /// [`StackKind::Wakeups`]: the waker's thread id (0 = interrupt context,
    /// or a waker outside the observer's PID namespace) and name; `None` otherwise. The stacks are then the waker's.
    pub waker: Option<(u32, String)>,
    /// User-space stack, innermost first. On x86_64, when the target has
    /// modules without frame pointers, unwound in the kernel from their
    /// `.eh_frame` (the unwind table; see [`StackSession::leaf_rows`]), else
    /// by the kernel's frame-pointer walk. Ends in a marker address ([`UnwindStop`]) when
    /// the unwinding stopped early.
    pub user_stack: Stack,
    /// Kernel stack, innermost first.
    pub kernel_stack: Stack,
    /// On-CPU samples, switch-outs or wakeups with these stacks.
    pub count: u64,
    /// [`StackKind::OffCpu`]: off-CPU time of the finished spans, ns (a
    /// span still in progress when read is not included); 0 otherwise.
    pub total_ns: u64,
}

/// Events whose stacks could not be recorded, cumulative since attach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostStacks {
    /// Events lost because the count map was full.
    pub counts_full: u64,
    /// Stacks lost because every id they may take in the stack map held
    /// another stack (8 ids in a row; the event is still counted, without
    /// that stack). Unlike a kernel stack-trace map, where any two stacks in
    /// one bucket collide, this needs 8 stacks with the same 31-bit hash
    /// prefix range: practically never below the map's capacity.
    pub stack_collisions: u64,
    /// Stacks lost because the stack map was full or the kernel failed.
    pub stacks_full: u64,
    /// Off-CPU spans not timed because the per-thread start map was full.
    pub off_cpu_spans: u64,
    /// Events whose user stack was unwound from the unwind table and whose
    /// unwinding stopped before the outermost frame: a read failed (a stack
    /// page not resident), a frame had neither a rule nor a frame pointer,
    /// or the stack was deeper than [`STACK_DEPTH`]. Such a stack ends in
    /// a marker address (from [`TRUNCATED_FRAME`]) that says why: [`UnwindStop`].
    pub truncated_unwinds: u64,
}

impl LostStacks {
    /// Whether anything was lost.
    pub fn any(&self) -> bool {
        *self != LostStacks::default()
    }
}

/// What a [`StackSession::read`] returns: every count since attach.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StackCounts {
    /// What was collected.
    pub kind: StackKind,
    /// The observed process id.
    pub pid: u32,
    /// The counts, in no particular order.
    pub entries: Vec<StackCount>,
    /// What could not be recorded.
    pub lost: LostStacks,
    /// Whether the target had exited when read: the counts end at its exit
    /// (a partial capture).
    pub target_exited: bool,
    /// [`StackKind::OnCpu`]: the sampling frequency, per second per CPU; 0
    /// otherwise.
    pub frequency_hz: u64,
    /// [`StackKind::OnCpu`]: samples of the target's threads the program
    /// ran for (each is counted in [`StackCounts::entries`] unless
    /// [`LostStacks::counts_full`]); 0 otherwise. Samples due that are not
    /// here were never delivered to the program (an overrun `cpu-clock`
    /// timer, the kernel's sample-rate throttling, another BPF program
    /// running on that CPU).
    pub samples_taken: u64,
    /// [`StackKind::OnCpu`]: what the `cpu-clock` timers could sample of
    /// the target, to tell where samples due went; `None` otherwise.
    pub timer: Option<TimerCounts>,
}

/// What the `cpu-clock` timers of an on-CPU profile could sample of the
/// target, cumulative since attach (see `WM_COUNT_*` in stacks.h).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimerCounts {
    /// Timer periods with no sample while a thread of the target stayed on
    /// the CPU: the timer fired more than a period late and the kernel
    /// skipped the periods it missed. Samples the timer never fired for.
    pub skipped_periods: u64,
    /// Time the target's threads were on a CPU, ns, from their switch-in to
    /// their switch-out (`sched_switch`; a thread already running at
    /// attach is counted from its first sample). What a timer can sample;
    /// the scheduler's CPU time (`schedstat`) of a thread that is woken
    /// and switched in thousands of times a second can be a few percent
    /// more (see ACCURACY.md, "Samples kept against samples due").
    pub switch_ns: u64,
    /// Time the on-CPU program itself ran in the target's samples, ns: an
    /// interrupt's time, charged to the sampled thread's CPU time (unless
    /// the kernel is built with `CONFIG_IRQ_TIME_ACCOUNTING`) although no
    /// other sample of that CPU's timer can fall in it.
    pub program_ns: u64,
    /// The timers that sampled.
    pub sampling_timer: SamplingTimer,
    /// Set when [`SamplingTimer::PerThread`] was asked for and the target
    /// had more threads than the descriptor budget: it sampled per CPU.
    pub fallback: Option<TimerFallback>,
    /// [`SamplingTimer::PerThread`]: events opened at attach, one per
    /// thread (threads created later inherit one and are not counted);
    /// 0 per CPU.
    pub thread_events: u32,
}

/// Which `cpu-clock` timers an on-CPU profile samples with (one concept,
/// "sampling timer"; the CLI's `profile --timer thread|cpu`). The library
/// defaults to [`SamplingTimer::PerCpu`], which takes no descriptor per
/// thread from the process it runs in; the CLI's `profile`, a process of its
/// own, defaults to [`SamplingTimer::PerThread`], as `perf record -p` does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SamplingTimer {
    /// One event per online CPU, every process: a wall-clock timer that
    /// samples whatever runs on that CPU when it fires (perf's `-a`). A
    /// thread that runs in bursts is sampled unevenly (0.9 to 1.2 of its
    /// CPU time × frequency on this kind of machine), but the samples fall
    /// where its time goes (2 to 5% in the switch-in path).
    #[default]
    PerCpu,
    /// One event per thread of the target (`pid` = thread id, any CPU),
    /// inherited by the threads it creates later: a timer that runs only
    /// while that thread runs, with a fixed period of `10⁹ / frequency` ns of
    /// its CPU time carried across its switches (the kernel turns a
    /// frequency into that period for software clock events). Samples
    /// written are the thread's CPU time × frequency whatever its bursts
    /// (perf's `-p`), but a period that ends while the thread is being
    /// switched out fires as it is switched back in: 7 to 10% of samples
    /// in the switch-in path (`finish_task_switch`) on bursty servers. Needs
    /// one descriptor per thread (see [`SamplingTimer::fd_budget`]).
    PerThread,
}

impl SamplingTimer {
    /// The CLI's and the JSON's name: `cpu` or `thread`.
    pub fn name(self) -> &'static str {
        match self {
            SamplingTimer::PerCpu => "cpu",
            SamplingTimer::PerThread => "thread",
        }
    }

    /// The descriptors per-thread events may take: half the soft open-file
    /// limit (`RLIMIT_NOFILE`), leaving the other half to the rest of the
    /// process; `u32::MAX` without a limit (0 where per-thread events do
    /// not exist).
    pub fn fd_budget() -> u32 {
        imp::stacks::fd_budget()
    }
}

/// Why an on-CPU profile asked for [`SamplingTimer::PerThread`] samples with
/// [`SamplingTimer::PerCpu`] instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimerFallback {
    /// Threads of the target at attach.
    pub threads: u32,
    /// Descriptors the per-thread events could take
    /// ([`SamplingTimer::fd_budget`], or fewer: the events opened before
    /// the process ran out of descriptors).
    pub fd_budget: u32,
}

/// Options of a stack collection; start with [`StackSession::builder`].
#[derive(Debug, Clone)]
pub struct StackSessionBuilder {
    pub(crate) target: Target,
    pub(crate) kind: StackKind,
    pub(crate) frequency_hz: u64,
    pub(crate) max_stacks: u32,
    pub(crate) max_entries: u32,
    pub(crate) thread: u32,
    pub(crate) attach_kind: AttachKind,
    pub(crate) timer: SamplingTimer,
    /// `None`: `/sys/kernel/btf/vmlinux`.
    pub(crate) kernel_btf: Option<std::path::PathBuf>,
}

impl StackSessionBuilder {
    /// Defaults: [`DEFAULT_FREQUENCY_HZ`], [`DEFAULT_MAX_STACKS`],
    /// [`DEFAULT_MAX_ENTRIES`], [`AttachKind::Auto`].
    pub fn new(target: Target, kind: StackKind) -> Self {
        StackSessionBuilder {
            target,
            kind,
            frequency_hz: DEFAULT_FREQUENCY_HZ,
            max_stacks: DEFAULT_MAX_STACKS,
            max_entries: DEFAULT_MAX_ENTRIES,
            thread: 0,
            attach_kind: AttachKind::Auto,
            timer: SamplingTimer::PerCpu,
            kernel_btf: None,
        }
    }

    /// Collects the stacks of one thread of the target only (its thread
    /// id; 0, the default: every thread): its on-CPU samples, its off-CPU
    /// spans, or the wakeups of that thread. The filter runs in the kernel,
    /// so other threads take no room in the maps. A thread id that is not
    /// one of the target's gives an empty capture.
    pub fn with_thread(mut self, tid: u32) -> Self {
        self.thread = tid;
        self
    }

    /// On-CPU sampling frequency, samples per second per CPU (1 to
    /// [`MAX_FREQUENCY_HZ`]).
    pub fn with_frequency_hz(mut self, hz: u64) -> Self {
        self.frequency_hz = hz;
        self
    }

    /// The on-CPU profile's timers ([`SamplingTimer::PerCpu`], the
    /// default, or [`SamplingTimer::PerThread`]). Per thread falls back to
    /// per CPU, said in [`TimerCounts::fallback`], when the target has more
    /// threads than [`SamplingTimer::fd_budget`]; a thread that exits
    /// between the listing and its event's open is skipped. With
    /// [`StackSessionBuilder::with_thread`], only that thread gets an
    /// event (and the threads it creates).
    pub fn with_timer(mut self, timer: SamplingTimer) -> Self {
        self.timer = timer;
        self
    }

    /// Capacity of the stack map, in distinct stacks (1 to
    /// [`MAX_STACK_ENTRIES_LIMIT`]); each takes 1 KiB ([`STACK_DEPTH`]
    /// frames and a hash) plus the kernel's hash-map overhead, allocated at
    /// attach.
    pub fn with_max_stacks(mut self, stacks: u32) -> Self {
        self.max_stacks = stacks;
        self
    }

    /// Capacity of the count map, in distinct (thread, cause, stacks)
    /// entries (1 to [`MAX_STACK_ENTRIES_LIMIT`]).
    pub fn with_max_entries(mut self, entries: u32) -> Self {
        self.max_entries = entries;
        self
    }

    /// How the scheduler programs attach (off-CPU and wakeups).
    pub fn with_attach_kind(mut self, kind: AttachKind) -> Self {
        self.attach_kind = kind;
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

    /// Loads the program and starts collecting.
    ///
    /// # Errors
    /// [`EbpfError::StackOptionOutOfRange`] for an option out of range; else
    /// as [`crate::EbpfSourceBuilder::attach`], plus
    /// [`EbpfError::PerfEvent`] when a `cpu-clock` event cannot be opened.
    pub fn attach(self) -> Result<StackSession, EbpfError> {
        let out_of_range = |option: &'static str, value: u64, max: u64| {
            Err(EbpfError::StackOptionOutOfRange { option, value, max })
        };
        if !(1..=MAX_FREQUENCY_HZ).contains(&self.frequency_hz) {
            return out_of_range("frequency_hz", self.frequency_hz, MAX_FREQUENCY_HZ);
        }
        let limit = u64::from(MAX_STACK_ENTRIES_LIMIT);
        if !(1..=MAX_STACK_ENTRIES_LIMIT).contains(&self.max_stacks) {
            return out_of_range("max_stacks", u64::from(self.max_stacks), limit);
        }
        if !(1..=MAX_STACK_ENTRIES_LIMIT).contains(&self.max_entries) {
            return out_of_range("max_entries", u64::from(self.max_entries), limit);
        }
        imp::stacks::StackSession::attach(&self).map(|inner| StackSession { inner })
    }
}

/// Kernel programs collecting stacks of one process. Dropping it detaches
/// them and frees their maps.
#[derive(Debug)]
pub struct StackSession {
    inner: imp::stacks::StackSession,
}

impl StackSession {
    /// Options for collecting `kind` stacks of `target`.
    pub fn builder(target: Target, kind: StackKind) -> StackSessionBuilder {
        StackSessionBuilder::new(target, kind)
    }

    /// The observed process id.
    pub fn pid(&self) -> u32 {
        self.inner.pid()
    }

    /// What is collected.
    pub fn kind(&self) -> StackKind {
        self.inner.kind()
    }

    /// Wall time the attach took.
    pub fn attach_duration(&self) -> Duration {
        self.inner.attach_duration()
    }

    /// Rows of the unwind table in use for the target (16 bytes of kernel
    /// memory each, at most 262,144): the CFA and saved `%rbp` rules of
    /// every address range of its modules, from their `.eh_frame` (modules
    /// without frame pointers first, then the others while there is room),
    /// built at attach and again by [`StackSession::refresh_modules`]. 0
    /// when every module keeps frame pointers (the kernel's frame-pointer
    /// walk is used), and on other architectures than x86_64.
    ///
    /// The kernel holds two tables of the same size, each with room for as
    /// many rows again as at attach (at least 32,768 more), so that modules
    /// loaded later fit.
    pub fn leaf_rows(&self) -> u32 {
        self.inner.leaf_rows()
    }

    /// Kernel memory the unwind table holds, in bytes: two halves (one in
    /// use, one for the next rebuild) of room for the rows at attach and as
    /// many again (at least 32,768 more), 16 bytes a row; 0 without a table.
    pub fn leaf_table_bytes(&self) -> u64 {
        self.inner.leaf_table_bytes()
    }

    /// Picks up modules the target mapped or unmapped since the unwind
    /// table was built (`dlopen`, `dlclose`) and a new image after an
    /// exec: reads `/proc/<pid>/maps` and, when its executable file
    /// mappings changed, builds the table again from the modules already
    /// read plus the new ones and switches the programs to it (a walk in
    /// progress finishes on the old table). Call it about once a second
    /// while capturing; a module mapped between two calls is unwound with
    /// frame pointers (or marked truncated) until the next one.
    ///
    /// Returns whether the table changed. Costs one read of the maps file
    /// when nothing changed.
    ///
    /// # Errors
    /// [`EbpfError::Map`] or [`EbpfError::Io`] when the kernel maps cannot
    /// be read or written; the table in use then stays.
    pub fn refresh_modules(&mut self) -> Result<bool, EbpfError> {
        self.inner.refresh_modules()
    }

    /// Whether the target has exited.
    pub fn target_exited(&self) -> bool {
        self.inner.target_exited()
    }

    /// Detaches the programs (the maps stay readable): call before the
    /// last [`StackSession::read`] so that the capture ends at one moment.
    pub fn stop(&mut self) {
        self.inner.stop();
    }

    /// Reads every count since attach, with the stacks' addresses. Costs
    /// one map walk of the entries plus one lookup per distinct stack.
    ///
    /// # Errors
    /// [`EbpfError::Map`] when a map cannot be read.
    pub fn read(&mut self) -> Result<StackCounts, EbpfError> {
        self.inner.read()
    }
}
