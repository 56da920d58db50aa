//! Whether a profile holds every sample due, and why stacks end early.
//!
//! Samples due: a `cpu-clock` event fires every `1 / frequency` seconds of
//! a CPU's time, so a thread that ran `t` ns during the capture is due
//! `t × frequency / 10⁹` samples. The thread's CPU time is read from its
//! `/proc/<pid>/task/<tid>/schedstat` (the scheduler's own count, in ns,
//! not the tick-based `utime` + `stime`) when the capture starts and just
//! before it stops. The samples written are those the profile holds for the
//! thread.

use std::collections::BTreeMap;

use serde::Serialize;
use wakemeter_ebpf::stacks::{TimerCounts, UnwindStop};

/// CPU time of each thread of a process, ns, by thread id.
pub(crate) type ThreadTimes = BTreeMap<u32, ThreadTime>;

/// One thread's CPU time when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ThreadTime {
    pub cpu_ns: u64,
    pub name: String,
}

/// Reads the CPU time of every thread of `pid` (or of the one thread
/// `only`), from `/proc`. Threads that exit while being read are left out;
/// an unreadable process gives an empty map.
pub(crate) fn thread_times(pid: u32, only: Option<u32>) -> ThreadTimes {
    let mut out = ThreadTimes::new();
    let tids: Vec<u32> = match only {
        Some(tid) => vec![tid],
        None => match wakemeter_procfs::process::tids(pid) {
            Ok(tids) => tids,
            Err(_) => return out,
        },
    };
    for tid in tids {
        let Ok(raw) = wakemeter_procfs::process::task_file(pid, tid, "schedstat") else {
            continue;
        };
        let Some((cpu_ns, _, _)) = wakemeter_procfs::parse::schedstat(&raw) else {
            continue;
        };
        let name = wakemeter_procfs::process::task_file(pid, tid, "comm")
            .map(|raw| String::from_utf8_lossy(wakemeter_procfs::parse::comm(&raw)).into_owned())
            .unwrap_or_default();
        out.insert(tid, ThreadTime { cpu_ns, name });
    }
    out
}

/// CPU time of the whole process `pid` so far, ns: the scheduler's
/// `sum_exec_runtime` of its live threads plus that of its threads that
/// exited (the process CPU clock, `clock_getcpuclockid`), so threads that
/// start and exit within a capture are counted. `None` when the process
/// is gone.
#[cfg(target_os = "linux")]
pub(crate) fn process_cpu_ns(pid: u32) -> Option<u64> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid, writable clockid_t for the call.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    Some(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn process_cpu_ns(_pid: u32) -> Option<u64> {
    None
}

/// The first field of a `schedstat` line: time on the CPU, ns.
/// Samples due and written for one thread of an on-CPU profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ThreadSamples {
    /// Thread id.
    pub tid: u32,
    /// Thread name (`comm`) at the end of the capture.
    pub name: String,
    /// CPU time the thread ran during the capture, ns (schedstat).
    pub cpu_ns: u64,
    /// Samples due: `cpu_ns × frequency / 10⁹`, e.g. 27.4 for 277 ms at
    /// 99 Hz.
    pub due: f64,
    /// Samples the profile holds for the thread.
    pub written: u64,
}

impl ThreadSamples {
    /// `written / due`; `None` when nothing was due.
    pub fn kept_ratio(&self) -> Option<f64> {
        ratio(self.written, self.due)
    }
}

fn ratio(written: u64, due: f64) -> Option<f64> {
    (due > 0.0).then(|| written as f64 / due)
}

/// The CPU times a capture reads at its start and just before its stop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CpuTimes {
    pub threads: ThreadTimes,
    /// The whole process's ([`process_cpu_ns`]); `None` when one thread
    /// is captured, or unreadable.
    pub process_ns: Option<u64>,
}

impl CpuTimes {
    /// Reads them for `pid` (or its one thread `only`).
    pub(crate) fn read(pid: u32, only: Option<u32>) -> CpuTimes {
        CpuTimes {
            // The process clock first: at the end, a thread that exits
            // between the two reads is then in neither, not in both.
            process_ns: only.is_none().then(|| process_cpu_ns(pid)).flatten(),
            threads: thread_times(pid, only),
        }
    }
}

/// Samples due against samples written in an on-CPU profile, in all and
/// per thread, and where the missing ones went.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SampleAccounting {
    /// CPU time the figures below cover, ns: the whole process's during
    /// the capture (its CPU clock, which includes threads that started and
    /// exited within it), or, when one thread is captured or the process
    /// clock is unreadable, the sum over [`SampleAccounting::threads`].
    pub cpu_ns: u64,
    /// Samples due: `cpu_ns × frequency / 10⁹`.
    pub due: f64,
    /// Samples written for that CPU time.
    pub written: u64,
    /// `written / due`, about 1 (a count varies by about `√due` from run
    /// to run: a thread that runs in short bursts is sampled like a coin
    /// toss per burst); `None` when nothing was due.
    pub kept_ratio: Option<f64>,
    /// Samples the kernel program ran for (every thread of the target).
    pub taken: u64,
    /// Samples taken but not written: the kernel's count map was full.
    pub lost_counts_full: u64,
    /// Samples due but never delivered to the program, estimated as
    /// `due - taken`, at least 0. Mostly CPU time the scheduler charged to
    /// a thread that was not yet on a CPU, which no timer can sample: a
    /// wakeup that preempts what runs (an idle CPU too) charges the woken
    /// thread from the wakeup, not from its switch-in (the run queue's clock
    /// is not read again at the switch), a few µs a wakeup
    /// ([`TimerAccounting::on_cpu_ns`] is the time without it). The rest:
    /// the `cpu-clock` timer overran (interrupts disabled for more than a
    /// period), the kernel throttled sampling
    /// (`kernel.perf_event_max_sample_rate`), per CPU the timer fired in
    /// another task's turn, or another BPF program ran on that CPU.
    pub not_delivered: f64,
    /// What the `cpu-clock` timers could sample (from the kernel program);
    /// `None` when not measured.
    pub timer: Option<TimerAccounting>,
    /// Threads seen at the start that exited during the capture: their CPU
    /// time at the end is unknown, so they are not in
    /// [`SampleAccounting::threads`] (the process's figures include them).
    pub threads_exited: u32,
    /// Threads alive at the end, with their own figures, most samples due
    /// first.
    pub threads: Vec<ThreadSamples>,
}

impl SampleAccounting {
    /// Accounts for an on-CPU profile at `frequency_hz` whose target had the
    /// CPU times `start` and `end`, and which holds `written(tid)` samples
    /// per thread, `all_written` in all. A thread only in `end` started
    /// during the capture (from 0 ns).
    pub(crate) fn new(
        frequency_hz: u64,
        start: &CpuTimes,
        end: &CpuTimes,
        written: impl Fn(u32) -> u64,
        all_written: u64,
        taken: u64,
        lost_counts_full: u64,
    ) -> SampleAccounting {
        let per_s = frequency_hz as f64 / 1e9;
        let mut threads: Vec<ThreadSamples> = end
            .threads
            .iter()
            .map(|(tid, t)| {
                let before = start.threads.get(tid).map_or(0, |s| s.cpu_ns);
                let cpu_ns = t.cpu_ns.saturating_sub(before);
                ThreadSamples {
                    tid: *tid,
                    name: t.name.clone(),
                    cpu_ns,
                    due: cpu_ns as f64 * per_s,
                    written: written(*tid),
                }
            })
            .filter(|t| t.due > 0.0 || t.written > 0)
            .collect();
        threads.sort_by(|a, b| b.due.total_cmp(&a.due).then(a.tid.cmp(&b.tid)));
        let threads_exited = u32::try_from(
            start
                .threads
                .keys()
                .filter(|t| !end.threads.contains_key(t))
                .count(),
        )
        .unwrap_or(0);
        let (cpu_ns, written, taken_for) = match (start.process_ns, end.process_ns) {
            (Some(a), Some(b)) => (b.saturating_sub(a), all_written, taken),
            _ => {
                let accounted: u64 = threads.iter().map(|t| t.written).sum();
                // Samples of threads not accounted for were taken too.
                let others = all_written.saturating_sub(accounted);
                (
                    threads.iter().map(|t| t.cpu_ns).sum(),
                    accounted,
                    taken.saturating_sub(others),
                )
            }
        };
        let due = cpu_ns as f64 * per_s;
        SampleAccounting {
            cpu_ns,
            due,
            written,
            kept_ratio: ratio(written, due),
            taken,
            lost_counts_full,
            not_delivered: (due - taken_for as f64).max(0.0),
            timer: None,
            threads_exited,
            threads,
        }
    }

    /// Adds what the timers of a profile at `frequency_hz` could sample.
    pub(crate) fn with_timer(mut self, frequency_hz: u64, timer: Option<TimerCounts>) -> Self {
        self.timer = timer.map(|t| {
            let due = t.switch_ns as f64 * frequency_hz as f64 / 1e9;
            TimerAccounting {
                on_cpu_ns: t.switch_ns,
                due,
                kept_ratio: ratio(self.written, due),
                skipped_periods: t.skipped_periods,
                program_ns: t.program_ns,
                sampling_timer: t.sampling_timer.name(),
                fallback: t.fallback.map(|f| TimerFallbackAccounting {
                    threads: f.threads,
                    fd_budget: f.fd_budget,
                }),
                thread_events: t.thread_events,
            }
        });
        self
    }
}

/// Samples due by the time the target's threads were on a CPU, which is
/// what a `cpu-clock` timer can sample, and the samples the timer skipped.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TimerAccounting {
    /// Time the target's threads were on a CPU during the capture, ns, from
    /// each switch-in to its switch-out (`sched_switch`). The scheduler's
    /// CPU time ([`SampleAccounting::cpu_ns`]) may be a few percent more
    /// for a thread woken thousands of times a second: see
    /// [`SampleAccounting::not_delivered`].
    pub on_cpu_ns: u64,
    /// Samples due by that time: `on_cpu_ns × frequency / 10⁹`.
    pub due: f64,
    /// [`SampleAccounting::written`] / `due`; `None` when nothing was due.
    pub kept_ratio: Option<f64>,
    /// Periods the timer skipped while a thread of the target stayed on
    /// the CPU (it fired more than a period late): samples never taken.
    pub skipped_periods: u64,
    /// Time the on-CPU program ran in the target's samples, ns: charged to
    /// the target's CPU time, though no sample of that CPU falls in it.
    pub program_ns: u64,
    /// The timers that sampled: `cpu` (one `cpu-clock` event per CPU, a
    /// wall-clock timer sampling whatever runs) or `thread` (one per
    /// thread of the target, a timer of that thread's own CPU time); see
    /// [`wakemeter_ebpf::SamplingTimer`].
    pub sampling_timer: &'static str,
    /// Set when per-thread timers were asked for and the target had more
    /// threads than the descriptor budget: the profile sampled per CPU.
    pub fallback: Option<TimerFallbackAccounting>,
    /// Per-thread events opened at attach (threads created later inherit
    /// one); 0 per CPU.
    pub thread_events: u32,
}

/// Why an on-CPU profile that asked for per-thread timers sampled per CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TimerFallbackAccounting {
    /// Threads of the target at attach.
    pub threads: u32,
    /// Descriptors the per-thread events could take: half the soft
    /// open-file limit (`RLIMIT_NOFILE`).
    pub fd_budget: u32,
}

/// Why a user stack ends before its outermost frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StopReason {
    /// The kernel's unwinding from the unwind table stopped, and why.
    Unwinder(UnwindStop),
    /// A return address outside every executable mapping: a data word a
    /// frame-pointer walk read through a `%rbp` that held no frame pointer
    /// (see [`crate::StackGap::UserTruncated`]).
    OutsideCode,
}

impl StopReason {
    /// A short snake_case name (`no_cfi_row`, `outside_code`, ...).
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Unwinder(stop) => stop.name(),
            StopReason::OutsideCode => "outside_code",
        }
    }
}

impl Serialize for StopReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// How many events' user stacks stopped early in one module for one
/// reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct UnwindStopCount {
    /// The module (file path) of the frame the walk could not step from;
    /// `None` when its address is in no file mapping (JIT code, the vDSO
    /// or an anonymous mapping).
    pub module: Option<String>,
    /// Why.
    pub reason: StopReason,
    /// Events (samples, switch-outs or wakeups) with such a stack.
    pub events: u64,
}

/// Adds `events` to the count of (`module`, `reason`) in `stops`.
pub(crate) fn add_stop(
    stops: &mut Vec<UnwindStopCount>,
    module: Option<String>,
    reason: StopReason,
    events: u64,
) {
    match stops
        .iter_mut()
        .find(|s| s.reason == reason && s.module == module)
    {
        Some(s) => s.events = s.events.saturating_add(events),
        None => stops.push(UnwindStopCount {
            module,
            reason,
            events,
        }),
    }
}

/// Removes the marker a truncated stack (innermost first) ends in and
/// returns why it stopped.
pub(crate) fn take_marker(addrs: &mut Vec<u64>) -> Option<UnwindStop> {
    let stop = UnwindStop::of_marker(*addrs.last()?)?;
    addrs.pop();
    Some(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(list: &[(u32, u64)], process_ns: Option<u64>) -> CpuTimes {
        CpuTimes {
            threads: list
                .iter()
                .map(|(tid, ns)| {
                    (
                        *tid,
                        ThreadTime {
                            cpu_ns: *ns,
                            name: format!("t{tid}"),
                        },
                    )
                })
                .collect(),
            process_ns,
        }
    }

    #[test]
    fn samples_due_by_time_on_a_cpu() {
        // 2.87 s of scheduler CPU time, 2.5 s between switch-ins and
        // switch-outs at 999 Hz: 2497.5 due by the timer's view, 2400 kept.
        let start = times(&[(1, 0)], Some(0));
        let end = times(&[(1, 2_870_000_000)], Some(2_870_000_000));
        let mut counts = TimerCounts::default();
        counts.switch_ns = 2_500_000_000;
        counts.skipped_periods = 3;
        counts.program_ns = 60_000_000;
        let a = SampleAccounting::new(999, &start, &end, |_| 2400, 2400, 2400, 0)
            .with_timer(999, Some(counts));
        let t = a.timer.as_ref().expect("timer figures");
        assert!((t.due - 2497.5).abs() < 1e-9, "{t:?}");
        assert!((t.kept_ratio.unwrap_or_default() - 2400.0 / 2497.5).abs() < 1e-12);
        assert_eq!((t.skipped_periods, t.program_ns), (3, 60_000_000));
        let none = SampleAccounting::new(999, &start, &end, |_| 0, 0, 0, 0).with_timer(999, None);
        assert_eq!(none.timer, None);
    }

    #[test]
    fn samples_due_follow_cpu_time_and_frequency() {
        // 1: ran 2.77 s of CPU at 99 Hz: 274.23 due, 268 written.
        // 2: started during the capture, ran 100 ms: 9.9 due.
        // 3: exited: not accounted for. 4: idle.
        let start = times(&[(1, 1_000_000_000), (3, 5), (4, 7)], None);
        let end = times(&[(1, 3_770_000_000), (2, 100_000_000), (4, 7)], None);
        let written = |tid| match tid {
            1 => 268,
            2 => 10,
            _ => 0,
        };
        // 5 samples of thread 3 were taken and written too.
        let a = SampleAccounting::new(99, &start, &end, written, 283, 283, 0);
        assert_eq!(a.threads.len(), 2);
        assert_eq!(a.threads[0].tid, 1);
        assert!((a.threads[0].due - 274.23).abs() < 1e-9);
        assert!((a.threads[1].due - 9.9).abs() < 1e-9);
        assert_eq!(a.cpu_ns, 2_870_000_000);
        assert_eq!(a.written, 278);
        assert_eq!(a.threads_exited, 1);
        let kept = a.kept_ratio.unwrap_or_default();
        assert!((kept - 278.0 / 284.13).abs() < 1e-9, "{kept}");
        assert!((a.not_delivered - 6.13).abs() < 1e-9, "{}", a.not_delivered);
        let none = SampleAccounting::new(99, &start, &start, |_| 0, 0, 0, 0);
        assert_eq!(none.kept_ratio, None);
        assert!(none.threads.is_empty());

        // With the process clock, threads that came and went (thread 3,
        // and others never seen) are in the figures: 3 s of CPU, 297 due.
        let start = times(&[(1, 1_000_000_000), (3, 5)], Some(2_000_000_000));
        let end = times(&[(1, 3_770_000_000)], Some(5_000_000_000));
        let a = SampleAccounting::new(99, &start, &end, written, 290, 292, 2);
        assert_eq!(a.cpu_ns, 3_000_000_000);
        assert!((a.due - 297.0).abs() < 1e-9);
        assert_eq!(a.written, 290);
        assert!((a.not_delivered - 5.0).abs() < 1e-9, "{}", a.not_delivered);
        assert_eq!(a.threads.len(), 1);
    }

    #[test]
    fn the_accounting_and_stops_are_in_the_json() {
        let start = times(&[(1, 0)], Some(0));
        let end = times(&[(1, 1_000_000_000)], Some(1_000_000_000));
        let a = SampleAccounting::new(99, &start, &end, |_| 98, 98, 98, 0);
        let json = serde_json::to_value(&a).unwrap_or_default();
        assert_eq!(json["written"], 98);
        assert_eq!(json["cpu_ns"], 1_000_000_000u64);
        assert_eq!(json["threads"][0]["tid"], 1);
        let ratio = json["kept_ratio"].as_f64().unwrap_or_default();
        assert!((ratio - 98.0 / 99.0).abs() < 1e-9);
        let stop = UnwindStopCount {
            module: Some("/usr/sbin/nginx".into()),
            reason: StopReason::Unwinder(UnwindStop::UnencodedCfi),
            events: 3,
        };
        let json = serde_json::to_value(&stop).unwrap_or_default();
        assert_eq!(json["reason"], "unencoded_cfi");
        assert_eq!(json["module"], "/usr/sbin/nginx");
    }

    #[test]
    fn the_process_clock_counts_every_thread() {
        let pid = std::process::id();
        let before = process_cpu_ns(pid).unwrap_or_default();
        let spin = std::thread::spawn(|| {
            let t = std::time::Instant::now();
            let mut x = 0u64;
            while t.elapsed() < std::time::Duration::from_millis(30) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        });
        let _ = spin.join();
        // The thread has exited; its CPU time stays in the process clock.
        let after = process_cpu_ns(pid).unwrap_or_default();
        assert!(before > 0);
        assert!(after > before, "{before} -> {after}");
        assert_eq!(process_cpu_ns(u32::MAX), None);
    }

    #[test]
    fn this_threads_cpu_time_is_read_and_grows() {
        let pid = std::process::id();
        // "PID/task/TID": the test runs on a thread of its own.
        let link = std::fs::read_link("/proc/thread-self").unwrap_or_default();
        let tid: u32 = link
            .file_name()
            .and_then(|n| n.to_str()?.parse().ok())
            .unwrap_or_default();
        let before = thread_times(pid, None);
        assert!(before.contains_key(&tid), "{tid} not in {before:?}");
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = thread_times(pid, Some(tid));
        assert_eq!(after.len(), 1);
        let grew = after[&tid].cpu_ns - before[&tid].cpu_ns;
        assert!(grew > 0, "{grew}");
    }

    #[test]
    fn markers_tell_the_stop() {
        let mut s = vec![0x5555_0000_1000, 0x7f00_0000_2000, 4];
        assert_eq!(
            take_marker(&mut s),
            Some(UnwindStop::ReturnAddressUnreadable)
        );
        assert_eq!(s.len(), 2);
        assert_eq!(take_marker(&mut s), None);
        assert_eq!(s.len(), 2);
        let mut stops = Vec::new();
        add_stop(&mut stops, None, StopReason::OutsideCode, 2);
        add_stop(&mut stops, None, StopReason::OutsideCode, 3);
        add_stop(&mut stops, Some("a".into()), StopReason::OutsideCode, 1);
        assert_eq!(stops.len(), 2);
        assert_eq!(stops[0].events, 5);
    }
}
