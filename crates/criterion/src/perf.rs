//! Counters of `perf_event_open` (through the `perf-event2` crate) as a
//! criterion measurement of the benchmark's thread.

use std::sync::atomic::{AtomicU64, Ordering};

use criterion::Throughput;
use criterion::measurement::{Measurement, ValueFormatter};

use crate::error::Result;
use crate::format::{CountFormatter, CpuTimeFormatter};
use crate::sys;

/// A perf event this crate can count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PerfEvent {
    /// Software: CPU time of the task, in nanoseconds (`task-clock`).
    TaskClock,
    /// Software: CPU time by the per-CPU high-resolution timer, in nanoseconds (`cpu-clock`).
    CpuClock,
    /// Software: page faults, minor and major (`page-faults`).
    PageFaults,
    /// Software: context switches, voluntary and involuntary
    /// (`context-switches`). Needs kernel events included: CAP_PERFMON or
    /// `perf_event_paranoid <= 1`.
    ContextSwitches,
    /// Software: moves of the task to another CPU (`cpu-migrations`). Needs
    /// kernel events included, as [`PerfEvent::ContextSwitches`].
    CpuMigrations,
    /// Hardware: CPU cycles (`cycles`). Needs a PMU.
    Cycles,
    /// Hardware: retired instructions (`instructions`). Needs a PMU.
    Instructions,
    /// Hardware: last-level cache references (`cache-references`). Needs a PMU.
    CacheReferences,
    /// Hardware: last-level cache misses (`cache-misses`). Needs a PMU.
    CacheMisses,
    /// Hardware: mispredicted branches (`branch-misses`). Needs a PMU.
    BranchMisses,
}

impl PerfEvent {
    /// Every event, software first.
    pub const ALL: [PerfEvent; 10] = [
        PerfEvent::TaskClock,
        PerfEvent::CpuClock,
        PerfEvent::PageFaults,
        PerfEvent::ContextSwitches,
        PerfEvent::CpuMigrations,
        PerfEvent::Cycles,
        PerfEvent::Instructions,
        PerfEvent::CacheReferences,
        PerfEvent::CacheMisses,
        PerfEvent::BranchMisses,
    ];

    /// The name `perf stat` uses.
    pub fn name(self) -> &'static str {
        match self {
            PerfEvent::TaskClock => "task-clock",
            PerfEvent::CpuClock => "cpu-clock",
            PerfEvent::PageFaults => "page-faults",
            PerfEvent::ContextSwitches => "context-switches",
            PerfEvent::CpuMigrations => "cpu-migrations",
            PerfEvent::Cycles => "cycles",
            PerfEvent::Instructions => "instructions",
            PerfEvent::CacheReferences => "cache-references",
            PerfEvent::CacheMisses => "cache-misses",
            PerfEvent::BranchMisses => "branch-misses",
        }
    }

    /// A hardware event: needs a performance monitoring unit.
    pub fn is_hardware(self) -> bool {
        matches!(
            self,
            PerfEvent::Cycles
                | PerfEvent::Instructions
                | PerfEvent::CacheReferences
                | PerfEvent::CacheMisses
                | PerfEvent::BranchMisses
        )
    }

    /// The count is a time in nanoseconds (task-clock, cpu-clock).
    pub fn is_time(self) -> bool {
        matches!(self, PerfEvent::TaskClock | PerfEvent::CpuClock)
    }

    /// Counting it needs kernel events included (it happens in the
    /// scheduler): counting user space only would always read 0.
    pub fn needs_kernel(self) -> bool {
        matches!(self, PerfEvent::ContextSwitches | PerfEvent::CpuMigrations)
    }

    fn formatters(self) -> (CountFormatter, CountFormatter) {
        macro_rules! f {
            ($n:literal) => {
                (
                    CountFormatter::new_static(
                        concat!($n, "/iter"),
                        concat!($n, "/elem"),
                        concat!($n, "/byte"),
                        concat!($n, "/bit"),
                        $n,
                    ),
                    CountFormatter::new_static(
                        concat!($n, "/iter (scaled: multiplexed)"),
                        concat!($n, "/elem (scaled: multiplexed)"),
                        concat!($n, "/byte (scaled: multiplexed)"),
                        concat!($n, "/bit (scaled: multiplexed)"),
                        $n,
                    ),
                )
            };
        }
        match self {
            PerfEvent::TaskClock | PerfEvent::CpuClock => f!("ns"),
            PerfEvent::PageFaults => f!("page-faults"),
            PerfEvent::ContextSwitches => f!("switches"),
            PerfEvent::CpuMigrations => f!("migrations"),
            PerfEvent::Cycles => f!("cycles"),
            PerfEvent::Instructions => f!("instructions"),
            PerfEvent::CacheReferences => f!("cache-refs"),
            PerfEvent::CacheMisses => f!("cache-misses"),
            PerfEvent::BranchMisses => f!("branch-misses"),
        }
    }
}

/// One perf counter of the benchmark's thread as a criterion measurement.
///
/// The counter is opened by [`PerfCounter::new`] for the calling thread (the
/// one that will run the benchmark: criterion runs benchmarks on the thread
/// that calls it) and read with one `read` system call at `start` and `end`
/// (no lock). [`PerfCounter::inherit`] also counts threads the calling
/// thread creates *afterwards* (e.g. a tokio runtime built inside the
/// benchmark), summed by the kernel.
///
/// Kernel events are included when allowed (root, CAP_PERFMON or
/// `perf_event_paranoid <= 1`); otherwise hardware, clock and fault events
/// fall back to user space only ([`PerfCounter::counts_kernel`] says which),
/// and switches/migrations fail with [`crate::Error::Forbidden`], since
/// they would always read 0.
///
/// Multiplexing: when the kernel shares the PMU between more counters than
/// it has, a counter runs only part of the time. Each sample is then scaled
/// by `time_enabled / time_running` of that sample, counted in
/// [`PerfCounter::scaled_samples`], and the unit reads
/// `…/iter (scaled: multiplexed)`. A sample during which the counter never
/// ran reports 0 and is counted in [`PerfCounter::unscheduled_samples`].
///
/// # Panics
/// `start`/`end` panic when called on another thread than the one that
/// created the counter (without `inherit`, that thread's events are not
/// counted), or if the counter's `read` fails.
#[derive(Debug)]
pub struct PerfCounter {
    event: PerfEvent,
    owner: u64,
    kernel: bool,
    inherit: bool,
    scaled: AtomicU64,
    unscheduled: AtomicU64,
    plain: CountFormatter,
    scaled_fmt: CountFormatter,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    counter: perf_event::Counter,
}

/// Raw counter values at `start`: count, time enabled (ns), time running (ns).
#[derive(Debug, Clone, Copy, Default)]
pub struct PerfReading {
    /// Cumulative count.
    pub count: u64,
    /// Nanoseconds the counter was enabled.
    pub time_enabled_ns: u64,
    /// Nanoseconds the counter was actually counting (less when multiplexed).
    pub time_running_ns: u64,
}

impl PerfCounter {
    /// Opens `event` for the calling thread.
    ///
    /// # Errors
    /// - [`crate::Error::NoCounter`] for a hardware event on a machine
    ///   without a PMU (most VMs), or an event this kernel lacks;
    /// - [`crate::Error::Forbidden`] when `perf_event_paranoid` and missing
    ///   CAP_PERFMON forbid it (switches and migrations need kernel events);
    /// - [`crate::Error::Unsupported`] outside Linux and Android, or where
    ///   `perf_event_open` does not exist (ENOSYS);
    /// - [`crate::Error::Os`] otherwise.
    pub fn new(event: PerfEvent) -> Result<PerfCounter> {
        Self::open(event, false)
    }

    /// As [`PerfCounter::new`], also counting threads that the calling
    /// thread creates after this call (not threads that already exist).
    ///
    /// # Errors
    /// As [`PerfCounter::new`].
    pub fn inherit(event: PerfEvent) -> Result<PerfCounter> {
        Self::open(event, true)
    }

    /// The event counted.
    pub fn event(&self) -> PerfEvent {
        self.event
    }

    /// Whether kernel-mode events are counted (else user space only).
    pub fn counts_kernel(&self) -> bool {
        self.kernel
    }

    /// Whether threads created after opening are counted too.
    pub fn inherits(&self) -> bool {
        self.inherit
    }

    /// Samples scaled because the counter was multiplexed.
    pub fn scaled_samples(&self) -> u64 {
        self.scaled.load(Ordering::Relaxed)
    }

    /// Samples during which the counter never ran (reported as 0).
    pub fn unscheduled_samples(&self) -> u64 {
        self.unscheduled.load(Ordering::Relaxed)
    }

    /// Reads the counter now: cumulative count and times.
    ///
    /// # Errors
    /// [`crate::Error::Os`] if `read` fails.
    pub fn read(&self) -> Result<PerfReading> {
        self.read_imp()
    }

    /// The scaled difference of two readings, counting scaled and unscheduled samples.
    fn delta(&self, a: PerfReading, b: PerfReading) -> u64 {
        let count = b.count.wrapping_sub(a.count);
        let enabled = b.time_enabled_ns.saturating_sub(a.time_enabled_ns);
        let running = b.time_running_ns.saturating_sub(a.time_running_ns);
        if running == enabled || enabled == 0 {
            return count;
        }
        if running == 0 {
            self.unscheduled.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        self.scaled.fetch_add(1, Ordering::Relaxed);
        let scaled = u128::from(count) * u128::from(enabled) / u128::from(running);
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }

    fn read_or_panic(&self) -> PerfReading {
        // Even an inherited counter is the creating thread's (plus its
        // children): read on another thread, it still counts only those.
        sys::check_same_thread("PerfCounter", self.owner);
        match self.read_imp() {
            Ok(r) => r,
            Err(e) => panic!("PerfCounter({}): {e}", self.event.name()),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod imp {
    use std::os::fd::AsRawFd;

    use perf_event::Builder;
    use perf_event::events::{Hardware, Software};

    use super::{PerfCounter, PerfEvent, PerfReading};
    use crate::error::{Error, Result};
    use crate::sys;

    fn paranoid() -> String {
        wakemeter_procfs::system::perf_event_paranoid().unwrap_or_else(|_| "unknown".to_string())
    }

    fn build(
        event: PerfEvent,
        kernel: bool,
        inherit: bool,
    ) -> std::io::Result<perf_event::Counter> {
        let mut b = match event {
            PerfEvent::TaskClock => Builder::new(Software::TASK_CLOCK),
            PerfEvent::CpuClock => Builder::new(Software::CPU_CLOCK),
            PerfEvent::PageFaults => Builder::new(Software::PAGE_FAULTS),
            PerfEvent::ContextSwitches => Builder::new(Software::CONTEXT_SWITCHES),
            PerfEvent::CpuMigrations => Builder::new(Software::CPU_MIGRATIONS),
            PerfEvent::Cycles => Builder::new(Hardware::CPU_CYCLES),
            PerfEvent::Instructions => Builder::new(Hardware::INSTRUCTIONS),
            PerfEvent::CacheReferences => Builder::new(Hardware::CACHE_REFERENCES),
            PerfEvent::CacheMisses => Builder::new(Hardware::CACHE_MISSES),
            PerfEvent::BranchMisses => Builder::new(Hardware::BRANCH_MISSES),
        };
        b.observe_self()
            .any_cpu()
            .exclude_kernel(!kernel)
            .inherit(inherit)
            .enabled(true);
        b.build()
    }

    fn classify(event: PerfEvent, kernel: bool, e: std::io::Error) -> Error {
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => Error::NoCounter {
                event: event.name(),
                capability: if event.is_hardware() {
                    "hardware performance monitoring unit (PMU); virtual machines usually have none"
                } else {
                    "software perf event of this kind in its kernel"
                },
                source: e,
            },
            Some(libc::EACCES) | Some(libc::EPERM) => Error::Forbidden {
                event: event.name(),
                paranoid: paranoid(),
                needed_paranoid: if kernel { 1 } else { 2 },
                source: e,
            },
            Some(libc::ENOSYS) => sys::unsupported("perf_event_open (ENOSYS)"),
            _ => Error::Os {
                call: "perf_event_open",
                source: e,
            },
        }
    }

    impl PerfCounter {
        pub(super) fn open(event: PerfEvent, inherit: bool) -> Result<PerfCounter> {
            let (counter, kernel) = match build(event, true, inherit) {
                Ok(c) => (c, true),
                Err(e)
                    if !event.needs_kernel()
                        && matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) =>
                {
                    (
                        build(event, false, inherit).map_err(|e| classify(event, false, e))?,
                        false,
                    )
                }
                Err(e) => return Err(classify(event, true, e)),
            };
            let (plain, scaled_fmt) = event.formatters();
            Ok(PerfCounter {
                event,
                owner: sys::thread_key(),
                kernel,
                inherit,
                scaled: Default::default(),
                unscheduled: Default::default(),
                plain,
                scaled_fmt,
                counter,
            })
        }

        pub(super) fn read_imp(&self) -> Result<PerfReading> {
            // read_format is TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING (the
            // crate's default, not changed here): value, enabled, running.
            let mut buf = [0u64; 3];
            let want = std::mem::size_of_val(&buf);
            // SAFETY: the fd is the counter's, open while `self` lives; `buf`
            // is a writable buffer of `want` bytes.
            let n = unsafe {
                libc::read(
                    self.counter.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    want,
                )
            };
            if n != want as isize {
                return Err(Error::Os {
                    call: "read (perf counter)",
                    source: if n < 0 {
                        std::io::Error::last_os_error()
                    } else {
                        std::io::Error::from(std::io::ErrorKind::UnexpectedEof)
                    },
                });
            }
            Ok(PerfReading {
                count: buf[0],
                time_enabled_ns: buf[1],
                time_running_ns: buf[2],
            })
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod imp {
    use super::{PerfCounter, PerfEvent, PerfReading};
    use crate::error::Result;
    use crate::sys;

    impl PerfCounter {
        pub(super) fn open(_event: PerfEvent, _inherit: bool) -> Result<PerfCounter> {
            Err(sys::unsupported("perf counters (perf_event_open)"))
        }

        pub(super) fn read_imp(&self) -> Result<PerfReading> {
            Err(sys::unsupported("perf counters (perf_event_open)"))
        }
    }
}

impl Measurement for PerfCounter {
    type Intermediate = PerfReading;
    type Value = u64;

    fn start(&self) -> PerfReading {
        self.read_or_panic()
    }

    fn end(&self, i: PerfReading) -> u64 {
        let now = self.read_or_panic();
        self.delta(i, now)
    }

    u64_value!();

    fn formatter(&self) -> &dyn ValueFormatter {
        self
    }
}

impl ValueFormatter for PerfCounter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        if self.event.is_time() {
            return CpuTimeFormatter.scale_values(typical, values);
        }
        if self.scaled_samples() > 0 {
            self.scaled_fmt.scale_values(typical, values)
        } else {
            self.plain.scale_values(typical, values)
        }
    }

    fn scale_throughputs(
        &self,
        typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        if self.event.is_time() {
            return CpuTimeFormatter.scale_throughputs(typical, throughput, values);
        }
        if self.scaled_samples() > 0 {
            self.scaled_fmt
                .scale_throughputs(typical, throughput, values)
        } else {
            self.plain.scale_throughputs(typical, throughput, values)
        }
    }

    fn scale_for_machines(&self, values: &mut [f64]) -> &'static str {
        self.plain.scale_for_machines(values)
    }
}
