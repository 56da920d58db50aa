//! Which trigger calls for a capture now: the findings, the CPU
//! thresholds over their window, the cooldowns.

use super::*;

/// CPU use over the CPU window, as the thresholds read it.
#[derive(Debug, Default)]
pub(super) struct CpuUse {
    /// Process CPU, percent of one core.
    pub(super) process_percent: f64,
    /// (tid, name, CPU percent of one core) per thread.
    pub(super) threads: Vec<(u64, String, f64)>,
}

impl CpuUse {
    pub(super) fn of(i: &Interval) -> CpuUse {
        CpuUse {
            process_percent: i.process.cpu_percent,
            threads: i
                .threads
                .iter()
                .map(|t| (t.tid, t.name.clone(), t.cpu_percent))
                .collect(),
        }
    }
}

/// The first trigger that calls for a capture: findings first (most
/// severe first, as [`Sampler::findings`] orders them), then the busiest
/// thread over the thread threshold, then the process threshold. Skips
/// triggers captured within the repeat pause (`recent`), finding kinds
/// without a profile, and the profiler's own thread.
pub(super) fn choose(
    findings: Vec<Finding>,
    cpu: Option<&CpuUse>,
    config: &AutoProfilerBuilder,
    recent: &HashMap<TriggerKey, Instant>,
    own_tid: Option<u64>,
) -> Option<(Trigger, StackKind)> {
    let fresh = |t: &Trigger| !recent.contains_key(&t.key());
    for f in findings {
        let Some(&(_, stacks)) = config.findings.iter().find(|(k, _)| *k == f.kind) else {
            continue;
        };
        if f.subject.tid().is_some() && f.subject.tid() == own_tid {
            continue;
        }
        let t = Trigger::Finding(f);
        if fresh(&t) {
            return Some((t, stacks));
        }
    }
    let cpu = cpu?;
    if let Some(threshold) = config.thread_cpu_percent {
        let mut busiest: Vec<_> = cpu
            .threads
            .iter()
            .filter(|(tid, _, percent)| Some(*tid) != own_tid && *percent >= threshold)
            .collect();
        busiest.sort_by(|a, b| b.2.total_cmp(&a.2));
        for (tid, name, percent) in busiest {
            let t = Trigger::ThreadCpu {
                tid: *tid,
                name: name.clone(),
                percent: *percent,
                threshold_percent: threshold,
            };
            if fresh(&t) {
                return Some((t, StackKind::OnCpu));
            }
        }
    }
    if let Some(threshold) = config.process_cpu_percent {
        let t = Trigger::ProcessCpu {
            percent: cpu.process_percent,
            threshold_percent: threshold,
        };
        if cpu.process_percent >= threshold && fresh(&t) {
            return Some((t, StackKind::OnCpu));
        }
    }
    None
}

/// The shortest CPU interval believed: the thresholds' minimum window,
/// but never more than the CPU window itself.
pub(super) fn window_floor_ns(sampler: &Sampler, config: &AutoProfilerBuilder) -> u64 {
    let floor = sampler.thresholds().min_window.min(config.cpu_window);
    u64::try_from(floor.as_nanos()).unwrap_or(u64::MAX)
}
