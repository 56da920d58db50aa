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
        linux_identity(pid, std::path::Path::new("/proc"))
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
fn linux_identity(pid: u32, proc_root: &std::path::Path) -> TargetIdentity {
    let dir = proc_root.join(pid.to_string());
    let name = std::fs::read_to_string(dir.join("comm"))
        .map(|s| s.trim_end_matches('\n').to_string())
        .unwrap_or_default();
    // Field 22 is `starttime`.
    let start_ticks = std::fs::read(dir.join("stat"))
        .ok()
        .and_then(|s| super::linux::parse::stat_field(&s, 22));
    let boot_secs = std::fs::read_to_string(proc_root.join("stat"))
        .ok()
        .and_then(|s| boot_time_secs(&s));
    TargetIdentity {
        pid,
        name,
        start_time_unix_ns: start_unix_ns(
            start_ticks,
            boot_secs,
            super::system::clock_ticks_per_sec(),
        ),
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn boot_time_secs(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
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
    fn start_time_counts_fields_after_the_last_parenthesis() {
        let stat =
            b"42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 12345 1000 200";
        let start_ticks = |s: &[u8]| crate::platform::linux::parse::stat_field(s, 22);
        assert_eq!(start_ticks(stat), Some(12345));
        assert_eq!(start_ticks(b"42 (truncated"), None);
        assert_eq!(start_ticks(b"42 (x) S 1"), None);
        assert_eq!(
            boot_time_secs("cpu 1 2\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
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
        let id = linux_identity(u32::MAX, std::path::Path::new("/nonexistent-proc"));
        assert_eq!(id.name, "");
        assert_eq!(id.start_time_unix_ns, None);
    }
}
