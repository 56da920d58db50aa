//! Every syscall of the Linux backend, behind [`Sys`] so the backend's logic
//! (tracking, TID reuse, fallbacks) is unit-tested with a fake.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use wakemeter_procfs::task::{self, ProcessDir};
pub(crate) use wakemeter_procfs::task::{ProcessFile, TaskFile};

use crate::error::{Error, Result};
use crate::model::Target;
use crate::platform::clock;

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
    /// Opens a process-level file, read-only, without allocating (the
    /// sampling path of a backend that keeps no process-level descriptor).
    fn open_process(&mut self, file: ProcessFile) -> io::Result<Self::File>;
    /// Closes what this `Sys` keeps open (the task directory) until
    /// [`Sys::reacquire`]: the backend holds no descriptor between samples.
    fn release(&mut self) {}
    /// Opens again what [`Sys::release`] closed, before a sample, and checks
    /// that the PID still names the same process.
    ///
    /// # Errors
    /// The error of open(2) (`ENOENT`: the process is gone); `ESRCH` when
    /// the PID now names another process.
    fn reacquire(&mut self) -> io::Result<()> {
        Ok(())
    }
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
    /// `/proc/<pid>` with its task directory kept open (wakemeter-procfs).
    dir: ProcessDir,
    pid: u32,
    process_clock: libc::clockid_t,
    /// The target's start time (`stat`, clock ticks after boot), read when
    /// the task directory is first released: what tells the process from a
    /// later one with its PID once no descriptor is kept. A successor
    /// started within the same tick (10 ms) would go unseen: that needs a
    /// target that lived less than a tick and its PID reused at once.
    start_ticks: Option<u64>,
    page_size: u64,
    ticks_per_sec: u64,
}

fn last_os_error() -> io::Error {
    io::Error::last_os_error()
}

impl LinuxSys {
    /// Opens the target's task directory and process clock.
    ///
    /// # Errors
    /// [`Error::NoSuchProcess`] for a PID that does not exist,
    /// [`Error::Unreadable`] when `/proc` is missing or unreadable.
    pub(crate) fn open(target: Target) -> Result<Self> {
        let (opened, pid, task_path) = match target {
            Target::SelfProcess => (
                ProcessDir::open_self(),
                std::process::id(),
                ProcessDir::task_dir_path(None),
            ),
            Target::Pid(pid) => (
                ProcessDir::open_pid(pid),
                pid,
                ProcessDir::task_dir_path(Some(pid)),
            ),
        };
        let dir = match opened {
            Ok(dir) => dir,
            Err(e)
                if matches!(target, Target::Pid(_)) && e.raw_os_error() == Some(libc::ENOENT) =>
            {
                if task::proc_mounted() {
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
            dir,
            pid,
            process_clock,
            start_ticks: None,
            page_size: if page > 0 { page as u64 } else { 4096 },
            ticks_per_sec: crate::platform::system::clock_ticks_per_sec(),
        })
    }
}

/// Bytes read of a process's `stat` for its start time: the line is about
/// 300 bytes; its 52 fields stay under 1.2 KiB even at their widest.
const STAT_BUF: usize = 2048;

impl LinuxSys {
    /// The target's start time from its `stat`, through the open task
    /// directory (no allocation: a stack buffer); `None` when unreadable.
    fn read_start_ticks(&self) -> Option<u64> {
        let file = self.dir.open_process_file(ProcessFile::Stat).ok()?;
        let mut buf = [0u8; STAT_BUF];
        let n = task::pread(&file, &mut buf).ok()?;
        wakemeter_procfs::parse::stat_start_ticks(buf.get(..n)?)
    }
}

impl Sys for LinuxSys {
    type File = OwnedFd;

    fn open(&mut self, rel: &str) -> io::Result<OwnedFd> {
        self.dir.open_file(rel)
    }

    fn open_task(&mut self, tid: u32, file: TaskFile) -> io::Result<OwnedFd> {
        self.dir.open_task(tid, file)
    }

    fn open_process(&mut self, file: ProcessFile) -> io::Result<OwnedFd> {
        self.dir.open_process_file(file)
    }

    fn release(&mut self) {
        if self.start_ticks.is_none() {
            // Read while the directory opened at the start is still open:
            // the process the sampler was built for.
            self.start_ticks = self.read_start_ticks();
        }
        self.dir.close();
    }

    fn reacquire(&mut self) -> io::Result<()> {
        if self.dir.is_open() {
            return Ok(());
        }
        self.dir.reopen()?;
        match (self.start_ticks, self.read_start_ticks()) {
            (Some(then), Some(now)) if then != now => {
                self.dir.close();
                Err(io::Error::from_raw_os_error(libc::ESRCH))
            }
            _ => Ok(()),
        }
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
        wakemeter_procfs::process::open_fd_limit()
    }

    fn pread(&mut self, file: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
        task::pread(file, buf)
    }

    fn list_tasks(&mut self, out: &mut Vec<u32>) -> io::Result<()> {
        self.dir.list_tids(out)
    }

    fn task_count(&mut self) -> Option<u64> {
        self.dir.task_count()
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
        self.dir.base()
    }
}
