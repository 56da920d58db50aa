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
use wakemeter_ebpf::stacks::UnwindStop;

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
    let task_dir = format!("/proc/{pid}/task");
    let tids: Vec<u32> = match only {
        Some(tid) => vec![tid],
        None => match std::fs::read_dir(&task_dir) {
            Ok(dir) => dir
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect(),
            Err(_) => return out,
        },
    };
    for tid in tids {
        let Ok(text) = std::fs::read_to_string(format!("{task_dir}/{tid}/schedstat")) else {
            continue;
        };
        let Some(cpu_ns) = parse_schedstat(&text) else {
            continue;
        };
        let name = std::fs::read_to_string(format!("{task_dir}/{tid}/comm"))
            .map(|s| s.trim_end().to_owned())
            .unwrap_or_default();
        out.insert(tid, ThreadTime { cpu_ns, name });
    }
    out
}

/// The first field of a `schedstat` line: time on the CPU, ns.
fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().next()?.parse().ok()
}

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

/// Samples due against samples written in an on-CPU profile, per thread
/// and in all, and where the missing ones went.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SampleAccounting {
    /// Samples due in all (the sum over [`SampleAccounting::threads`]).
    pub due: f64,
    /// Samples written for those threads.
    pub written: u64,
    /// `written / due`, 0-1 (slightly above 1 when the CPU time was read
    /// a little after sampling started); `None` when nothing was due.
    pub kept_ratio: Option<f64>,
    /// Samples the kernel program ran for, every thread of the target
    /// (including threads not in [`SampleAccounting::threads`]).
    pub taken: u64,
    /// Samples taken but not written: the kernel's count map was full.
    pub lost_counts_full: u64,
    /// Samples due but never delivered to the program, estimated as
    /// `due - taken` of the threads accounted for, at least 0: the
    /// `cpu-clock` timer overran (interrupts disabled for more than a
    /// period), the kernel throttled sampling
    /// (`kernel.perf_event_max_sample_rate`), or another BPF program ran on
    /// that CPU at the time.
    pub not_delivered: f64,
    /// Threads that exited during the capture: their CPU time at the end is
    /// unknown, so they are not accounted for (their samples are not in
    /// [`SampleAccounting::written`]).
    pub threads_exited: u32,
    /// The threads accounted for, most samples due first.
    pub threads: Vec<ThreadSamples>,
}

impl SampleAccounting {
    /// Accounts for an on-CPU profile at `frequency_hz` whose threads had
    /// the CPU times `start` and `end`, and which holds `written(tid)`
    /// samples per thread. A thread only in `end` started during the
    /// capture (from 0 ns).
    pub(crate) fn new(
        frequency_hz: u64,
        start: &ThreadTimes,
        end: &ThreadTimes,
        written: impl Fn(u32) -> u64,
        all_written: u64,
        taken: u64,
        lost_counts_full: u64,
    ) -> SampleAccounting {
        let mut threads: Vec<ThreadSamples> = end
            .iter()
            .map(|(tid, t)| {
                let before = start.get(tid).map_or(0, |s| s.cpu_ns);
                let cpu_ns = t.cpu_ns.saturating_sub(before);
                ThreadSamples {
                    tid: *tid,
                    name: t.name.clone(),
                    cpu_ns,
                    due: cpu_ns as f64 * frequency_hz as f64 / 1e9,
                    written: written(*tid),
                }
            })
            .filter(|t| t.due > 0.0 || t.written > 0)
            .collect();
        threads.sort_by(|a, b| b.due.total_cmp(&a.due).then(a.tid.cmp(&b.tid)));
        let threads_exited =
            u32::try_from(start.keys().filter(|t| !end.contains_key(t)).count()).unwrap_or(0);
        let due: f64 = threads.iter().map(|t| t.due).sum();
        let accounted: u64 = threads.iter().map(|t| t.written).sum();
        // Samples of exited threads were taken too: leave them out of the
        // comparison with what the accounted threads were due.
        let taken_accounted = taken.saturating_sub(all_written.saturating_sub(accounted)) as f64;
        SampleAccounting {
            due,
            written: accounted,
            kept_ratio: ratio(accounted, due),
            taken,
            lost_counts_full,
            not_delivered: (due - taken_accounted).max(0.0),
            threads_exited,
            threads,
        }
    }
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

    fn times(list: &[(u32, u64)]) -> ThreadTimes {
        list.iter()
            .map(|(tid, ns)| {
                (
                    *tid,
                    ThreadTime {
                        cpu_ns: *ns,
                        name: format!("t{tid}"),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn samples_due_follow_cpu_time_and_frequency() {
        // 1: ran 2.77 s of CPU at 99 Hz: 274.23 due, 268 written.
        // 2: started during the capture, ran 100 ms: 9.9 due.
        // 3: exited: not accounted for. 4: idle.
        let start = times(&[(1, 1_000_000_000), (3, 5), (4, 7)]);
        let end = times(&[(1, 3_770_000_000), (2, 100_000_000), (4, 7)]);
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
        assert_eq!(a.written, 278);
        assert_eq!(a.threads_exited, 1);
        let kept = a.kept_ratio.unwrap_or_default();
        assert!((kept - 278.0 / 284.13).abs() < 1e-9, "{kept}");
        assert!((a.not_delivered - 6.13).abs() < 1e-9, "{}", a.not_delivered);
        let none = SampleAccounting::new(99, &start, &start, |_| 0, 0, 0, 0);
        assert_eq!(none.kept_ratio, None);
        assert!(none.threads.is_empty());
    }

    #[test]
    fn schedstat_first_field_is_the_cpu_time() {
        assert_eq!(parse_schedstat("123456 789 10\n"), Some(123_456));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    #[test]
    fn this_threads_cpu_time_is_read_and_grows() {
        let pid = std::process::id();
        let before = thread_times(pid, None);
        assert!(before.contains_key(&pid), "{before:?}");
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = thread_times(pid, Some(pid));
        let grew = after[&pid].cpu_ns - before[&pid].cpu_ns;
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
