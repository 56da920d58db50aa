//! Context switches and wakeups, from `getrusage`.

use criterion::measurement::{Measurement, ValueFormatter};

use crate::error::Result;
use crate::format::CountFormatter;
use crate::sys::{self, Switches, Who};

/// Which switches to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchKind {
    /// The thread gave up the CPU itself: it blocked (sleep, futex, poll,
    /// read...). Each one is followed by a wakeup.
    Voluntary,
    /// The scheduler took the CPU away (time slice over, a higher-priority
    /// thread woke); includes `sched_yield`.
    Involuntary,
    /// Both.
    All,
}

/// Context switches per iteration, from `getrusage` (`ru_nvcsw`,
/// `ru_nivcsw`): exact counts kept by the kernel, one system call per read
/// (overhead per sample: BENCHMARKS.md, "criterion measurements").
///
/// By default the benchmark's thread is measured (`RUSAGE_THREAD`, Linux and
/// Android); [`ContextSwitches::process`] counts every thread of the
/// process, exited ones included (`RUSAGE_SELF`, any Unix).
///
/// ```no_run
/// use criterion::{Criterion, criterion_group, criterion_main};
/// use wakemeter_criterion::ContextSwitches;
///
/// fn sleep_1ms(c: &mut Criterion<ContextSwitches>) {
///     c.bench_function("sleep 1ms", |b| {
///         b.iter(|| std::thread::sleep(std::time::Duration::from_millis(1)))
///     });
/// }
///
/// criterion_group! {
///     name = benches;
///     config = Criterion::default().with_measurement(ContextSwitches::voluntary());
///     targets = sleep_1ms
/// }
/// criterion_main!(benches);
/// ```
///
/// # Panics
/// For the thread scope, `end` panics when it runs on another thread than
/// `start`; `start` panics where the counts are unsupported (see
/// [`ContextSwitches::check`] to find out beforehand).
#[derive(Debug, Clone, Copy)]
pub struct ContextSwitches {
    kind: SwitchKind,
    who: Who,
}

/// Counters at `start`.
#[derive(Debug, Clone, Copy)]
pub struct SwitchesStart {
    thread: u64,
    at: Switches,
}

impl ContextSwitches {
    /// Voluntary switches of the benchmark's thread.
    pub fn voluntary() -> Self {
        ContextSwitches {
            kind: SwitchKind::Voluntary,
            who: Who::Thread,
        }
    }

    /// Involuntary switches of the benchmark's thread.
    pub fn involuntary() -> Self {
        ContextSwitches {
            kind: SwitchKind::Involuntary,
            who: Who::Thread,
        }
    }

    /// Voluntary + involuntary switches of the benchmark's thread.
    pub fn all() -> Self {
        ContextSwitches {
            kind: SwitchKind::All,
            who: Who::Thread,
        }
    }

    /// The same kind of switches, counted over every thread of the process
    /// (threads that exit during a sample included).
    pub fn process(self) -> Self {
        ContextSwitches {
            who: Who::Process,
            ..self
        }
    }

    /// Which switches are counted.
    pub fn kind(&self) -> SwitchKind {
        self.kind
    }

    /// Whether the whole process is counted (else the benchmark's thread).
    pub fn is_process(&self) -> bool {
        self.who == Who::Process
    }

    /// Ok if the counts can be read here; else the typed reason
    /// ([`crate::Error::Unsupported`] outside Linux/Android for the thread scope).
    ///
    /// # Errors
    /// As above, or [`crate::Error::Os`] if `getrusage` fails.
    pub fn check(&self) -> Result<()> {
        sys::switches(self.who).map(|_| ())
    }

    /// Reads the cumulative count now, for the calling thread or the process.
    ///
    /// # Errors
    /// As [`ContextSwitches::check`].
    pub fn read(&self) -> Result<u64> {
        sys::switches(self.who).map(|s| pick(self.kind, s))
    }
}

fn pick(kind: SwitchKind, s: Switches) -> u64 {
    match kind {
        SwitchKind::Voluntary => s.voluntary,
        SwitchKind::Involuntary => s.involuntary,
        SwitchKind::All => s.voluntary.saturating_add(s.involuntary),
    }
}

fn read_or_panic(who: Who) -> Switches {
    match sys::switches(who) {
        Ok(s) => s,
        Err(e) => panic!("ContextSwitches: {e}"),
    }
}

impl Measurement for ContextSwitches {
    type Intermediate = SwitchesStart;
    type Value = u64;

    fn start(&self) -> SwitchesStart {
        SwitchesStart {
            thread: sys::thread_key(),
            at: read_or_panic(self.who),
        }
    }

    fn end(&self, i: SwitchesStart) -> u64 {
        let now = read_or_panic(self.who);
        if self.who == Who::Thread {
            sys::check_same_thread("ContextSwitches", i.thread);
        }
        pick(self.kind, now).saturating_sub(pick(self.kind, i.at))
    }

    u64_value!();

    fn formatter(&self) -> &dyn ValueFormatter {
        &CountFormatter::SWITCHES
    }
}

/// Wakeups per iteration: how many times the measured threads were woken
/// from a blocking wait.
///
/// Definition: a thread that blocks (sleep, futex, poll, epoll_wait, read on
/// an empty pipe...) leaves the CPU with a *voluntary* context switch and
/// comes back only when something wakes it, so the wakeups a thread
/// receives are its voluntary switches, counted exactly by the kernel
/// (`ru_nvcsw` of `getrusage`). A thread still blocked at `end` has its last
/// switch counted and its wakeup not yet received: at most one per thread
/// blocked at that moment (zero for the thread that runs the benchmark).
/// Not counted: a wakeup of a thread that was still running (no switch
/// happened), and involuntary switches (preemption is not a wakeup).
///
/// The default scope is the whole process (`RUSAGE_SELF`, exited threads
/// included), so a benchmark that wakes a worker thread sees the worker's
/// wakeups; [`Wakeups::thread`] counts only the benchmark's thread.
///
/// Why not a perf event: the kernel has no software event for wakeups;
/// `sched:sched_wakeup` is a tracepoint, which needs tracefs mounted to be
/// resolved, and the eBPF source of wakemeter (`wakemeter-ebpf`) already
/// counts wakeups received and who sent them when it can attach.
/// Per-thread `schedstat` switch counts (times scheduled in) count arrivals after preemption as
/// well, so they overcount wakeups.
#[derive(Debug, Clone, Copy)]
pub struct Wakeups {
    inner: ContextSwitches,
}

impl Default for Wakeups {
    fn default() -> Self {
        Wakeups::process()
    }
}

impl Wakeups {
    /// Wakeups received by every thread of the process.
    pub fn process() -> Self {
        Wakeups {
            inner: ContextSwitches::voluntary().process(),
        }
    }

    /// Wakeups received by the benchmark's thread only.
    pub fn thread() -> Self {
        Wakeups {
            inner: ContextSwitches::voluntary(),
        }
    }

    /// Ok if wakeups can be counted here.
    ///
    /// # Errors
    /// As [`ContextSwitches::check`].
    pub fn check(&self) -> Result<()> {
        self.inner.check()
    }

    /// Reads the cumulative count now.
    ///
    /// # Errors
    /// As [`ContextSwitches::check`].
    pub fn read(&self) -> Result<u64> {
        self.inner.read()
    }
}

impl Measurement for Wakeups {
    type Intermediate = SwitchesStart;
    type Value = u64;

    fn start(&self) -> SwitchesStart {
        self.inner.start()
    }

    fn end(&self, i: SwitchesStart) -> u64 {
        self.inner.end(i)
    }

    u64_value!();

    fn formatter(&self) -> &dyn ValueFormatter {
        &CountFormatter::WAKEUPS
    }
}
