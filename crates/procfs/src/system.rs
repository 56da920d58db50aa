//! The machine-wide files: kernel BTF and build notes, tracefs, the
//! clocksource, the CPU list, perf and PID-namespace settings, boot time.

use std::io;
use std::path::{Path, PathBuf};

/// Where the kernel publishes its BTF (type information for CO-RE eBPF).
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The kernel's BTF path: [`KERNEL_BTF`].
pub fn kernel_btf() -> &'static Path {
    Path::new(KERNEL_BTF)
}

/// The running kernel's ELF notes (its GNU build id among them).
///
/// # Errors
/// The read's error (no sysfs, or a kernel without notes).
pub fn kernel_notes() -> io::Result<Vec<u8>> {
    std::fs::read("/sys/kernel/notes")
}

/// Where the kernel's tracing filesystem may be mounted, as aya looks for it.
pub const TRACEFS_DIRS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Whether a mounted tracefs has the tracepoint `group/name` (its
/// `events/<group>/<name>/id`).
pub fn tracepoint_exists(group: &str, name: &str) -> bool {
    TRACEFS_DIRS.iter().any(|dir| {
        Path::new(dir)
            .join("events")
            .join(group)
            .join(name)
            .join("id")
            .exists()
    })
}

/// The kernel's current clocksource (`tsc`, `kvm-clock`, `arch_sys_counter`).
///
/// # Errors
/// The read's error.
pub fn clocksource() -> io::Result<String> {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map(|s| s.trim().to_string())
}

/// The text of `/proc/cpuinfo`.
///
/// # Errors
/// The read's error.
pub fn cpuinfo() -> io::Result<String> {
    std::fs::read_to_string("/proc/cpuinfo")
}

/// `kernel.perf_event_paranoid`, as the kernel prints it (trimmed).
///
/// # Errors
/// The read's error.
pub fn perf_event_paranoid() -> io::Result<String> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").map(|s| s.trim().to_string())
}

/// The machine's load: `/proc/loadavg` parsed.
///
/// # Errors
/// The read's error, or `InvalidData` when the text does not parse.
pub fn loadavg() -> io::Result<crate::parse::LoadAvg> {
    let text = std::fs::read_to_string("/proc/loadavg")?;
    crate::parse::loadavg(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, text))
}

/// The CPUs online on the machine (`/sys/devices/system/cpu/online`), as a
/// CPU list text (`0-7`), trimmed.
///
/// # Errors
/// The read's error.
pub fn online_cpus() -> io::Result<String> {
    std::fs::read_to_string("/sys/devices/system/cpu/online").map(|s| s.trim().to_string())
}

/// The boot time in Unix seconds (`btime` of `/proc/stat`).
pub fn boot_time_secs() -> Option<u64> {
    std::fs::read("/proc/stat")
        .ok()
        .and_then(|s| crate::parse::boot_time_secs(&s))
}

/// The inode of the PID namespace `/proc` numbers processes in: that of its
/// process 1 (the first process of a namespace lives in it), or this
/// process's own when process 1 cannot be inspected; `None` when neither
/// link can be read.
pub fn proc_pid_namespace() -> Option<u64> {
    ["/proc/1/ns/pid", "/proc/self/ns/pid"]
        .iter()
        .find_map(|link| std::fs::read_link(link).ok())
        .and_then(|target| crate::parse::pid_namespace_inode(&target.to_string_lossy()))
}

/// The directory of process `pid` in `/proc`, for messages and for callers
/// that hand a path to a library (a symbolizer reading `map_files`).
pub fn proc_dir(pid: u32) -> PathBuf {
    crate::process::Process::Pid(pid).dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_files_read_where_present() {
        let boot = boot_time_secs().expect("btime");
        // SAFETY: time(NULL) has no preconditions.
        let now = u64::try_from(unsafe { libc::time(std::ptr::null_mut()) }).expect("time");
        assert!(boot > 0 && boot <= now, "{boot} vs {now}");
        assert!(cpuinfo().is_ok_and(|c| c.contains("processor")));
        assert!(perf_event_paranoid().is_ok_and(|p| p.parse::<i32>().is_ok()));
        assert!(proc_pid_namespace().is_some_and(|ino| ino > 0));
        let load = loadavg().expect("loadavg");
        // The reading thread itself is runnable.
        assert!(
            load.runnable >= 1 && load.tasks >= load.runnable,
            "{load:?}"
        );
        let online = online_cpus().expect("online CPUs");
        let n = crate::parse::cpu_list_len(&online).expect("a CPU list");
        // SAFETY: sysconf has no memory-safety preconditions.
        let conf = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        assert_eq!(i64::from(n), i64::from(conf as i32), "{online}");
    }
}
