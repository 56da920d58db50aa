//! What `watch` and `top` share: resolving the target, the sampler they
//! build for it (interval, thresholds), and noticing when watching must end.
//!
//! Each command keeps its own loop (tables or JSON lines for `watch`, a
//! screen and keys for `top`); both wake on the sampler and both judge the
//! target's exit and the sampler's errors here, so the two agree on what
//! they measure, when a finding fires and when the target is gone.

use std::time::Duration;

use wakemeter::{KernelSource, Sampler, SamplerBuilder, Target, Thresholds};

use crate::print;
use crate::target::{self, Liveness, Resolved};

/// The sampling period: one snapshot a second. `watch --every` and
/// `top --every` are whole seconds, so every report and refresh ends
/// on a snapshot. Sampling faster would cost more without showing more
/// (at 1,000 threads, two samples a second cost 0.57–0.65% of a core
/// against 0.27% for one), and the target's exit is still noticed within
/// a second.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The voluntary/involuntary split of switches is read on every this many
/// snapshots (those whose sequence number is a multiple of it): an
/// interval shows the split when both its ends are such snapshots. Every
/// snapshot, as `record` does: a report over any whole number of seconds
/// shows the split.
pub const SWITCH_SPLIT_EVERY: u32 = 1;

/// How many snapshots the sampler stores in `span` (at least one).
pub fn samples_in(span: Duration) -> u64 {
    u64::try_from(span.as_millis() / SAMPLE_EVERY.as_millis().max(1))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Resolves what the user named (a thread id becomes its process, and
/// stderr says so). Before anything else, eBPF included: a missing or
/// zombie target is one clear error.
pub fn resolve(pid: u32) -> Result<Resolved, String> {
    let target = target::resolve(pid)?;
    if let Some(tid) = target.via_tid {
        print::note(&format!(
            "wakemeter: {tid} is a thread of process {} ({}); watching the whole process",
            target.pid, target.name
        ));
    }
    Ok(target)
}

/// The findings' thresholds for a report every `every`: the rate rules
/// look at the last `every` (at least 2 s). Every rule keeps its own
/// documented minimum window (a CPU hog needs 60 s of history, whatever
/// `every` is).
pub fn thresholds(every: Duration) -> Thresholds {
    Thresholds::default().with_window(every.max(Duration::from_secs(2)))
}

/// The sampler of process `pid`, reporting every `every` with at most
/// `report_threads` threads listed per report, with the kernel source when
/// there is one.
pub fn sampler(
    pid: u32,
    every: Duration,
    report_threads: u32,
    kernel: Option<Box<dyn KernelSource>>,
) -> wakemeter::Result<Sampler> {
    let mut builder = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_interval(SAMPLE_EVERY)
        .with_report_threads(report_threads)
        .with_switch_split_every(SWITCH_SPLIT_EVERY)
        .with_thresholds(thresholds(every));
    if let Some(src) = kernel {
        builder = builder.with_kernel_source(src);
    }
    builder.build()
}

/// Why watching stopped.
pub enum End {
    /// `--seconds` elapsed.
    Deadline,
    /// The target exited (reaped, or a zombie).
    TargetGone(Liveness),
    /// The sampler stopped on its own while the target still exists.
    SamplerStopped(String),
}

/// How the target went, in words after "exited".
pub fn how_gone(how: Liveness) -> &'static str {
    match how {
        Liveness::Zombie => "exited (a zombie until its parent reaps it)",
        _ => "exited",
    }
}

/// Whether watching must end now. A new non-fatal sampler error (one not
/// in `reported`) is handed to `new_error` once.
pub fn check(
    sampler: &Sampler,
    pid: u32,
    reported: &mut Option<String>,
    new_error: impl FnOnce(&str),
) -> Option<End> {
    let stats = sampler.stats();
    match target::liveness(pid) {
        Liveness::Alive => {}
        gone => return Some(End::TargetGone(gone)),
    }
    if !stats.running {
        // The sampler stops by itself only on a fatal error; the target
        // may have gone between the two reads above.
        return Some(match target::liveness(pid) {
            // The PID names another process now: ours exited (what was
            // measured stands, as for any exit).
            Liveness::Alive if stats.last_error.as_deref().is_some_and(pid_reused) => {
                End::TargetGone(Liveness::Gone)
            }
            Liveness::Alive => End::SamplerStopped(
                stats
                    .last_error
                    .unwrap_or_else(|| "no reason given".to_string()),
            ),
            gone => End::TargetGone(gone),
        });
    }
    if stats.last_error.is_some() && stats.last_error != *reported {
        if let Some(e) = &stats.last_error {
            new_error(e);
        }
        *reported = stats.last_error;
    }
    None
}

/// Whether a sampler's error says its process exited and its PID was
/// reused ([`wakemeter::Error::PidReused`], as the sampler's stats carry
/// it: text).
fn pid_reused(error: &str) -> bool {
    error.ends_with("(pid reused)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_reuse_error_is_recognized() {
        let e = wakemeter::Error::PidReused { pid: 42 }.to_string();
        assert!(pid_reused(&e), "{e}");
        let other = wakemeter::Error::NoSuchProcess { pid: 42 }.to_string();
        assert!(!pid_reused(&other), "{other}");
    }
}
