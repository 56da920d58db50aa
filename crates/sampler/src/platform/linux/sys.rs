//! Every syscall of the Linux backend, behind [`Sys`] so the backend's logic
//! (tracking, TID reuse, fallbacks) is unit-tested with a fake.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::parse;
use crate::error::{Error, Result};
use crate::model::Target;
use crate::platform::clock;

/// A per-thread file of `/proc/<pid>/task/<tid>/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskFile {
    /// `schedstat`: run ns, run-queue wait ns, switches.
    Schedstat,
    /// `stat`: utime + stime ticks (kernels without schedstat).
    Stat,
    /// `status`: name and voluntary/involuntary switch counts.
    Status,
}

impl TaskFile {
    /// The file's name in the task directory.
    pub(crate) fn name(self) -> &'static str {
        match self {
            TaskFile::Schedstat => "schedstat",
            TaskFile::Stat => "stat",
            TaskFile::Status => "status",
        }
    }
}

/// The syscalls the Linux backend makes. Paths are relative to the target's
/// `/proc/<pid>` directory, e.g. `statm`.
pub(crate) trait Sys: Send {
    /// A kept-open file.
    type File: Send;
    /// Opens a file under the target's proc directory, read-only. Allocates;
    /// used when the backend is built.
    fn open(&mut self, rel: &str) -> io::Result<Self::File>;
    /// Opens one thread's file, read-only, without allocating (it runs on
    /// the sampling path for threads read by open-read-close).
    fn open_task(&mut self, tid: u32, file: TaskFile) -> io::Result<Self::File>;
    /// The descriptor number of `file` (open(2) returns the lowest free
    /// number, so every number below it was in use when it was opened).
    fn descriptor_number(&self, file: &Self::File) -> u64;
    /// The descriptor budget this backend shares with the other samplers of
    /// the process (see `DescriptorPool`).
    fn descriptor_pool(&self) -> std::sync::Arc<super::DescriptorPool>;
    /// Descriptors this `Sys` itself keeps open while it lives (the task
    /// directory), counted against the shared budget.
    fn fixed_descriptors(&self) -> u64;
    /// The calling process's soft `RLIMIT_NOFILE` (descriptor numbers must be
    /// below it); `None` when unlimited or unreadable.
    fn nofile_limit(&mut self) -> Option<u64>;
    /// Reads the file from offset 0 into `buf`; returns the byte count.
    fn pread(&mut self, file: &Self::File, buf: &mut [u8]) -> io::Result<usize>;
    /// Lists the target's thread ids into `out` (cleared first).
    fn list_tasks(&mut self, out: &mut Vec<u32>) -> io::Result<()>;
    /// The target's thread count without reading a file: the kernel adds
    /// it to the link count of the task directory. `None` when unknown.
    fn task_count(&mut self) -> Option<u64>;
    /// CPU time of one of the *calling* process's threads, from its CPU
    /// clock, in ns. `None` when the thread no longer exists.
    fn thread_cpu_ns(&mut self, tid: u32) -> Option<u64>;
    /// CPU time of the whole target process in ns (its process CPU clock).
    fn process_cpu_ns(&mut self) -> Option<u64>;
    /// Whether the target still exists (checked when reads fail).
    fn target_alive(&mut self) -> bool;
    /// Page size in bytes.
    fn page_size(&self) -> u64;
    /// Clock ticks per second (`CLK_TCK`).
    fn ticks_per_sec(&self) -> u64;
    /// The target's PID.
    fn pid(&self) -> u32;
    /// The printable base path, for error messages (`/proc/self`, `/proc/42`).
    fn base(&self) -> &str;
}

/// The real `/proc` + `clock_gettime` implementation.
pub(crate) struct LinuxSys {
    base: String,
    pid: u32,
    task_dir: OwnedFd,
    dirent_buf: Box<[u8]>,
    process_clock: libc::clockid_t,
    page_size: u64,
    ticks_per_sec: u64,
}

fn last_os_error() -> io::Error {
    io::Error::last_os_error()
}

/// Opens `path` read-only with close-on-exec.
fn open_path(path: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | flags) };
    if fd < 0 {
        return Err(last_os_error());
    }
    // SAFETY: `fd` was just returned by open(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Longest `<tid>/<file>` path plus its NUL: 10 digits, '/', 9 bytes, NUL.
const TASK_PATH_MAX: usize = 32;

/// Writes `<tid>/<file>\0` into `out`; `None` if it does not fit.
fn task_path<'a>(tid: u32, file: &str, out: &'a mut [u8; TASK_PATH_MAX]) -> Option<&'a CStr> {
    let mut digits = [0u8; 10];
    let mut start = digits.len();
    let mut n = tid;
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let digits = &digits[start..];
    let len = digits.len() + 1 + file.len() + 1;
    let path = out.get_mut(..len)?;
    let (head, rest) = path.split_at_mut(digits.len());
    head.copy_from_slice(digits);
    let (slash, rest) = rest.split_first_mut()?;
    *slash = b'/';
    let (name, nul) = rest.split_at_mut(file.len());
    name.copy_from_slice(file.as_bytes());
    *nul.first_mut()? = 0;
    CStr::from_bytes_with_nul(path).ok()
}

impl LinuxSys {
    /// Opens the target's task directory and process clock.
    ///
    /// # Errors
    /// [`Error::NoSuchProcess`] for a PID that does not exist,
    /// [`Error::Unreadable`] when `/proc` is missing or unreadable.
    pub(crate) fn open(target: Target) -> Result<Self> {
        let (base, pid) = match target {
            Target::SelfProcess => ("/proc/self".to_string(), std::process::id()),
            Target::Pid(pid) => (format!("/proc/{pid}"), pid),
        };
        let task_path = format!("{base}/task");
        let task_dir = match open_path(&task_path, libc::O_DIRECTORY) {
            Ok(fd) => fd,
            Err(e)
                if matches!(target, Target::Pid(_)) && e.raw_os_error() == Some(libc::ENOENT) =>
            {
                if std::path::Path::new("/proc/self").exists() {
                    return Err(Error::NoSuchProcess { pid });
                }
                return Err(Error::Unreadable {
                    path: task_path,
                    source: e,
                });
            }
            Err(e) => return Err(Error::from_open(task_path, e)),
        };
        let process_clock = match target {
            Target::SelfProcess => libc::CLOCK_PROCESS_CPUTIME_ID,
            Target::Pid(pid) => {
                let mut id: libc::clockid_t = 0;
                // SAFETY: `id` is a valid out-pointer; the pid is a plain integer.
                let rc = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut id) };
                if rc != 0 {
                    return Err(Error::NoSuchProcess { pid });
                }
                id
            }
        };
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Ok(LinuxSys {
            base,
            pid,
            task_dir,
            dirent_buf: vec![0u8; 16 * 1024].into_boxed_slice(),
            process_clock,
            page_size: if page > 0 { page as u64 } else { 4096 },
            ticks_per_sec: crate::platform::system::clock_ticks_per_sec(),
        })
    }
}

impl Sys for LinuxSys {
    type File = OwnedFd;

    fn open(&mut self, rel: &str) -> io::Result<OwnedFd> {
        let mut path = String::with_capacity(self.base.len() + 1 + rel.len());
        path.push_str(&self.base);
        path.push('/');
        path.push_str(rel);
        open_path(&path, 0)
    }

    // Relative to the kept task directory: no allocation, and a shorter
    // path walk than `/proc/<pid>/task/<tid>/...`.
    fn open_task(&mut self, tid: u32, file: TaskFile) -> io::Result<OwnedFd> {
        let mut buf = [0u8; TASK_PATH_MAX];
        let path = task_path(tid, file.name(), &mut buf)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `path` is NUL-terminated and outlives the call; the
        // directory fd is owned and open.
        let fd = unsafe {
            libc::openat(
                self.task_dir.as_raw_fd(),
                path.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(last_os_error());
        }
        // SAFETY: `fd` was just returned by openat(2) and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn descriptor_number(&self, file: &OwnedFd) -> u64 {
        u64::try_from(file.as_raw_fd()).unwrap_or(0)
    }

    fn descriptor_pool(&self) -> std::sync::Arc<super::DescriptorPool> {
        super::DescriptorPool::process()
    }

    fn fixed_descriptors(&self) -> u64 {
        1
    }

    fn nofile_limit(&mut self) -> Option<u64> {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `r` is a valid out-pointer for the duration of the call.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
            return None;
        }
        if r.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        // rlim_t is 32-bit on some targets
        Some(u64::from(r.rlim_cur))
    }

    fn pread(&mut self, file: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the fd is owned and open.
        let n = unsafe { libc::pread(file.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            Err(last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    // Hand-written rather than `std::fs::read_dir`: read_dir re-opens the
    // directory and allocates an entry (with an OsString name) per thread on
    // every sample; rewinding a kept fd and parsing getdents64 in a reused
    // buffer allocates nothing (cost per thread: BENCHMARKS.md, "Per-thread reads").
    fn list_tasks(&mut self, out: &mut Vec<u32>) -> io::Result<()> {
        out.clear();
        let fd = self.task_dir.as_raw_fd();
        // SAFETY: lseek on an owned directory fd has no memory-safety preconditions.
        if unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } < 0 {
            return Err(last_os_error());
        }
        loop {
            let buf = &mut self.dirent_buf;
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the
            // duration of the call; the kernel writes whole dirent64 records.
            let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
            if n < 0 {
                return Err(last_os_error());
            }
            if n == 0 {
                // An empty task directory means the process is gone.
                if out.is_empty() {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                return Ok(());
            }
            parse::dirent_tids(&buf[..n as usize], out);
        }
    }

    // `fstat` of the kept task directory: procfs reports 2 + the number of
    // threads as its link count (proc_task_getattr, since Linux 2.6.x), with
    // no text to format: a fraction of the process `status` read, warm or
    // after a 1 s gap (BENCHMARKS.md, "Per-thread reads" and "Cold samples:
    // where the time goes").
    fn task_count(&mut self) -> Option<u64> {
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid out-pointer; the directory fd is owned and open.
        if unsafe { libc::fstat(self.task_dir.as_raw_fd(), &mut st) } != 0 {
            return None;
        }
        #[allow(clippy::useless_conversion)] // nlink_t is 32-bit on some targets
        let links = u64::from(st.st_nlink);
        links.checked_sub(2).filter(|n| *n > 0)
    }

    fn thread_cpu_ns(&mut self, tid: u32) -> Option<u64> {
        clock::thread_cpu_ns(tid)
    }

    fn process_cpu_ns(&mut self) -> Option<u64> {
        clock::read_ns(self.process_clock)
    }

    fn target_alive(&mut self) -> bool {
        // SAFETY: signal 0 only checks existence and permission; no signal is sent.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, 0) };
        rc == 0 || last_os_error().raw_os_error() == Some(libc::EPERM)
    }

    fn page_size(&self) -> u64 {
        self.page_size
    }

    fn ticks_per_sec(&self) -> u64 {
        self.ticks_per_sec
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn base(&self) -> &str {
        &self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_paths() {
        let mut buf = [0u8; TASK_PATH_MAX];
        assert_eq!(
            task_path(1234, "schedstat", &mut buf).map(CStr::to_bytes),
            Some(&b"1234/schedstat"[..])
        );
        assert_eq!(
            task_path(0, "stat", &mut buf).map(CStr::to_bytes),
            Some(&b"0/stat"[..])
        );
        assert_eq!(
            task_path(u32::MAX, "schedstat", &mut buf).map(CStr::to_bytes),
            Some(&b"4294967295/schedstat"[..])
        );
        assert_eq!(
            task_path(1, "a-name-far-too-long-for-the-buffer", &mut buf),
            None
        );
    }
}
