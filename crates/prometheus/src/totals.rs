//! What the exporter adds up per group, from snapshots (the first update)
//! and from intervals (every later one).

use wakemeter::histogram::LOG2_BUCKETS;
use wakemeter::{
    KernelThreadInterval, Log2Histogram, LoopInterval, LoopStats, SleepInterval, SleepStats,
    ThreadInterval, ThreadSample,
};

use crate::groups::Totals;

/// Off-CPU causes, in the order of [`ThreadTotals::off_cpu_ns`].
pub const OFF_CPU_CAUSES: [&str; 6] = wakemeter::OffCpuTime::CAUSES;

fn add_buckets(into: &mut Vec<u64>, h: &Log2Histogram) {
    if into.len() < h.buckets.len() {
        into.resize(h.buckets.len().min(LOG2_BUCKETS), 0);
    }
    for (a, b) in into.iter_mut().zip(&h.buckets) {
        *a = a.saturating_add(*b);
    }
}

/// Counters of a group of threads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThreadTotals {
    pub cpu_ns: u64,
    pub switches: u64,
    pub run_queue_wait_ns: u64,
    /// eBPF `sched_waking` count.
    pub wakes: u64,
    /// eBPF off-CPU time by cause ([`OFF_CPU_CAUSES`]).
    pub off_cpu_ns: [u64; 6],
    /// eBPF syscall and switch counts, in the order of [`KERNEL_COUNTS`].
    pub kernel: [u64; KERNEL_COUNTS.len()],
}

/// The counts of the eBPF view, each from its per-second rate in
/// [`KernelThreadInterval`]: the metric's name (after `wakemeter_thread_`),
/// its help, and the rate it comes from.
#[allow(clippy::type_complexity)]
pub const KERNEL_COUNTS: [(&str, &str, fn(&KernelThreadInterval) -> f64); 7] = [
    (
        "voluntary_switches",
        "Voluntary context switches (the thread blocked) of the threads of this name (eBPF sched_switch).",
        |k| k.voluntary_switches_per_sec,
    ),
    (
        "involuntary_switches",
        "Involuntary context switches (preemptions) of the threads of this name (eBPF sched_switch).",
        |k| k.involuntary_switches_per_sec,
    ),
    (
        "poll_calls",
        "Poll-family syscalls (poll, ppoll, select, pselect6, epoll_wait, epoll_pwait, epoll_pwait2) of the threads of this name (eBPF).",
        |k| k.poll_calls_per_sec,
    ),
    (
        "blocking_polls",
        "Poll-family syscalls that blocked before returning (each return ended a wait) (eBPF).",
        |k| k.blocking_polls_per_sec,
    ),
    (
        "idle_nonblocking_polls",
        "Poll-family syscalls that returned nothing without blocking: polls that neither found work nor waited (eBPF).",
        |k| k.idle_nonblocking_polls_per_sec,
    ),
    (
        "sleep_syscalls",
        "nanosleep and clock_nanosleep calls of the threads of this name (eBPF).",
        |k| k.sleeps_per_sec,
    ),
    (
        "interrupted_sleeps",
        "Sleep syscalls ended early by a signal (EINTR) (eBPF).",
        |k| k.interrupted_sleeps_per_sec,
    ),
];

impl Totals for ThreadTotals {
    fn add(&mut self, o: &Self) {
        self.cpu_ns = self.cpu_ns.saturating_add(o.cpu_ns);
        self.switches = self.switches.saturating_add(o.switches);
        self.run_queue_wait_ns = self.run_queue_wait_ns.saturating_add(o.run_queue_wait_ns);
        self.wakes = self.wakes.saturating_add(o.wakes);
        for (a, b) in self.off_cpu_ns.iter_mut().zip(o.off_cpu_ns) {
            *a = a.saturating_add(b);
        }
        for (a, b) in self.kernel.iter_mut().zip(o.kernel) {
            *a = a.saturating_add(b);
        }
    }
}

impl ThreadTotals {
    /// Since the thread started.
    pub fn from_sample(t: &ThreadSample) -> Self {
        ThreadTotals {
            cpu_ns: t.total_cpu_time_ns,
            switches: t.total_switches.unwrap_or(0),
            run_queue_wait_ns: t.total_run_queue_wait_ns.unwrap_or(0),
            ..Default::default()
        }
    }

    /// Over one interval of `duration_ns`.
    pub fn from_interval(t: &ThreadInterval, duration_ns: u64) -> Self {
        let mut out = ThreadTotals {
            cpu_ns: t.cpu_time_ns,
            switches: t.switches.unwrap_or(0),
            run_queue_wait_ns: t.run_queue_wait_ns.unwrap_or(0),
            ..Default::default()
        };
        if let Some(k) = &t.kernel {
            // The interval keeps a rate; the count it came from is exact
            // up to float rounding.
            let count = |per_sec: f64| (per_sec * duration_ns as f64 / 1e9).round() as u64;
            out.wakes = count(k.wakes_per_sec);
            out.off_cpu_ns = k.off_cpu.by_cause();
            for (n, (_, _, rate)) in out.kernel.iter_mut().zip(KERNEL_COUNTS) {
                *n = count(rate(k));
            }
        }
        out
    }
}

/// Counters of a group of loop probes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopTotals {
    pub wakeups: u64,
    pub idle_wakeups: u64,
    pub zero_timeout_waits: u64,
    pub events: u64,
    pub wait_ns: u64,
    pub busy_ns: u64,
    /// Sum of the poll delays counted in `poll_delay_buckets`, in ns.
    pub poll_delay_ns: u64,
    /// Log2 buckets, as [`Log2Histogram::buckets`].
    pub poll_delay_buckets: Vec<u64>,
}

impl Totals for LoopTotals {
    fn add(&mut self, o: &Self) {
        self.wakeups = self.wakeups.saturating_add(o.wakeups);
        self.idle_wakeups = self.idle_wakeups.saturating_add(o.idle_wakeups);
        self.zero_timeout_waits = self.zero_timeout_waits.saturating_add(o.zero_timeout_waits);
        self.events = self.events.saturating_add(o.events);
        self.wait_ns = self.wait_ns.saturating_add(o.wait_ns);
        self.busy_ns = self.busy_ns.saturating_add(o.busy_ns);
        self.poll_delay_ns = self.poll_delay_ns.saturating_add(o.poll_delay_ns);
        add_buckets(
            &mut self.poll_delay_buckets,
            &Log2Histogram::from_buckets(&o.poll_delay_buckets),
        );
    }
}

impl LoopTotals {
    /// Since the probe was created.
    pub fn from_stats(l: &LoopStats) -> Self {
        LoopTotals {
            wakeups: l.total_wakeups,
            idle_wakeups: l.total_idle_wakeups,
            zero_timeout_waits: l.total_zero_timeout_waits,
            events: l.total_events,
            wait_ns: l.total_wait_ns,
            busy_ns: l.total_busy_ns,
            poll_delay_ns: l.total_poll_delay_ns,
            poll_delay_buckets: l.poll_delay_histogram.buckets.clone(),
        }
    }

    /// Over one interval.
    pub fn from_interval(l: &LoopInterval) -> Self {
        LoopTotals {
            wakeups: l.wakeups,
            idle_wakeups: l.idle_wakeups,
            zero_timeout_waits: l.zero_timeout_waits,
            events: l.events,
            wait_ns: l.wait_ns,
            busy_ns: l.busy_ns,
            // The mean is the integer quotient: low by less than 1 ns a delay.
            poll_delay_ns: l
                .mean_poll_delay_ns
                .saturating_mul(l.poll_delay_histogram.count()),
            poll_delay_buckets: l.poll_delay_histogram.buckets.clone(),
        }
    }
}

/// Counters of a group of sleep probes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SleepTotals {
    pub calls: u64,
    pub requested_ns: u64,
    pub actual_ns: u64,
    pub cpu_ns: u64,
    pub oversleep_ns: u64,
    /// Log2 buckets of oversleeps, as [`Log2Histogram::buckets`].
    pub oversleep_buckets: Vec<u64>,
}

impl Totals for SleepTotals {
    fn add(&mut self, o: &Self) {
        self.calls = self.calls.saturating_add(o.calls);
        self.requested_ns = self.requested_ns.saturating_add(o.requested_ns);
        self.actual_ns = self.actual_ns.saturating_add(o.actual_ns);
        self.cpu_ns = self.cpu_ns.saturating_add(o.cpu_ns);
        self.oversleep_ns = self.oversleep_ns.saturating_add(o.oversleep_ns);
        add_buckets(
            &mut self.oversleep_buckets,
            &Log2Histogram::from_buckets(&o.oversleep_buckets),
        );
    }
}

impl SleepTotals {
    /// Since the probe was created.
    pub fn from_stats(s: &SleepStats) -> Self {
        SleepTotals {
            calls: s.total_calls,
            requested_ns: s.total_requested_ns,
            actual_ns: s.total_actual_ns,
            cpu_ns: s.total_cpu_ns,
            oversleep_ns: s.total_oversleep_ns,
            oversleep_buckets: s.oversleep_histogram.buckets.clone(),
        }
    }

    /// Over one interval (sums from the interval's integer means: low by
    /// less than 1 ns a call).
    pub fn from_interval(s: &SleepInterval) -> Self {
        SleepTotals {
            calls: s.calls,
            requested_ns: s.mean_requested_ns.saturating_mul(s.calls),
            actual_ns: s.mean_actual_ns.saturating_mul(s.calls),
            cpu_ns: s.cpu_ns,
            oversleep_ns: s.mean_oversleep_ns.saturating_mul(s.calls),
            oversleep_buckets: s.oversleep_histogram.buckets.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread interval of 2 s with the eBPF view, from its JSON form
    /// (the core's structs are non-exhaustive).
    fn interval_with_kernel() -> ThreadInterval {
        serde_json::from_value(serde_json::json!({
            "tid": 7, "serial": 1, "name": "loop", "started_in_interval": false,
            "cpu_time_ns": 1_000_000, "cpu_percent": 0.05,
            "switches": 30, "switches_per_sec": 15.0,
            "voluntary_switches": null, "voluntary_switches_per_sec": null,
            "involuntary_switches": null, "involuntary_switches_per_sec": null,
            "run_queue_wait_ns": 0, "run_queue_wait_percent": 0.0,
            "kernel": {
                "on_cpu_percent": 0.05,
                "voluntary_switches_per_sec": 12.5,
                "involuntary_switches_per_sec": 2.5,
                "off_cpu": {"sleep_ns": 1, "lock_ns": 2, "poll_ns": 3, "io_ns": 4,
                            "preempted_ns": 5, "other_ns": 6},
                "blocked_percent": 90.0,
                "wakes_per_sec": 14.0,
                "interrupt_wakes_per_sec": 0.0,
                "process_thread_wakes_per_sec": 0.0,
                "other_process_wakes_per_sec": 0.0,
                "poll_calls_per_sec": 1000.0,
                "blocking_polls_per_sec": 10.0,
                "idle_nonblocking_polls_per_sec": 985.5,
                "idle_poll_ratio": 0.99,
                "zero_timeout_poll_ratio": 0.99,
                "sleeps_per_sec": 3.0,
                "interrupted_sleeps_per_sec": 0.5,
                "mean_sleep_requested_ns": 0,
                "unknown_request_sleeps": 0,
                "mean_sleep_actual_ns": 0,
                "calls_by_syscall": [],
                "top_wakers": []
            }
        }))
        .expect("a thread interval")
    }

    #[test]
    fn kernel_rates_become_counts_over_the_interval() {
        let t = ThreadTotals::from_interval(&interval_with_kernel(), 2_000_000_000);
        let names: Vec<&str> = KERNEL_COUNTS.iter().map(|(n, _, _)| *n).collect();
        let counts: Vec<(&str, u64)> = names.into_iter().zip(t.kernel).collect();
        assert_eq!(
            counts,
            [
                ("voluntary_switches", 25),
                ("involuntary_switches", 5),
                ("poll_calls", 2000),
                ("blocking_polls", 20),
                ("idle_nonblocking_polls", 1971),
                ("sleep_syscalls", 6),
                ("interrupted_sleeps", 1),
            ]
        );
        assert_eq!(t.wakes, 28);
        assert_eq!(t.off_cpu_ns, [1, 2, 3, 4, 5, 6]);
        let mut sum = t.clone();
        sum.add(&t);
        assert_eq!(sum.kernel[2], 4000);
    }
}
