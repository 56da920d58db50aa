//! Whole-file reads of one process's `/proc/<pid>` files, for the callers
//! off the sampling path (the CLI's target checks, the eBPF attach, the
//! profiler's symbolizer). Each call opens, reads and closes; the sampling
//! path keeps its descriptors instead ([`crate::task`]).

use std::fs::File;
use std::io;
use std::path::PathBuf;

/// Which process: the caller itself, or another by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// The calling process (`/proc/self`).
    Current,
    /// Process (or thread) `pid`.
    Pid(u32),
}

impl Process {
    /// The directory of the process in `/proc`.
    pub fn dir(self) -> PathBuf {
        match self {
            Process::Current => PathBuf::from("/proc/self"),
            Process::Pid(pid) => PathBuf::from(format!("/proc/{pid}")),
        }
    }

    fn file(self, name: &str) -> PathBuf {
        self.dir().join(name)
    }
}

/// The `status` text of `pid` (or of thread `pid`).
///
/// # Errors
/// The read's error: `NotFound` (`ENOENT`) or `ESRCH` when it is gone.
pub fn status(pid: u32) -> io::Result<Vec<u8>> {
    std::fs::read(Process::Pid(pid).file("status"))
}

/// Resets the peak resident set size of process `pid` (`VmHWM` in its
/// `status`) to its resident set size now: `5` written to its
/// `clear_refs` (Linux 4.0+; the caller must own the process or be root).
///
/// # Errors
/// The write's error: `NotFound` (`ENOENT`) or `ESRCH` when it is gone,
/// `EINVAL` before Linux 4.0, `EACCES`/`EPERM` without the right.
pub fn reset_peak_rss(pid: u32) -> io::Result<()> {
    use std::io::Write;
    // A kernel control file, opened to write as it is (never created nor
    // truncated): not an output, so not through `wakemeter_outfile`.
    std::fs::OpenOptions::new()
        .write(true)
        .open(Process::Pid(pid).file("clear_refs"))?
        .write_all(b"5")
}

/// The `status` text of the calling thread (`/proc/thread-self`: per-thread
/// fields such as `CapEff` are its own), or of the process where the kernel
/// has no `thread-self` (before 3.17).
///
/// # Errors
/// The read's error.
pub fn current_thread_status() -> io::Result<Vec<u8>> {
    std::fs::read("/proc/thread-self/status").or_else(|_| std::fs::read("/proc/self/status"))
}

/// The `stat` text of `pid`.
///
/// # Errors
/// The read's error: `NotFound` or `ESRCH` when it is gone.
pub fn stat(pid: u32) -> io::Result<Vec<u8>> {
    std::fs::read(Process::Pid(pid).file("stat"))
}

/// The `stat` file of process `pid`'s first thread (`task/PID/stat`): the
/// process's start time (field 22) and state without the sum of every
/// thread's CPU time that the process's own `stat` computes (in the
/// kernel, a walk of all its threads at each read).
///
/// # Errors
/// The read's error (`NotFound` once the process is gone).
pub fn leader_stat(pid: u32) -> io::Result<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/task/{pid}/stat"))
}

/// The `comm` of `process` (its name, at most 15 bytes), without the
/// trailing newline.
///
/// # Errors
/// The read's error.
pub fn comm(process: Process) -> io::Result<Vec<u8>> {
    let mut raw = std::fs::read(process.file("comm"))?;
    let len = crate::parse::comm(&raw).len();
    raw.truncate(len);
    Ok(raw)
}

/// The `cgroup` text of `pid` (one `id:controllers:path` line per
/// hierarchy; `0::/path` for cgroup v2).
///
/// # Errors
/// The read's error.
pub fn cgroup(pid: u32) -> io::Result<String> {
    std::fs::read_to_string(Process::Pid(pid).file("cgroup"))
}

/// The `cmdline` of `pid`, its words joined by spaces (lossy UTF-8).
///
/// # Errors
/// The read's error.
pub fn cmdline(pid: u32) -> io::Result<String> {
    std::fs::read(Process::Pid(pid).file("cmdline")).map(|raw| crate::parse::cmdline(&raw))
}

/// The `maps` text of `process`.
///
/// # Errors
/// The read's error.
pub fn maps(process: Process) -> io::Result<String> {
    std::fs::read_to_string(process.file("maps"))
}

/// The path of `pid`'s executable (the `exe` link's target).
///
/// # Errors
/// The read's error.
pub fn exe(pid: u32) -> io::Result<PathBuf> {
    std::fs::read_link(Process::Pid(pid).file("exe"))
}

/// The path through which `pid`'s mapping `start-end` can be opened as the
/// file it maps, even when replaced on disk or in another mount namespace
/// (`map_files`, readable with the privilege to trace the process).
pub fn map_file_path(pid: u32, start: u64, end: u64) -> PathBuf {
    Process::Pid(pid).file(&format!("map_files/{start:x}-{end:x}"))
}

/// Opens the file that `pid` maps at `start-end` ([`map_file_path`]), else
/// `path` as `pid` sees it (through its root directory).
///
/// # Errors
/// The error of the second open when both fail.
pub fn open_mapped_file(pid: u32, start: u64, end: u64, path: &str) -> io::Result<File> {
    File::open(map_file_path(pid, start, end))
        .or_else(|_| File::open(Process::Pid(pid).file(&format!("root{path}"))))
}

/// A file of one thread, `/proc/<pid>/task/<tid>/<name>` (`stat`,
/// `syscall`, `comm`).
///
/// # Errors
/// The read's error: `NotFound` or `ESRCH` when the thread is gone.
pub fn task_file(pid: u32, tid: u32, name: &str) -> io::Result<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/task/{tid}/{name}"))
}

/// The thread ids of `pid`, from its task directory, in directory order.
///
/// # Errors
/// The error of listing it (the process is gone, or `/proc` is another
/// PID namespace's).
pub fn tids(pid: u32) -> io::Result<Vec<u32>> {
    numbered_entries(&format!("/proc/{pid}/task"))
}

/// The ids of every process `/proc` lists.
///
/// # Errors
/// The error of listing `/proc`.
pub fn pids() -> io::Result<Vec<u32>> {
    numbered_entries("/proc")
}

fn numbered_entries(dir: &str) -> io::Result<Vec<u32>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .collect())
}

/// How many file descriptors the calling process has open now: the
/// entries of `/proc/self/fd` (`/dev/fd` where `/proc` is not mounted),
/// the listing's own descriptor included.
///
/// # Errors
/// The error of listing either directory.
pub fn open_fd_count() -> io::Result<u64> {
    let dir = std::fs::read_dir("/proc/self/fd").or_else(|_| std::fs::read_dir("/dev/fd"))?;
    Ok(dir.count() as u64)
}

/// The calling process's soft limit on open file descriptors
/// (`RLIMIT_NOFILE`), in descriptors; `None` when it cannot be read or is
/// unlimited. With [`open_fd_count`], what every descriptor budget of
/// wakemeter is sized from.
pub fn open_fd_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own and pass
    // by a pointer valid for the call; it has no other effect.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    // rlim_t is 32 bits wide on some targets.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Some(u64::from(r.rlim_cur))
}

/// The calling thread's id, from the `/proc/thread-self` link; `None`
/// where it cannot be read.
pub fn current_tid() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// The `fdinfo` text of each descriptor process `pid` (`None`: the
/// calling process) has open, in directory order; descriptors closed
/// while listing are left out, and a process gone gives none.
pub fn fdinfos(pid: Option<u32>) -> Vec<String> {
    let dir = match pid {
        Some(pid) => format!("/proc/{pid}/fdinfo"),
        None => "/proc/self/fdinfo".to_owned(),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|fd| std::fs::read_to_string(fd.path()).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptor_limit_is_the_one_the_kernel_lists() {
        // /proc/self/limits: "Max open files  <soft>  <hard>  files".
        let limits = std::fs::read_to_string("/proc/self/limits").expect("limits");
        let soft = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|rest| rest.split_whitespace().next())
            .expect("a Max open files line");
        let expected = match soft {
            "unlimited" => None,
            n => Some(n.parse::<u64>().expect("a number")),
        };
        assert_eq!(open_fd_limit(), expected);
        if let Some(limit) = expected {
            assert!(open_fd_count().expect("count") <= limit);
        }
    }

    #[test]
    fn this_process_as_its_files_say() {
        let me = std::process::id();
        let status = status(me).expect("status");
        assert_eq!(
            crate::parse::status_field(&status, b"Tgid"),
            Some(u64::from(me))
        );
        assert_eq!(comm(Process::Current).ok(), comm(Process::Pid(me)).ok());
        assert!(tids(me).expect("tids").contains(&me));
        assert!(pids().expect("pids").contains(&me));
        let tid = current_tid().expect("thread-self");
        // SAFETY: gettid has no preconditions.
        let gettid = unsafe { libc::syscall(libc::SYS_gettid) };
        assert_eq!(i64::from(tid), gettid);
        // The thread reading its own `stat` is running.
        let stat = task_file(me, tid, "stat").expect("task stat");
        assert_eq!(crate::parse::stat_state(&stat), Some(b'R'));
        let maps = maps(Process::Current).expect("maps");
        let exe = exe(me).expect("exe");
        let exe = exe.to_str().expect("utf-8 path");
        let text = crate::maps::lines(&maps)
            .find(|m| m.executable && m.path == exe)
            .expect("the test binary's code is mapped");
        assert!(open_mapped_file(me, text.start, text.end, text.path).is_ok());
        assert!(!cmdline(me).expect("cmdline").is_empty());
    }
}
