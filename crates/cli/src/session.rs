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

/// What a watcher with the kernel source holds for each thread of its
/// target outside the history, in bytes: the intervals of a report and of
/// its findings' window (about 470 bytes each), the two kernel samples each
/// interval compares while it is computed (about 370 bytes each) and the
/// eBPF reader's copy of each entry. Measured: 2.1 KiB a thread at 20,000
/// threads (RELIABILITY.md, "eBPF watcher's memory").
pub const KERNEL_BYTES_PER_THREAD: u64 = 2048;

/// What one snapshot takes in the history with the kernel source, per
/// thread of the target, in bytes: its 48-byte row (in a buffer grown by
/// doubling) and its packed kernel record, with a tenth to spare.
/// Measured: 92 to 101 bytes at 20,000 parked threads (7 snapshots in
/// 12,841,511 bytes, 2 in 4,046,374).
pub const SNAPSHOT_BYTES_PER_THREAD: u64 = 112;

/// The history's byte budget for a target of `threads` threads, reported
/// on every `every`: the library's default without the kernel source;
/// with it, that default less [`KERNEL_BYTES_PER_THREAD`] a thread, so that
/// the watcher of 20,000 threads stays within 64 MiB, but never less than
/// the snapshots a report and its rate rules need (`every`, at least the
/// rules' 2 s, and one more: [`SNAPSHOT_BYTES_PER_THREAD`] a thread each)
/// nor less than 1 MiB. The history then holds fewer seconds: a rule whose
/// window is longer sees what it holds.
pub fn history_budget_bytes(threads: u64, every: Duration, kernel: bool) -> u64 {
    let default = wakemeter::config::DEFAULT_HISTORY_BUDGET_BYTES;
    if !kernel {
        return default;
    }
    let window = samples_in(every.max(Duration::from_secs(2))).saturating_add(1);
    let needed = window
        .saturating_mul(threads)
        .saturating_mul(SNAPSHOT_BYTES_PER_THREAD)
        .max(1024 * 1024);
    default
        .saturating_sub(threads.saturating_mul(KERNEL_BYTES_PER_THREAD))
        .max(needed)
        .clamp(
            wakemeter::config::MIN_HISTORY_BUDGET_BYTES,
            wakemeter::config::MAX_HISTORY_BUDGET_BYTES,
        )
}

/// The sampler of process `pid`, reporting every `every` with at most
/// `report_threads` threads listed per report, with the kernel source when
/// there is one (then with a history budget sized by the target's threads
/// now: [`history_budget_bytes`]).
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
        let threads = wakemeter_procfs::process::tids(pid).map_or(0, |t| t.len() as u64);
        builder = builder
            .with_history_budget_bytes(history_budget_bytes(threads, every, true))
            .with_kernel_source(src);
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
    fn the_history_budget_shrinks_with_threads_only_with_the_kernel_source() {
        let default = wakemeter::config::DEFAULT_HISTORY_BUDGET_BYTES;
        let s = Duration::from_secs;
        assert_eq!(history_budget_bytes(20_000, s(1), false), default);
        assert_eq!(history_budget_bytes(1, s(1), true), default - 2048);
        let small = history_budget_bytes(1_000, s(1), true);
        let large = history_budget_bytes(20_000, s(1), true);
        assert!(large < small && small < default, "{large} {small}");
        // Never below what a report needs: 3 snapshots at 1 s (the rules
        // look at 2 s at least), 6 at 5 s.
        assert_eq!(large, 3 * 20_000 * SNAPSHOT_BYTES_PER_THREAD);
        assert_eq!(
            history_budget_bytes(20_000, s(5), true),
            6 * 20_000 * SNAPSHOT_BYTES_PER_THREAD
        );
        assert_eq!(small, default - 1_000 * KERNEL_BYTES_PER_THREAD);
        let huge = history_budget_bytes(u64::MAX, s(3600), true);
        assert_eq!(huge, wakemeter::config::MAX_HISTORY_BUDGET_BYTES);
    }

    #[test]
    fn the_pid_reuse_error_is_recognized() {
        let e = wakemeter::Error::PidReused { pid: 42 }.to_string();
        assert!(pid_reused(&e), "{e}");
        let other = wakemeter::Error::NoSuchProcess { pid: 42 }.to_string();
        assert!(!pid_reused(&other), "{other}");
    }
}
