//! Computing an [`Interval`] from two snapshots (public or stored), with
//! one code path for both forms.

use std::borrow::Cow;
use std::collections::HashMap;

use super::{
    Interval, KernelThreadInterval, LoopInterval, ProcessInterval, SleepInterval, SyscallRate,
    ThreadInterval,
};
use crate::history::Stored;
use crate::kernel::{KernelSample, KernelThreadStats, OffCpuTime, Syscall};
use crate::model::{LoopStats, SleepStats, ThreadRow, present};
use crate::model::{Snapshot, ThreadSample};

/// The kernel view of one thread over `d` ns, from its stats at the two
/// ends; `run_queue_wait_ns` is the thread's run-queue wait over the same
/// interval from the scheduler's own accounting (`schedstat`), when read,
/// and `cpu_time_ns` its CPU time by that accounting.
fn kernel_interval(
    e: Option<&KernelThreadStats>,
    k: &KernelThreadStats,
    d: u64,
    run_queue_wait_ns: Option<u64>,
    cpu_time_ns: u64,
) -> KernelThreadInterval {
    let zero = KernelThreadStats::default();
    let e = e.unwrap_or(&zero);
    let sub = |a: u64, b: u64| a.saturating_sub(b);
    let calls = sub(k.poll.total_calls, e.poll.total_calls);
    let sleeps = sub(k.sleep.total_calls, e.sleep.total_calls);
    let (o, p) = (k.total_off_cpu.by_cause(), e.total_off_cpu.by_cause());
    let off_cpu = OffCpuTime::from_causes(std::array::from_fn(|c| sub(o[c], p[c])));
    // Blocked: off the CPU and not runnable. An off-CPU stretch runs from
    // switch-out to switch-in, so after a wake it also holds the wait for
    // a CPU; the scheduler's run-queue wait over the interval (after
    // preemptions and after wakes alike) is taken out, so that blocked,
    // CPU and run-queue wait add up to the interval (a ticker woken 100
    // times/s on a loaded machine was "blocked 98.6%" beside 45% run-queue
    // wait). Without that figure, only the preempted stretches are.
    //
    // The scheduler's accounting moves a sliver of each wait after a wake
    // from the run-queue wait to the run time: a wake that preempts (onto
    // an idle CPU, most of a timer loop's) asks the next schedule not to
    // update the run queue's clock (`rq_clock_skip_update`), so the woken
    // thread's run time starts, and its `run_delay` ends, at the wake, not
    // at the switch. That is the CPU time /proc has beyond the switch
    // tracepoints' (7.4 µs a switch on this VM's 1 ms timer loop: 1.6%
    // against 2.3% of a core). It is a wait for a CPU, not a block: taken
    // out of blocked too, so that /proc's CPU share, its run-queue wait
    // and blocked add up to the interval.
    let on_cpu_ns = sub(k.total_on_cpu_ns, e.total_on_cpu_ns);
    let blocked_ns = match run_queue_wait_ns {
        Some(wait) => off_cpu
            .total_ns()
            .saturating_sub(wait)
            .saturating_sub(cpu_time_ns.saturating_sub(on_cpu_ns)),
        None => off_cpu.total_ns().saturating_sub(off_cpu.preempted_ns),
    };
    let known_requests = sub(
        k.sleep.total_known_request_calls,
        e.sleep.total_known_request_calls,
    );
    let earlier_calls = |s: Syscall| {
        e.calls_by_syscall
            .iter()
            .find(|c| c.syscall == s)
            .map_or(0, |c| c.total_calls)
    };
    let calls_by_syscall = k
        .calls_by_syscall
        .iter()
        .filter_map(|c| {
            let n = sub(c.total_calls, earlier_calls(c.syscall));
            (n > 0).then(|| SyscallRate {
                syscall: c.syscall,
                calls_per_sec: per_sec(n, d),
            })
        })
        .collect();
    KernelThreadInterval {
        on_cpu_percent: percent(on_cpu_ns, d),
        voluntary_switches_per_sec: per_sec(
            sub(k.total_voluntary_switches, e.total_voluntary_switches),
            d,
        ),
        involuntary_switches_per_sec: per_sec(
            sub(k.total_involuntary_switches, e.total_involuntary_switches),
            d,
        ),
        off_cpu,
        blocked_percent: percent(blocked_ns, d),
        wakes_per_sec: per_sec(sub(k.total_wakes, e.total_wakes), d),
        interrupt_wakes_per_sec: per_sec(sub(k.total_interrupt_wakes, e.total_interrupt_wakes), d),
        process_thread_wakes_per_sec: per_sec(
            sub(k.total_process_thread_wakes, e.total_process_thread_wakes),
            d,
        ),
        other_process_wakes_per_sec: per_sec(
            sub(k.total_other_process_wakes, e.total_other_process_wakes),
            d,
        ),
        poll_calls_per_sec: per_sec(calls, d),
        blocking_polls_per_sec: per_sec(
            sub(k.poll.total_blocked_calls, e.poll.total_blocked_calls),
            d,
        ),
        idle_nonblocking_polls_per_sec: per_sec(
            sub(
                k.poll.total_idle_nonblocking_calls,
                e.poll.total_idle_nonblocking_calls,
            ),
            d,
        ),
        idle_poll_ratio: ratio(sub(k.poll.total_idle_calls, e.poll.total_idle_calls), calls),
        zero_timeout_poll_ratio: ratio(
            sub(
                k.poll.total_zero_timeout_calls,
                e.poll.total_zero_timeout_calls,
            ),
            calls,
        ),
        sleeps_per_sec: per_sec(sleeps, d),
        interrupted_sleeps_per_sec: per_sec(
            sub(
                k.sleep.total_interrupted_calls,
                e.sleep.total_interrupted_calls,
            ),
            d,
        ),
        mean_sleep_requested_ns: sub(k.sleep.total_requested_ns, e.sleep.total_requested_ns)
            .checked_div(known_requests)
            .unwrap_or(0),
        unknown_request_sleeps: sleeps.saturating_sub(known_requests),
        mean_sleep_actual_ns: sub(k.sleep.total_actual_ns, e.sleep.total_actual_ns)
            .checked_div(sleeps)
            .unwrap_or(0),
        top_wakers: k.top_wakers.clone(),
        calls_by_syscall,
        timed_futex_waits_per_sec: per_sec(
            sub(k.total_timed_futex_waits, e.total_timed_futex_waits),
            d,
        ),
        futex_timeouts_per_sec: per_sec(sub(k.total_futex_timeouts, e.total_futex_timeouts), d),
        ready_fds: k.ready_fds.clone(),
    }
}

/// Read access to one thread's cumulative counters, for both the public
/// [`ThreadSample`] and the stored row ([`ThreadRow`]), so intervals have one code path.
pub(crate) trait ThreadCounters {
    fn tid(&self) -> u64;
    fn serial(&self) -> u64;
    fn name(&self) -> &str;
    fn total_cpu_time_ns(&self) -> u64;
    fn total_run_queue_wait_ns(&self) -> Option<u64>;
    fn total_switches(&self) -> Option<u64>;
    fn total_voluntary_switches(&self) -> Option<u64>;
    fn total_involuntary_switches(&self) -> Option<u64>;
}

impl ThreadCounters for ThreadSample {
    fn tid(&self) -> u64 {
        self.tid
    }
    fn serial(&self) -> u64 {
        self.serial
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn total_cpu_time_ns(&self) -> u64 {
        self.total_cpu_time_ns
    }
    fn total_run_queue_wait_ns(&self) -> Option<u64> {
        self.total_run_queue_wait_ns
    }
    fn total_switches(&self) -> Option<u64> {
        self.total_switches
    }
    fn total_voluntary_switches(&self) -> Option<u64> {
        self.total_voluntary_switches
    }
    fn total_involuntary_switches(&self) -> Option<u64> {
        self.total_involuntary_switches
    }
}

impl ThreadCounters for ThreadRow {
    fn tid(&self) -> u64 {
        self.ident.tid
    }
    fn serial(&self) -> u64 {
        self.ident.serial
    }
    fn name(&self) -> &str {
        &self.ident.name
    }
    fn total_cpu_time_ns(&self) -> u64 {
        self.total_cpu_time_ns
    }
    fn total_run_queue_wait_ns(&self) -> Option<u64> {
        present(self.total_run_queue_wait_ns)
    }
    fn total_switches(&self) -> Option<u64> {
        present(self.total_switches)
    }
    fn total_voluntary_switches(&self) -> Option<u64> {
        present(self.total_voluntary_switches)
    }
    fn total_involuntary_switches(&self) -> Option<u64> {
        present(self.total_involuntary_switches)
    }
}

/// `count / seconds`, or 0 for an empty interval.
pub(crate) fn per_sec(count: u64, duration_ns: u64) -> f64 {
    if duration_ns == 0 {
        0.0
    } else {
        count as f64 * 1e9 / duration_ns as f64
    }
}

/// `part / duration` in percent, or 0 for an empty interval.
pub(crate) fn percent(part_ns: u64, duration_ns: u64) -> f64 {
    if duration_ns == 0 {
        0.0
    } else {
        part_ns as f64 * 100.0 / duration_ns as f64
    }
}

fn delta(later: Option<u64>, earlier: Option<u64>, started: bool) -> Option<u64> {
    match (later, earlier, started) {
        (Some(l), _, true) => Some(l),
        (Some(l), Some(e), false) => Some(l.saturating_sub(e)),
        _ => None,
    }
}

fn opt_per_sec(c: Option<u64>, d: u64) -> Option<f64> {
    c.map(|c| per_sec(c, d))
}

/// The process-level fields both snapshot forms share (borrowed from a
/// [`Snapshot`], unpacked from a stored one).
pub(crate) struct Ends<'a> {
    pub seq: u64,
    pub monotonic_ns: u64,
    pub process: &'a crate::model::ProcessSample,
    pub total_sampler_cpu_time_ns: u64,
    pub loops: Cow<'a, [LoopStats]>,
    pub sleeps: Cow<'a, [SleepStats]>,
    pub kernel: Option<Cow<'a, KernelSample>>,
}

impl<'a> From<&'a Stored> for Ends<'a> {
    fn from(s: &'a Stored) -> Self {
        let h = &s.header;
        Ends {
            seq: h.seq,
            monotonic_ns: h.monotonic_ns,
            process: &h.process,
            total_sampler_cpu_time_ns: h.total_sampler_cpu_time_ns,
            loops: Cow::Owned(s.loops()),
            sleeps: Cow::Owned(s.sleeps()),
            kernel: s.kernel_counters().map(Cow::Owned),
        }
    }
}

/// The probe and kernel counters of one stored snapshot, decoded as an
/// interval reads them ([`Stored::kernel_counters`]).
#[derive(Debug)]
struct Decoded {
    seq: u64,
    monotonic_ns: u64,
    loops: Vec<LoopStats>,
    sleeps: Vec<SleepStats>,
    kernel: Option<KernelSample>,
}

impl Decoded {
    fn of(s: &Stored) -> Decoded {
        Decoded {
            seq: s.header.seq,
            monotonic_ns: s.header.monotonic_ns,
            loops: s.loops(),
            sleeps: s.sleeps(),
            kernel: s.kernel_counters(),
        }
    }

    fn is(&self, s: &Stored) -> bool {
        (self.seq, self.monotonic_ns) == (s.header.seq, s.header.monotonic_ns)
    }
}

/// The ends of `s` decoded whole ([`Stored::kernel`]).
#[cfg(test)]
fn whole(s: &Stored) -> Ends<'_> {
    Ends {
        kernel: s.kernel().map(Cow::Owned),
        ..Ends::from(s)
    }
}

/// How many intervals' records a [`SharedEnd`] holds for reuse: a
/// report's interval and one rule window's, those of one diagnosis.
const SPARE_RECORDS: usize = 2;

/// The most threads an interval given back may hold records for (about
/// 460 bytes each, names apart): the records of larger intervals are
/// freed, so that a process of 20,000 threads is not watched with two
/// such intervals (18 MB) kept between reports.
const MAX_SPARE_THREADS: usize = 4096;

/// The decoded end of the intervals computed together (a report's and
/// its rules' windows, which all end at the newest snapshot): decoded
/// once for all of them instead of once per interval. Holds one decoded
/// snapshot, the last end asked for, so what it adds to a report's
/// memory is one decoded snapshot at most, and it is dropped with the
/// report's work. An eBPF watcher of 1,000 threads decoded the newest
/// snapshot's kernel counters two or three times per report.
#[derive(Debug, Default)]
pub(crate) struct SharedEnd {
    end: Option<Decoded>,
    /// Thread records of intervals no longer needed, written over by the
    /// next intervals computed with this (see [`SharedEnd::give_back`]).
    spare: Vec<Vec<ThreadInterval>>,
    /// Every end decoded whole at each interval, none kept: the tests'
    /// reference ([`SharedEnd::decoding_everything`]).
    #[cfg(test)]
    whole: bool,
}

impl SharedEnd {
    /// Decodes every end whole (kernel histograms and names included) at
    /// each interval and keeps none: what every interval did before
    /// [`SharedEnd`], for the tests that compare the two.
    #[cfg(test)]
    pub(crate) fn decoding_everything() -> SharedEnd {
        SharedEnd {
            end: None,
            spare: Vec::new(),
            whole: true,
        }
    }

    /// A [`SharedEnd`] whose intervals write into `spare`'s records.
    pub(crate) fn with_spare(spare: Vec<Vec<ThreadInterval>>) -> SharedEnd {
        SharedEnd {
            spare,
            ..SharedEnd::default()
        }
    }

    /// Gives the records of an interval no longer needed to the next
    /// interval computed with this: an interval's list of 1,000 threads
    /// (about 460 KiB) allocated anew was mapped, faulted in page by page
    /// and unmapped at every report. At most [`SPARE_RECORDS`] are held,
    /// each of at most [`MAX_SPARE_THREADS`] threads.
    pub(crate) fn give_back(&mut self, records: Vec<ThreadInterval>) {
        if self.spare.len() < SPARE_RECORDS
            && records.capacity() > 0
            && records.capacity() <= MAX_SPARE_THREADS
        {
            self.spare.push(records);
        }
    }

    /// The records given back, for a later [`SharedEnd::with_spare`].
    pub(crate) fn into_spare(self) -> Vec<Vec<ThreadInterval>> {
        self.spare
    }

    /// Records to write an interval into: the largest given back, or none.
    fn take_spare(&mut self) -> Vec<ThreadInterval> {
        let largest = (0..self.spare.len()).max_by_key(|&i| self.spare[i].capacity());
        largest.map_or_else(Vec::new, |i| self.spare.swap_remove(i))
    }

    /// The ends of an interval's start `from`, decoded now.
    fn start_ends<'a>(&self, from: &'a Stored) -> Ends<'a> {
        #[cfg(test)]
        if self.whole {
            return whole(from);
        }
        from.into()
    }

    /// The ends of `to`, decoded now unless it is the one held.
    fn ends<'a>(&'a mut self, to: &'a Stored) -> Ends<'a> {
        #[cfg(test)]
        if self.whole {
            return whole(to);
        }
        let held = match self.end.take() {
            Some(d) if d.is(to) => d,
            _ => Decoded::of(to),
        };
        let d = self.end.insert(held);
        let h = &to.header;
        Ends {
            seq: h.seq,
            monotonic_ns: h.monotonic_ns,
            process: &h.process,
            total_sampler_cpu_time_ns: h.total_sampler_cpu_time_ns,
            loops: Cow::Borrowed(&d.loops),
            sleeps: Cow::Borrowed(&d.sleeps),
            kernel: d.kernel.as_ref().map(Cow::Borrowed),
        }
    }
}

impl<'a> From<&'a Snapshot> for Ends<'a> {
    fn from(s: &'a Snapshot) -> Self {
        Ends {
            seq: s.seq,
            monotonic_ns: s.monotonic_ns,
            process: &s.process,
            total_sampler_cpu_time_ns: s.total_sampler_cpu_time_ns,
            loops: Cow::Borrowed(&s.loops),
            sleeps: Cow::Borrowed(&s.sleeps),
            kernel: s.kernel.as_ref().map(Cow::Borrowed),
        }
    }
}

/// Finds the threads of one snapshot by serial. Both ends of an interval
/// list their threads in the backend's order, which rarely changes between
/// snapshots, so the thread after the last one found is tried first; a
/// sorted index, built at the first miss, serves the rest. This replaces a
/// hash map of every thread, which cost more than the interval's arithmetic.
struct BySerial<'a, T> {
    threads: &'a [T],
    next: usize,
    sorted: Option<Vec<(u64, usize)>>,
}

impl<'a, T: ThreadCounters> BySerial<'a, T> {
    fn new(threads: &'a [T]) -> Self {
        BySerial {
            threads,
            next: 0,
            sorted: None,
        }
    }

    /// The thread with this serial (serials are unique in a snapshot).
    fn find(&mut self, serial: u64) -> Option<&'a T> {
        let threads = self.threads;
        if let Some(t) = threads.get(self.next)
            && t.serial() == serial
        {
            self.next += 1;
            return Some(t);
        }
        let sorted = self.sorted.get_or_insert_with(|| {
            let mut v: Vec<(u64, usize)> = threads
                .iter()
                .enumerate()
                .map(|(i, t)| (t.serial(), i))
                .collect();
            v.sort_unstable();
            v
        });
        let at = sorted.binary_search_by_key(&serial, |&(s, _)| s).ok()?;
        let i = sorted.get(at)?.1;
        self.next = i + 1;
        threads.get(i)
    }
}

/// The kernel counters of one snapshot by TID: when they are sorted by TID
/// (as stored snapshots keep them), the entry after the last one found is
/// tried first, then a binary search; else a map. An interval asks in the
/// order of the threads of `/proc`, mostly ascending too: the binary
/// searches of 1,000 threads at both ends, each through records of
/// ~400 bytes, were 3% of an eBPF watcher's CPU.
enum KernelByTid<'a> {
    Sorted(&'a [KernelThreadStats], std::cell::Cell<usize>),
    Map(HashMap<u64, &'a KernelThreadStats>),
}

impl<'a> KernelByTid<'a> {
    fn new(threads: &'a [KernelThreadStats]) -> Self {
        if threads.windows(2).all(|w| w[0].tid < w[1].tid) {
            KernelByTid::Sorted(threads, std::cell::Cell::new(0))
        } else {
            KernelByTid::Map(threads.iter().map(|k| (k.tid, k)).collect())
        }
    }

    fn get(&self, tid: u64) -> Option<&'a KernelThreadStats> {
        match self {
            KernelByTid::Sorted(s, next) => {
                let at = match s.get(next.get()) {
                    Some(k) if k.tid == tid => next.get(),
                    _ => s.binary_search_by_key(&tid, |k| k.tid).ok()?,
                };
                next.set(at + 1);
                s.get(at)
            }
            KernelByTid::Map(m) => m.get(&tid).copied(),
        }
    }
}

/// The outermost snapshots inside an interval that read the
/// voluntary/involuntary split, when its ends did not: the split rates
/// come from them.
pub(crate) struct Split<'a, T> {
    pub from_threads: &'a [T],
    pub to_threads: &'a [T],
    pub duration_ns: u64,
}

/// Computes an interval from the two ends and their threads; with `split`,
/// the voluntary/involuntary switch figures of the threads alive at its
/// end come from there.
pub(crate) fn compute<T: ThreadCounters>(
    from: Ends<'_>,
    from_threads: &[T],
    to: Ends<'_>,
    to_threads: &[T],
    split: Option<Split<'_, T>>,
) -> Interval {
    compute_reusing(from, from_threads, to, to_threads, split, Vec::new())
}

/// [`compute`], its thread records written into `spare`, the records of
/// an interval no longer needed, whose names keep their allocations.
fn compute_reusing<T: ThreadCounters>(
    from: Ends<'_>,
    from_threads: &[T],
    to: Ends<'_>,
    to_threads: &[T],
    split: Option<Split<'_, T>>,
    spare: Vec<ThreadInterval>,
) -> Interval {
    let d = to.monotonic_ns.saturating_sub(from.monotonic_ns);
    // Kernel counters are cumulative since the source attached: deltas need both ends.
    let kernel_ends = match (from.kernel.as_deref(), to.kernel.as_deref()) {
        (Some(a), Some(b)) => Some((KernelByTid::new(&a.threads), KernelByTid::new(&b.threads))),
        _ => None,
    };
    let mut earlier = BySerial::new(from_threads);
    let matched: Vec<Option<&T>> = to_threads
        .iter()
        .map(|t| earlier.find(t.serial()))
        .collect();
    // The order of the result (most CPU first, then by TID; ties keep the
    // snapshot's order), sorted as small keys rather than as whole records.
    let mut order: Vec<(u64, u64, usize)> = to_threads
        .iter()
        .zip(&matched)
        .enumerate()
        .map(|(i, (t, e))| {
            let cpu = delta(
                Some(t.total_cpu_time_ns()),
                e.map(|e| e.total_cpu_time_ns()),
                e.is_none(),
            )
            .unwrap_or(0);
            (cpu, t.tid(), i)
        })
        .collect();
    order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let split_rates = split.map(|s| split_rates(&s, to_threads));
    // A spare interval's records and names are written over rather than
    // freed and allocated again: freeing an interval kept for a second
    // (its records and names no longer in cache) cost more than computing
    // one (66 us at 257 threads).
    let mut threads = spare;
    let mut names: Vec<String> = threads.drain(..).map(|t| t.name).collect();
    // Sized up front: `filter_map` promises no length, so collecting grew
    // the vector by doubling, and copying the large records on every
    // growth was a quarter of an interval's instructions (callgrind).
    threads.reserve(order.len());
    threads.extend(order.iter().filter_map(|&(cpu, _, i)| {
        let t = to_threads.get(i)?;
        let e = matched.get(i).copied().flatten();
        let started = e.is_none();
        // The change of one optional counter over the interval.
        let change =
            |counter: fn(&T) -> Option<u64>| delta(counter(t), e.and_then(counter), started);
        let slices = change(T::total_switches);
        let (vol, vol_rate, invol, invol_rate) = match split_rates
            .as_ref()
            .and_then(|r| r.get(i).copied().flatten())
        {
            Some(s) => s,
            None => {
                let vol = change(T::total_voluntary_switches);
                let invol = change(T::total_involuntary_switches);
                (vol, opt_per_sec(vol, d), invol, opt_per_sec(invol, d))
            }
        };
        let wait = change(T::total_run_queue_wait_ns);
        Some(ThreadInterval {
            tid: t.tid(),
            serial: t.serial(),
            name: match names.pop() {
                Some(mut name) => {
                    name.clear();
                    name.push_str(t.name());
                    name
                }
                None => t.name().to_string(),
            },
            started_in_interval: started,
            cpu_time_ns: cpu,
            cpu_percent: percent(cpu, d),
            switches: slices,
            switches_per_sec: opt_per_sec(slices, d),
            voluntary_switches: vol,
            voluntary_switches_per_sec: vol_rate,
            involuntary_switches: invol,
            involuntary_switches_per_sec: invol_rate,
            run_queue_wait_ns: wait,
            // The kernel adds a wait to `run_delay` when it ends (the thread
            // gets a CPU), so a wait begun before the interval is counted in
            // it whole: under overload the delta exceeds the interval. A
            // share above 100% means nothing; the nanoseconds stay raw.
            run_queue_wait_percent: wait.map(|w| percent(w, d).min(100.0)),
            kernel: kernel_ends.as_ref().and_then(|(a, b)| {
                let now = b.get(t.tid())?;
                Some(kernel_interval(a.get(t.tid()), now, d, wait, cpu))
            }),
        })
    }));
    // Serials are unique in a snapshot: the earlier threads not matched
    // are the ones that exited.
    let threads_exited = from_threads.len() - matched.iter().flatten().count();
    let (pf, pt) = (from.process, to.process);
    let cpu = pt.total_cpu_time_ns.saturating_sub(pf.total_cpu_time_ns);
    let wake_rate = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(per_sec(b.saturating_sub(a), d)),
        _ => None,
    };
    let sampler = to
        .total_sampler_cpu_time_ns
        .saturating_sub(from.total_sampler_cpu_time_ns);
    Interval {
        from_seq: from.seq,
        to_seq: to.seq,
        end_monotonic_ns: to.monotonic_ns,
        duration_ns: d,
        process: ProcessInterval {
            pid: pt.pid,
            cpu_time_ns: cpu,
            cpu_percent: percent(cpu, d),
            rss_bytes: pt.rss_bytes,
            rss_change_bytes: i64::try_from(i128::from(pt.rss_bytes) - i128::from(pf.rss_bytes))
                .unwrap_or(if pt.rss_bytes > pf.rss_bytes {
                    i64::MAX
                } else {
                    i64::MIN
                }),
            peak_rss_bytes: pt.peak_rss_bytes,
            thread_count: pt.thread_count,
            interrupt_wakeups_per_sec: wake_rate(
                pf.total_interrupt_wakeups,
                pt.total_interrupt_wakeups,
            ),
            platform_idle_wakeups_per_sec: wake_rate(
                pf.total_platform_idle_wakeups,
                pt.total_platform_idle_wakeups,
            ),
        },
        threads,
        threads_exited: u32::try_from(threads_exited).unwrap_or(u32::MAX),
        kernel_thread_exits: match (from.kernel.as_deref(), to.kernel.as_deref()) {
            (Some(a), Some(b)) => Some(b.total_thread_exits.saturating_sub(a.total_thread_exits)),
            _ => None,
        },
        kernel_uncovered_threads: kernel_ends.as_ref().map(|(_, b)| {
            let n = to_threads
                .iter()
                .filter(|t| b.get(t.tid()).is_none())
                .count();
            u32::try_from(n).unwrap_or(u32::MAX)
        }),
        loops: to
            .loops
            .iter()
            .map(|l| loop_interval(from.loops.iter().find(|e| e.id == l.id), l, d))
            .collect(),
        sleeps: to
            .sleeps
            .iter()
            .map(|l| sleep_interval(from.sleeps.iter().find(|e| e.id == l.id), l, d))
            .collect(),
        sampler_cpu_time_ns: sampler,
        sampler_cpu_percent: percent(sampler, d),
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn loop_interval(e: Option<&LoopStats>, l: &LoopStats, d: u64) -> LoopInterval {
    let z = LoopStats::default();
    let e = e.unwrap_or(&z);
    let wakeups = l.total_wakeups.saturating_sub(e.total_wakeups);
    let idle = l.total_idle_wakeups.saturating_sub(e.total_idle_wakeups);
    let timed_out = l
        .total_timed_out_wakeups
        .saturating_sub(e.total_timed_out_wakeups);
    let zero = l
        .total_zero_timeout_waits
        .saturating_sub(e.total_zero_timeout_waits);
    let events = l.total_events.saturating_sub(e.total_events);
    let wait = l.total_wait_ns.saturating_sub(e.total_wait_ns);
    let busy = l.total_busy_ns.saturating_sub(e.total_busy_ns);
    let delay = l.total_poll_delay_ns.saturating_sub(e.total_poll_delay_ns);
    let hist = l.poll_delay_histogram.since(&e.poll_delay_histogram);
    LoopInterval {
        id: l.id,
        name: l.name.clone(),
        kind: l.kind,
        tid: l.tid,
        wakeups,
        wakeups_per_sec: per_sec(wakeups, d),
        idle_wakeups: idle,
        idle_wakeup_ratio: ratio(idle, wakeups),
        timed_out_wakeups: timed_out,
        early_wakeups: l.total_early_wakeups.saturating_sub(e.total_early_wakeups),
        zero_timeout_waits: zero,
        zero_timeout_ratio: ratio(zero, wakeups),
        events,
        events_per_wakeup: ratio(events, wakeups),
        wait_ns: wait,
        busy_ns: busy,
        utilization: ratio(busy, busy.saturating_add(wait)),
        mean_poll_delay_ns: delay.checked_div(timed_out).unwrap_or(0),
        p99_poll_delay_ns: hist.quantile_lower_bound(0.99),
        poll_delay_histogram: hist,
        current_wait_ns: l.current_wait_ns,
    }
}

fn sleep_interval(e: Option<&SleepStats>, l: &SleepStats, d: u64) -> SleepInterval {
    let z = SleepStats::default();
    let e = e.unwrap_or(&z);
    let calls = l.total_calls.saturating_sub(e.total_calls);
    let requested = l.total_requested_ns.saturating_sub(e.total_requested_ns);
    let actual = l.total_actual_ns.saturating_sub(e.total_actual_ns);
    let over = l.total_oversleep_ns.saturating_sub(e.total_oversleep_ns);
    let cpu = l.total_cpu_ns.saturating_sub(e.total_cpu_ns);
    let hist = l.oversleep_histogram.since(&e.oversleep_histogram);
    SleepInterval {
        id: l.id,
        name: l.name.clone(),
        tid: l.tid,
        calls,
        sleeps_per_sec: per_sec(calls, d),
        mean_requested_ns: requested.checked_div(calls).unwrap_or(0),
        mean_actual_ns: actual.checked_div(calls).unwrap_or(0),
        mean_oversleep_ns: over.checked_div(calls).unwrap_or(0),
        cpu_ns: cpu,
        cpu_percent: percent(cpu, d),
        cpu_per_sleep_ns: cpu.checked_div(calls).unwrap_or(0),
        p99_oversleep_ns: hist.quantile_lower_bound(0.99),
        oversleep_histogram: hist,
    }
}

/// Split figures of one thread: voluntary switches and their rate,
/// involuntary switches and their rate.
type SplitFigures = (Option<u64>, Option<f64>, Option<u64>, Option<f64>);

/// The split figures over `split` of each of `threads` (by index), for
/// those alive at the split's end: what an interval between the split's
/// two snapshots would give them, without computing the rest of it.
fn split_rates<T: ThreadCounters>(
    split: &Split<'_, T>,
    threads: &[T],
) -> Vec<Option<SplitFigures>> {
    let d = split.duration_ns;
    let mut later = BySerial::new(split.to_threads);
    let mut earlier = BySerial::new(split.from_threads);
    threads
        .iter()
        .map(|t| {
            let b = later.find(t.serial())?;
            let a = earlier.find(t.serial());
            let started = a.is_none();
            let change =
                |counter: fn(&T) -> Option<u64>| delta(counter(b), a.and_then(counter), started);
            let vol = change(T::total_voluntary_switches);
            let invol = change(T::total_involuntary_switches);
            Some((vol, opt_per_sec(vol, d), invol, opt_per_sec(invol, d)))
        })
        .collect()
}

/// Interval between two stored snapshots (no materialization of threads).
pub(crate) fn between_stored(from: &Stored, to: &Stored) -> Interval {
    compute(from.into(), &from.threads, to.into(), &to.threads, None)
}

/// Interval between two stored snapshots of `history`; when an end did not
/// read the voluntary/involuntary split, the split rates come from the
/// outermost snapshots inside the interval that did.
pub(crate) fn between_in_history(
    history: &crate::history::History,
    from: &Stored,
    to: &Stored,
) -> Interval {
    between_in_history_reusing(history, from, to, Vec::new())
}

/// [`between_in_history`], the end `to` decoded once for every interval
/// computed with the same `shared` (see [`SharedEnd`]).
pub(crate) fn between_in_history_sharing(
    history: &crate::history::History,
    from: &Stored,
    to: &Stored,
    shared: &mut SharedEnd,
) -> Interval {
    let from_ends = shared.start_ends(from);
    let spare = shared.take_spare();
    between_in_history_with(history, from, from_ends, to, spare, shared.ends(to))
}

/// [`between_in_history_sharing`] without the kernel view: for a rule
/// that reads none (the CPU hog's, the wakeups budget's), whose window
/// starts at a snapshot no other window does. The start's kernel records
/// are not decoded and no thread gets a `kernel` interval (nor the
/// interval its kernel counts); every other figure is the same.
pub(crate) fn between_in_history_without_kernel(
    history: &crate::history::History,
    from: &Stored,
    to: &Stored,
    shared: &mut SharedEnd,
) -> Interval {
    #[cfg(test)]
    if shared.whole {
        return between_in_history_sharing(history, from, to, shared);
    }
    let h = &from.header;
    let from_ends = Ends {
        seq: h.seq,
        monotonic_ns: h.monotonic_ns,
        process: &h.process,
        total_sampler_cpu_time_ns: h.total_sampler_cpu_time_ns,
        loops: Cow::Owned(from.loops()),
        sleeps: Cow::Owned(from.sleeps()),
        kernel: None,
    };
    let spare = shared.take_spare();
    let mut to_ends = shared.ends(to);
    to_ends.kernel = None;
    between_in_history_with(history, from, from_ends, to, spare, to_ends)
}

/// [`between_in_history`], its thread records written into `spare`, the
/// records of an interval no longer needed.
pub(crate) fn between_in_history_reusing(
    history: &crate::history::History,
    from: &Stored,
    to: &Stored,
    spare: Vec<ThreadInterval>,
) -> Interval {
    between_in_history_with(history, from, from.into(), to, spare, to.into())
}

/// [`between_in_history`] with the ends decoded (`from_ends`, `to_ends`).
fn between_in_history_with(
    history: &crate::history::History,
    from: &Stored,
    from_ends: Ends<'_>,
    to: &Stored,
    spare: Vec<ThreadInterval>,
    to_ends: Ends<'_>,
) -> Interval {
    let split = if from.header.switch_split_read && to.header.switch_split_read {
        None
    } else {
        history
            .split_bounds(from.header.seq, to.header.seq)
            .map(|(a, b)| Split {
                from_threads: &a.threads,
                to_threads: &b.threads,
                duration_ns: b.header.monotonic_ns.saturating_sub(a.header.monotonic_ns),
            })
    };
    compute_reusing(from_ends, &from.threads, to_ends, &to.threads, split, spare)
}

#[cfg(test)]
#[path = "compute_tests.rs"]
mod tests;
