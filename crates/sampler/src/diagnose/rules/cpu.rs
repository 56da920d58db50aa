//! Findings on CPU: run-queue contention and CPU hogs.

use super::{Ctx, FindingKind, Grade, Severity, Subject, number};
use crate::interval::Interval;
use crate::model::SystemInfo;
use crate::platform::competition::Competition;

const RUN_QUEUE_OWN_ADVICE: &str = "The thread is runnable but not running, and this process alone has more \
runnable threads than the cores it may use: its own threads compete. Size thread pools to the cores the process \
may use (its CPU affinity, the container's quota: cgroup cpu.max), and replace spinning or yielding threads with \
blocking waits.";

const RUN_QUEUE_OUTSIDE_ADVICE: &str = "The thread is runnable but not running, while this process's threads \
together want fewer CPUs than there are cores: the competition comes from outside the process. Look at what else \
runs on the machine (the load average, top's busiest processes), whether a CPU quota throttles the process (the \
cgroup's cpu.stat: nr_throttled, throttled_usec; its cpu.max) or a CPU affinity confines it to fewer cores \
(taskset -p), and give it the cores it needs (a higher priority, its own cores, a larger quota) or move the \
competitors away.";

/// Who a thread's run-queue wait competes with, from the process's own
/// runnable demand (CPU plus run-queue wait, in threads) against the
/// cores: more than the cores, its own threads; fewer, something outside
/// it (other processes, a CPU quota or an affinity that leaves it fewer
/// cores).
fn competitors(runnable: f64, cpus: f64, cpu_count: u32) -> (String, &'static str) {
    if runnable >= cpus {
        (
            format!(
                "its own threads compete: this process has {runnable:.1} threads wanting a CPU on {cpu_count} cores"
            ),
            RUN_QUEUE_OWN_ADVICE,
        )
    } else {
        (
            format!(
                "the competition is outside this process: its threads want only {runnable:.1} CPUs of its \
                 {cpu_count} cores, so other processes, a CPU quota or an affinity to fewer cores take the rest"
            ),
            RUN_QUEUE_OUTSIDE_ADVICE,
        )
    }
}

const RUN_QUEUE_PROCESS_ADVICE: &str = "The process has more runnable threads than the machine has cores: each gets a \
little CPU and spends most of its runnable time waiting for one. Size thread pools to the CPU count (or the \
container's quota), replace spinning or yielding threads with blocking waits, and check other processes competing \
for the same cores.";

/// Process CPU beyond its listed threads' (in cores) below which the
/// difference is taken for rounding between the two clocks, not for
/// threads that were never listed.
const UNLISTED_MIN_CPUS: f64 = 0.02;

/// Run-queue contention: per thread for threads that use a noticeable
/// share of a core, and for the process as a whole when its runnable
/// demand (CPU plus run-queue wait, in threads) exceeds its CPUs and its
/// threads wait for one most of their runnable time — 256 threads at
/// 0.5% CPU each, each waiting almost all the time, are contention even
/// though none of them uses much.
pub(super) fn run_queue(cx: &mut Ctx<'_>, i: &Interval, system: &SystemInfo) {
    let t = cx.t;
    // In threads: CPU time and run-queue wait over the interval, of the
    // threads listed one by one.
    let (listed, waiting) = i.threads.iter().fold((0.0, 0.0), |(r, w), x| {
        (
            r + x.cpu_percent / 100.0,
            w + x.run_queue_wait_percent.unwrap_or(0.0) / 100.0,
        )
    });
    // Threads that start and end between two samples (a thread per
    // connection: Python's http.server used 0.70 of a core while its one
    // listed thread ran 0.15) are never listed, and a thread that starts
    // or ends within the interval is listed only between the samples
    // that saw it; the CPU time of both is in the process's: it counts,
    // and the demand is then a floor, since their run-queue wait is not
    // known.
    let unlisted = (i.process.cpu_percent / 100.0 - listed).max(0.0);
    let unlisted = if unlisted >= UNLISTED_MIN_CPUS {
        unlisted
    } else {
        0.0
    };
    let running = listed + unlisted;
    // Named in the evidence only when there are such threads.
    let unlisted_ev = (unlisted > 0.0).then(|| number("unlisted_threads_cpus", unlisted, "cpus"));
    let runnable = running + waiting;
    let cpus = f64::from(system.cpu_count.max(1));
    let (about, unlisted_text) = if unlisted > 0.0 {
        (
            "at least",
            format!(
                " ({unlisted:.2} cores' worth of CPU went to threads that started or ended between two \
                 samples, whose run-queue waits are not counted)"
            ),
        )
    } else {
        ("about", String::new())
    };
    let mut per_thread = false;
    for th in &i.threads {
        let Some(wait) = th.run_queue_wait_percent else {
            continue;
        };
        if wait < t.run_queue_wait_percent
            || th.cpu_percent < t.run_queue_min_cpu_percent
            || cx.explained.contains(&th.tid)
        {
            continue;
        }
        per_thread = true;
        let (who, advice) = competitors(runnable, cpus, system.cpu_count);
        let subject = Subject::Thread {
            tid: th.tid,
            name: th.name.clone(),
        };
        cx.push_graded(
            FindingKind::RunQueueContention,
            Grade { value: wait, base: Severity::Warning, steps: &[(t.run_queue_critical_wait_percent, Severity::Critical)] },
            subject,
            {
                let unlisted_text = unlisted_text.clone();
                move || {
                    format!(
                        "thread {} \"{}\" waited for a CPU {wait:.0}% of the time while running {:.0}%: \
                         {who} ({about} {runnable:.1} of this process's threads want a CPU){unlisted_text}",
                        th.tid, th.name, th.cpu_percent
                    )
                }
            },
            vec![
                number("run_queue_wait_percent", wait, "%"),
                number("thread_cpu_percent", th.cpu_percent, "%"),
                number("runnable_threads", runnable, "threads"),
                number("cpu_count", f64::from(system.cpu_count), "cpus"),
            ]
            .into_iter()
            .chain(unlisted_ev)
            .collect(),
            advice,
        );
    }
    if per_thread || runnable <= cpus || runnable <= 0.0 {
        return;
    }
    // Share of the process's runnable time spent waiting, in percent.
    let wait_share = waiting * 100.0 / runnable;
    if wait_share < t.run_queue_wait_percent {
        return;
    }
    let waiters = i
        .threads
        .iter()
        .filter(|x| {
            x.run_queue_wait_percent
                .is_some_and(|w| w >= t.run_queue_wait_percent)
        })
        .count();
    let subject = Subject::Process { pid: i.process.pid };
    cx.push_graded(
            FindingKind::RunQueueContention,
            Grade { value: wait_share, base: Severity::Warning, steps: &[(t.run_queue_critical_wait_percent, Severity::Critical)] },
            subject,
        move || format!(
            "the process's threads want {about} {runnable:.1} CPUs on {} cores: together they run {running:.2} cores' \
             worth and wait for a CPU {waiting:.1} threads' worth ({wait_share:.0}% of their runnable time){unlisted_text}; \
             {waiters} of its {} threads wait at least {:.0}% of the time, each using little CPU",
            system.cpu_count,
            i.threads.len(),
            t.run_queue_wait_percent
        ),
        vec![
            number("runnable_threads", runnable, "threads"),
            number("cpu_count", cpus, "cpus"),
            number("run_queue_wait_share_percent", wait_share, "%"),
            number("waiting_threads", waiters as f64, "threads"),
        ]
        .into_iter()
        .chain(unlisted_ev)
        .collect(),
        RUN_QUEUE_PROCESS_ADVICE,
    );
}

pub(super) fn cpu_hogs(cx: &mut Ctx<'_>, i: &Interval) {
    let t = cx.t;
    for th in &i.threads {
        if th.cpu_percent < t.cpu_hog_percent || cx.explained.contains(&th.tid) {
            continue;
        }
        let subject = Subject::Thread {
            tid: th.tid,
            name: th.name.clone(),
        };
        cx.push_graded(
            FindingKind::CpuHog,
            Grade { value: th.cpu_percent, base: Severity::Warning, steps: &[(t.cpu_hog_critical_percent, Severity::Critical)] },
            subject,
            move || format!(
                "thread {} \"{}\" used {:.0}% of a core for {:.0} s",
                th.tid,
                th.name,
                th.cpu_percent,
                i.duration_secs()
            ),
            vec![number("thread_cpu_percent", th.cpu_percent, "%"), number("window_s", i.duration_secs(), "s")],
            "A thread near a full core for a sustained time drains the battery; iOS kills background apps above 80% \
             CPU over 60 s. Profile it (perf, Instruments, Android Studio) and check for spinning, retries without \
             backoff or work that could be batched.",
        );
    }
}

const QUOTA_ADVICE: &str = "A CPU quota throttles the process: its cgroup may use only the CPUs its quota \
allows (cpu.max; a container's CPU limit), however idle the machine is. Raise the quota to what its threads want, \
or size its thread pools and work to the quota.";

const AFFINITY_ADVICE: &str = "Its CPU affinity confines it to fewer cores than the machine has, so it queues \
behind whatever else runs there: widen the affinity (taskset -p -c, the container's cpuset) or move the \
competitors off those cores.";

const OTHERS_ADVICE: &str = "Other processes take the cores it wants: move the busiest competitors named here \
elsewhere, lower their priority (nice, a cgroup cpu.weight), or give this process its own cores.";

/// Least CPU of another process, in percent of one core, for it to be
/// named as a cause of the contention (a process that used less takes
/// little from anyone).
const COMPETITOR_MIN_CPU_PERCENT: f64 = 10.0;

/// Says who competes in the run-queue contention findings whose
/// competition is outside the process (its threads want fewer CPUs than
/// the cores), from what the platform read when they were found: a CPU
/// quota that throttled it, an affinity narrower than the machine, other
/// processes (the load, the busiest three). The advice follows the causes
/// found, in that order; a finding keeps its advice when none is.
pub(crate) fn name_competitors(findings: &mut [super::Finding], c: &Competition) {
    let over = c.span_s.map_or_else(
        || "on average since each started".to_string(),
        |s| format!("over the last {s:.1} s"),
    );
    let mut causes: Vec<String> = Vec::new();
    let mut advice: Vec<&str> = Vec::new();
    let mut evidence = vec![
        super::ev("load_average_1m", c.load1, "tasks"),
        super::ev("machine_cpus", f64::from(c.machine_cpus), "cpus"),
    ];
    if let Some(q) = &c.quota {
        evidence.push(super::ev("quota_cpus", q.cpus, "cpus"));
        evidence.push(super::ev(
            "throttled_periods",
            q.throttled_periods as f64,
            "periods",
        ));
        evidence.push(super::ev("throttled_ms", q.throttled_ms, "ms"));
        if q.throttled_periods > 0 {
            let since = c.span_s.map_or_else(
                || "since its cgroup was created".to_string(),
                |s| format!("over the last {s:.1} s"),
            );
            causes.push(format!(
                "a CPU quota of {:.2} CPUs throttled it {} times ({:.0} ms held off a CPU) {since}",
                q.cpus, q.throttled_periods, q.throttled_ms
            ));
            advice.push(QUOTA_ADVICE);
        }
    }
    if let Some((n, list)) = &c.allowed {
        evidence.push(super::ev("allowed_cpus", f64::from(*n), "cpus"));
        causes.push(format!(
            "its CPU affinity allows {n} of the machine's {} CPUs ({list})",
            c.machine_cpus
        ));
        advice.push(AFFINITY_ADVICE);
    }
    let named: Vec<String> = c
        .top
        .iter()
        .filter(|x| x.cpu_percent >= COMPETITOR_MIN_CPU_PERCENT)
        .map(|x| format!("\"{}\" (pid {}) {:.0}%", x.name, x.pid, x.cpu_percent))
        .collect();
    if let Some(first) = c.top.first() {
        evidence.push(super::ev(
            "top_competitor_cpu_percent",
            first.cpu_percent,
            "%",
        ));
    }
    if !named.is_empty() {
        causes.push(format!(
            "other processes: load {:.1} on {} CPUs, the busiest {} (CPU of one core {over})",
            c.load1,
            c.machine_cpus,
            named.join(", ")
        ));
        advice.push(OTHERS_ADVICE);
    }
    if causes.is_empty() {
        return;
    }
    let who = causes.join("; ");
    let advice = advice.join(" ");
    for f in findings
        .iter_mut()
        .filter(|f| f.kind == FindingKind::RunQueueContention && competition_is_outside(f))
    {
        f.summary = format!("{}. Who competes: {who}", f.summary);
        f.evidence.extend(evidence.iter().cloned());
        f.advice.clone_from(&advice);
    }
}

/// Whether a run-queue contention finding found its process's threads
/// wanting fewer CPUs than the cores (the competition outside it).
pub(crate) fn competition_is_outside(f: &super::Finding) -> bool {
    f.kind == FindingKind::RunQueueContention
        && matches!(
            (f.evidence("runnable_threads"), f.evidence("cpu_count")),
            (Some(r), Some(n)) if r < n
        )
}
