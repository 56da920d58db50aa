//! The sampling path's reads: a process's task directory kept open, each
//! thread's files opened relative to it without allocating, read with
//! `pread` into the caller's buffer, threads listed with `getdents64`.
//!
//! Hand-written rather than through `std::fs` or the procfs crate (see the
//! crate's documentation): a kept descriptor read with `pread` costs a
//! fraction of an open-read-close, and nothing here allocates once built.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::parse;

/// A per-thread file of `/proc/<pid>/task/<tid>/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskFile {
    /// `schedstat`: run ns, run-queue wait ns, times scheduled in.
    Schedstat,
    /// `stat`: utime + stime ticks (kernels without schedstat).
    Stat,
    /// `status`: name and voluntary/involuntary switch counts.
    Status,
}

impl TaskFile {
    /// The file's name in the task directory.
    pub fn name(self) -> &'static str {
        match self {
            TaskFile::Schedstat => "schedstat",
            TaskFile::Stat => "stat",
            TaskFile::Status => "status",
        }
    }
}

/// Whether `/proc` is mounted here at all (to tell "no such process" from
/// "no procfs").
pub fn proc_mounted() -> bool {
    std::path::Path::new("/proc/self").exists()
}

/// One process's `/proc/<pid>` (or `/proc/self`), its task directory kept
/// open, or closed between uses ([`ProcessDir::close`],
/// [`ProcessDir::reopen`]) by a caller that may not hold a descriptor.
#[derive(Debug)]
pub struct ProcessDir {
    base: String,
    /// `<base>/task`, built once so that reopening allocates nothing.
    task_path: CString,
    /// `None` between [`ProcessDir::close`] and [`ProcessDir::reopen`].
    task_dir: Option<OwnedFd>,
    dirent_buf: Box<[u8]>,
}

/// A file of the process directory opened without allocating
/// ([`ProcessDir::open_process_file`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessFile {
    /// `statm`: memory in pages.
    Statm,
    /// `status`: thread count, peak RSS, state.
    Status,
    /// `stat`: start time (the process's identity beside its PID).
    Stat,
}

impl ProcessFile {
    /// The file relative to the task directory.
    fn path_from_task_dir(self) -> &'static CStr {
        match self {
            ProcessFile::Statm => c"../statm",
            ProcessFile::Status => c"../status",
            ProcessFile::Stat => c"../stat",
        }
    }
}

/// The error of a use of a closed [`ProcessDir`] (`EBADF`).
fn closed() -> io::Error {
    io::Error::from_raw_os_error(libc::EBADF)
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

impl ProcessDir {
    /// The calling process's directory (`/proc/self`).
    ///
    /// # Errors
    /// The error of opening its task directory.
    pub fn open_self() -> io::Result<ProcessDir> {
        ProcessDir::open_base("/proc/self".to_string())
    }

    /// Process `pid`'s directory (`/proc/<pid>`).
    ///
    /// # Errors
    /// The error of opening its task directory (`NotFound` when there is
    /// no such process, or no `/proc`: see [`proc_mounted`]).
    pub fn open_pid(pid: u32) -> io::Result<ProcessDir> {
        ProcessDir::open_base(format!("/proc/{pid}"))
    }

    fn open_base(base: String) -> io::Result<ProcessDir> {
        let task_path = CString::new(format!("{base}/task"))
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut dir = ProcessDir {
            base,
            task_path,
            task_dir: None,
            dirent_buf: vec![0u8; 16 * 1024].into_boxed_slice(),
        };
        dir.reopen()?;
        Ok(dir)
    }

    /// Closes the task directory: the caller holds no descriptor of it
    /// until [`ProcessDir::reopen`]. Meanwhile every other method fails
    /// with `EBADF` ([`ProcessDir::task_count`] gives `None`).
    pub fn close(&mut self) {
        self.task_dir = None;
    }

    /// Opens the task directory again by its path, without allocating (a
    /// no-op while it is open). The path names a PID: after the process
    /// exited and its PID was reused, this opens the new process's
    /// directory; check its identity (`stat`'s start time,
    /// [`ProcessDir::open_process_file`]).
    ///
    /// # Errors
    /// The error of open(2) (`NotFound` when there is no such process).
    pub fn reopen(&mut self) -> io::Result<()> {
        if self.task_dir.is_none() {
            // SAFETY: `task_path` is NUL-terminated and outlives the call.
            let fd = unsafe {
                libc::open(
                    self.task_path.as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECTORY,
                )
            };
            if fd < 0 {
                return Err(last_os_error());
            }
            // SAFETY: `fd` was just returned by open(2) and is owned by nobody else.
            self.task_dir = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        Ok(())
    }

    /// Whether the task directory is open.
    pub fn is_open(&self) -> bool {
        self.task_dir.is_some()
    }

    /// Opens a file of the process directory, read-only, without
    /// allocating: relative to the open task directory, so it is the file
    /// of the process that directory belongs to.
    ///
    /// # Errors
    /// The error of openat(2); `EBADF` while the directory is closed.
    pub fn open_process_file(&self, file: ProcessFile) -> io::Result<OwnedFd> {
        let dir = self.task_dir.as_ref().ok_or_else(closed)?;
        // SAFETY: the path is a NUL-terminated static string; the directory
        // fd is owned and open.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                file.path_from_task_dir().as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(last_os_error());
        }
        // SAFETY: `fd` was just returned by openat(2) and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The printable path of the directory, for messages (`/proc/self`, `/proc/42`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The printable path of the task directory of the process that
    /// [`ProcessDir::open_pid`] (`Some`) or [`ProcessDir::open_self`]
    /// (`None`) opens, for the message of a failed open.
    pub fn task_dir_path(pid: Option<u32>) -> String {
        match pid {
            Some(pid) => format!("/proc/{pid}/task"),
            None => "/proc/self/task".to_string(),
        }
    }

    /// Opens a file of the process directory (`statm`, `status`),
    /// read-only. Allocates its path.
    ///
    /// # Errors
    /// The error of open(2).
    pub fn open_file(&self, rel: &str) -> io::Result<OwnedFd> {
        let mut path = String::with_capacity(self.base.len() + 1 + rel.len());
        path.push_str(&self.base);
        path.push('/');
        path.push_str(rel);
        open_path(&path, 0)
    }

    /// Opens one thread's file, read-only, without allocating: relative
    /// to the kept task directory, a shorter path walk than
    /// `/proc/<pid>/task/<tid>/...`.
    ///
    /// # Errors
    /// The error of openat(2) (`NotFound` once the thread has exited).
    pub fn open_task(&self, tid: u32, file: TaskFile) -> io::Result<OwnedFd> {
        let mut buf = [0u8; TASK_PATH_MAX];
        let path = task_path(tid, file.name(), &mut buf)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let dir = self.task_dir.as_ref().ok_or_else(closed)?;
        // SAFETY: `path` is NUL-terminated and outlives the call; the
        // directory fd is owned and open.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
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

    /// Lists the process's thread ids into `out` (cleared first).
    ///
    /// Hand-written rather than `std::fs::read_dir`: read_dir re-opens the
    /// directory and allocates an entry (with an OsString name) per thread
    /// on every sample; rewinding the kept fd and parsing getdents64 in a
    /// reused buffer allocates nothing (cost per thread: BENCHMARKS.md,
    /// "Per-thread reads").
    ///
    /// # Errors
    /// The error of lseek(2) or getdents64(2); `ESRCH` when the directory
    /// is empty (the process is gone).
    pub fn list_tids(&mut self, out: &mut Vec<u32>) -> io::Result<()> {
        out.clear();
        let fd = self.task_dir.as_ref().ok_or_else(closed)?.as_raw_fd();
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

    /// The process's thread count without reading a file, `None` when
    /// unknown (or while the directory is closed).
    ///
    /// `fstat` of the kept task directory: procfs reports 2 + the number
    /// of threads as its link count (proc_task_getattr, since Linux
    /// 2.6.x), with no text to format: a fraction of the process `status`
    /// read, warm or after a 1 s gap (BENCHMARKS.md, "Per-thread reads").
    #[inline]
    pub fn task_count(&self) -> Option<u64> {
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid out-pointer; the directory fd is owned and open.
        if unsafe { libc::fstat(self.task_dir.as_ref()?.as_raw_fd(), &mut st) } != 0 {
            return None;
        }
        #[allow(clippy::useless_conversion)] // nlink_t is 32-bit on some targets
        let links = u64::from(st.st_nlink);
        links.checked_sub(2).filter(|n| *n > 0)
    }
}

/// Reads `file` from offset 0 into `buf`; returns the byte count.
///
/// # Errors
/// The error of pread(2) (`ESRCH` once a thread's file outlived its thread).
#[inline]
pub fn pread(file: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the fd is owned and open.
    let n = unsafe { libc::pread(file.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        Err(last_os_error())
    } else {
        Ok(n as usize)
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

    #[test]
    fn this_process_reads_as_the_kernel_counts_it() {
        let mut dir = ProcessDir::open_self().expect("own task directory");
        let mut tids = Vec::new();
        dir.list_tids(&mut tids).expect("list");
        let me = std::process::id();
        assert!(tids.contains(&me), "{tids:?}");
        // The link count counts threads (the harness's may come and go
        // between the two reads, so only that it counts this one).
        assert!(dir.task_count().is_some_and(|n| n >= 1));
        let fd = dir.open_task(me, TaskFile::Schedstat).expect("schedstat");
        let mut buf = [0u8; 128];
        let n = pread(&fd, &mut buf).expect("pread");
        let (run, _, _) = parse::schedstat(&buf[..n]).expect("schedstat parses");
        assert!(run > 0);
        let status = dir.open_file("status").expect("status");
        let mut buf = [0u8; 4096];
        let n = pread(&status, &mut buf).expect("pread");
        assert_eq!(parse::status_field(&buf[..n], b"Tgid"), Some(u64::from(me)));
    }

    #[test]
    fn a_closed_directory_holds_no_descriptor_and_reopens_to_the_same_files() {
        let me = std::process::id();
        let mut dir = ProcessDir::open_pid(me).expect("task directory");
        let read = |dir: &ProcessDir, file| {
            let fd = dir.open_process_file(file).expect("process file");
            let mut buf = [0u8; 4096];
            let n = pread(&fd, &mut buf).expect("pread");
            buf[..n].to_vec()
        };
        let status = read(&dir, ProcessFile::Status);
        assert_eq!(parse::status_field(&status, b"Tgid"), Some(u64::from(me)));
        let start = parse::stat_start_ticks(&read(&dir, ProcessFile::Stat));
        assert!(start.is_some());
        assert!(
            parse::statm_resident_pages(&read(&dir, ProcessFile::Statm)).is_some_and(|p| p > 0)
        );
        dir.close();
        assert!(!dir.is_open());
        let closed = |e: io::Error| e.raw_os_error() == Some(libc::EBADF);
        assert!(dir.open_process_file(ProcessFile::Stat).is_err_and(closed));
        assert!(dir.open_task(me, TaskFile::Stat).is_err_and(closed));
        assert!(dir.list_tids(&mut Vec::new()).is_err_and(closed));
        assert_eq!(dir.task_count(), None);
        dir.reopen().expect("reopen");
        assert_eq!(
            parse::stat_start_ticks(&read(&dir, ProcessFile::Stat)),
            start
        );
        let mut tids = Vec::new();
        dir.list_tids(&mut tids).expect("list");
        assert!(tids.contains(&me));
    }
}
