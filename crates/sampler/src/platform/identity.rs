//! Who the target is: process id, name and start time, read once when a
//! sampler is built so a saved report says which process it measured (a
//! PID alone is reused by the OS; PID plus start time is not).

use super::Target;
use crate::model::TargetIdentity;

/// The identity of `target`, as far as this platform can tell; fields it
/// cannot read are left empty (`name` "" and `start_time_unix_ns` `None`),
/// never guessed.
pub(crate) fn identity(target: Target) -> TargetIdentity {
    let pid = match target {
        Target::Pid(pid) => pid,
        _ => std::process::id(),
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        linux_identity(pid)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        // Only this process can be sampled on the other platforms: its
        // name is its executable's file name. No start time is read there.
        let name = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        TargetIdentity {
            pid,
            name,
            start_time_unix_ns: None,
        }
    }
}

/// Linux: `comm`, and the start time from `stat` field 22 (clock ticks
/// after boot) plus `btime` of `/proc/stat` (boot time, Unix seconds):
/// exact to one clock tick (usually 10 ms).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn linux_identity(pid: u32) -> TargetIdentity {
    use wakemeter_procfs::{parse, process, system};
    let name = process::comm(process::Process::Pid(pid))
        .map(|raw| String::from_utf8_lossy(&raw).into_owned())
        .unwrap_or_default();
    // The first thread's `stat`: the process's own sums every thread's
    // CPU time in the kernel (3.5% of a 1,000-thread watcher's CPU, read
    // at each report).
    let start_ticks = process::leader_stat(pid)
        .ok()
        .and_then(|s| parse::stat_start_ticks(&s));
    // Read once: `btime` is derived from the clocks at each read of
    // `/proc/stat` and can move by a second, which would change a start
    // time read twice; one value keeps the identities of one process
    // comparable (and `/proc/stat` out of every report).
    static BOOT_TIME_SECS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    TargetIdentity {
        pid,
        name,
        start_time_unix_ns: start_unix_ns(
            start_ticks,
            *BOOT_TIME_SECS.get_or_init(system::boot_time_secs),
            super::system::clock_ticks_per_sec(),
        ),
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn start_unix_ns(ticks: Option<u64>, boot_secs: Option<u64>, hz: u64) -> Option<u64> {
    let (ticks, boot) = (ticks?, boot_secs?);
    if hz == 0 {
        return None;
    }
    let after_boot_ns = u128::from(ticks) * 1_000_000_000 / u128::from(hz);
    u64::try_from(u128::from(boot) * 1_000_000_000 + after_boot_ns).ok()
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_boot_time_plus_ticks() {
        assert_eq!(
            start_unix_ns(Some(250), Some(1_700_000_000), 100),
            Some(1_700_000_002_500_000_000)
        );
        assert_eq!(start_unix_ns(None, Some(1), 100), None);
        assert_eq!(start_unix_ns(Some(1), Some(1), 0), None);
    }

    #[test]
    fn this_process_has_a_name_and_started_before_now() {
        let id = identity(Target::SelfProcess);
        assert_eq!(id.pid, std::process::id());
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(id.name, comm.trim_end());
        let start = id.start_time_unix_ns.expect("start time on Linux");
        let now = crate::platform::clock::unix_ns();
        assert!(start <= now, "{start} > {now}");
        // The test binary started within the last hour, not at the epoch.
        assert!(now - start < 3_600_000_000_000, "{start} vs {now}");
    }

    #[test]
    fn a_missing_process_leaves_fields_empty() {
        let id = linux_identity(u32::MAX);
        assert_eq!(id.name, "");
        assert_eq!(id.start_time_unix_ns, None);
    }
}
