//! Who a process competes with for CPU: the machine's load, the busiest
//! other processes, a CPU quota that throttles it, an affinity narrower
//! than the machine. Read only when a report found run-queue contention
//! (the sampler asks at most once per stored snapshot), and bounded: at
//! most [`MAX_PROCESSES`] processes' `stat` files, the names of the top
//! [`TOP`] only.

/// Processes whose `stat` a probe reads at most (one read each); beyond
/// it the rest of `/proc` is left out and the top is of those read.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) const MAX_PROCESSES: usize = 4096;

/// Competitors named.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) const TOP: usize = 3;

/// Another process's use of the CPU over the probe's span.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Competitor {
    /// Its process id.
    pub pid: u32,
    /// Its name (`comm`).
    pub name: String,
    /// CPU it used, in percent of one core.
    pub cpu_percent: f64,
}

/// A CPU quota over the process and its throttling over the probe's span.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Quota {
    /// The quota in CPUs (quota / period).
    pub cpus: f64,
    /// Periods the cgroup was throttled in over the span (since the cgroup
    /// was created on the first probe).
    pub throttled_periods: u64,
    /// Time held off a CPU by the quota over the span, in milliseconds.
    pub throttled_ms: f64,
}

/// What competes with a process for CPU, as one probe read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Competition {
    /// The 1-minute load average, in tasks.
    pub load1: f64,
    /// CPUs online on the machine.
    pub machine_cpus: u32,
    /// CPUs the process may run on, with their list, when fewer than the
    /// machine's.
    pub allowed: Option<(u32, String)>,
    /// The CPU quota that applies, if any.
    pub quota: Option<Quota>,
    /// The busiest other processes, busiest first (at most [`TOP`]); with
    /// a narrower affinity, of those last seen on the process's CPUs.
    pub top: Vec<Competitor>,
    /// The span the CPU figures cover, in seconds: since the previous probe;
    /// `None` on the first, whose figures are each process's average since
    /// it started (and the quota's counts since its cgroup was created).
    pub span_s: Option<f64>,
}

/// The previous probe's readings, which the next one differences against.
#[derive(Debug, Default)]
pub(crate) struct CompetitionProbe {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    last: Option<linux::Scan>,
}

impl CompetitionProbe {
    /// Reads what competes with process `pid` now; `None` where the
    /// platform does not say (macOS, iOS) or `/proc` cannot be read.
    pub(crate) fn probe(&mut self, pid: u32) -> Option<Competition> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            return linux::probe(&mut self.last, pid);
        }
        #[allow(unreachable_code)]
        {
            let _ = pid;
            None
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux {
    use std::collections::HashMap;

    use super::{Competition, Competitor, MAX_PROCESSES, Quota, TOP};
    use crate::platform::{clock, system::clock_ticks_per_sec};
    use wakemeter_procfs::{cgroup, parse, process, system};

    /// One probe's cumulative counters.
    #[derive(Debug)]
    pub(super) struct Scan {
        monotonic_ns: u64,
        /// CPU ticks (user + system) of each process read.
        ticks: HashMap<u32, u64>,
        /// The quota's cgroup and its (periods throttled, microseconds
        /// throttled).
        throttled: Option<(std::path::PathBuf, u64, u64)>,
    }

    pub(super) fn probe(last: &mut Option<Scan>, pid: u32) -> Option<Competition> {
        let load = system::loadavg().ok()?;
        let now_ns = clock::monotonic_ns();
        let tck = clock_ticks_per_sec() as f64;
        let previous = last.take();
        let span_s = previous
            .as_ref()
            .map(|p| now_ns.saturating_sub(p.monotonic_ns) as f64 / 1e9)
            .filter(|s| *s > 0.0);
        // Without a previous probe, each process's average since it
        // started: its age from its start ticks and the machine's uptime.
        let uptime_ticks = system::boot_time_secs().map(|boot| {
            let now_s = clock::unix_ns() as f64 / 1e9;
            (now_s - boot as f64) * tck
        });
        let machine_cpus = system::online_cpus()
            .ok()
            .and_then(|l| parse::cpu_list_len(&l))
            .unwrap_or(1);
        let allowed = process::status(pid).ok().and_then(|s| {
            let list = String::from_utf8_lossy(parse::status_line(&s, b"Cpus_allowed_list")?)
                .trim()
                .to_string();
            let n = parse::cpu_list_len(&list)?;
            (n < machine_cpus).then_some((n, list))
        });
        let mut ticks = HashMap::new();
        let mut ranked: Vec<(u32, f64)> = Vec::new();
        for other in process::pids().ok()?.into_iter().take(MAX_PROCESSES) {
            // The process itself competes with no one, and its `stat` is
            // the dearest file of the scan: the kernel walks every one of
            // its threads to sum their CPU time (1,000 for the target of
            // `scripts/sidecar-cost.sh`, at each report while contention
            // from outside is found).
            if other == pid {
                continue;
            }
            let Ok(stat) = process::stat(other) else {
                continue;
            };
            let Some(cpu) = parse::stat_cpu_ticks(&stat) else {
                continue;
            };
            ticks.insert(other, cpu);
            // Confined to fewer CPUs, it competes only with what runs on
            // them: processes last seen on another CPU are left out.
            let elsewhere = allowed.as_ref().is_some_and(|(_, list)| {
                parse::stat_last_cpu(&stat).is_some_and(|c| !parse::cpu_list_contains(list, c))
            });
            if elsewhere {
                continue;
            }
            let percent = match (&previous, span_s) {
                (Some(p), Some(span)) => p
                    .ticks
                    .get(&other)
                    .map(|before| cpu.saturating_sub(*before) as f64 / tck / span * 100.0),
                _ => uptime_ticks
                    .zip(parse::stat_start_ticks(&stat))
                    .and_then(|(up, start)| {
                        // Younger than a second: too little to average over
                        // (the boot time is known to the second).
                        let age = up - start as f64;
                        (age >= tck).then(|| cpu as f64 / age * 100.0)
                    }),
            };
            if let Some(p) = percent.filter(|p| *p > 0.0) {
                ranked.push((other, p));
            }
        }
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        let top = ranked
            .into_iter()
            .take(TOP)
            .map(|(other, cpu_percent)| Competitor {
                pid: other,
                name: process::comm(process::Process::Pid(other))
                    .map(|n| String::from_utf8_lossy(&n).into_owned())
                    .unwrap_or_default(),
                cpu_percent,
            })
            .collect();
        let q = cgroup::cpu_quota(pid);
        let quota = q.as_ref().map(|q| {
            let (periods, usec) = match &previous {
                Some(Scan {
                    throttled: Some((dir, p, u)),
                    ..
                }) if *dir == q.dir => (
                    q.nr_throttled.saturating_sub(*p),
                    q.throttled_usec.saturating_sub(*u),
                ),
                _ => (q.nr_throttled, q.throttled_usec),
            };
            Quota {
                cpus: q.quota_us as f64 / q.period_us as f64,
                throttled_periods: periods,
                throttled_ms: usec as f64 / 1000.0,
            }
        });
        *last = Some(Scan {
            monotonic_ns: now_ns,
            ticks,
            throttled: q.map(|q| (q.dir, q.nr_throttled, q.throttled_usec)),
        });
        Some(Competition {
            load1: load.load1,
            machine_cpus,
            allowed,
            quota,
            top,
            span_s,
        })
    }
}
