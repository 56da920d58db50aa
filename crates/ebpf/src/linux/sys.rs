//! The OS calls of the checks and of exit detection, kept thin and separate
//! from the parsing so the parsing can be unit-tested.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use wakemeter_procfs::parse::{self, TaskSyscall};
use wakemeter_procfs::{process, system};

use super::abi;
use crate::error::EbpfError;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> EbpfError {
    let what = what.into();
    move |source| EbpfError::Io { what, source }
}

/// Which required capabilities an effective set (`CapEff`) lacks, if any.
pub(crate) fn missing_capabilities(cap_eff: u64) -> Option<&'static str> {
    let has = |cap: u32| cap_eff & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) {
        return None;
    }
    match (has(CAP_BPF), has(CAP_PERFMON)) {
        (true, true) => None,
        (false, true) => Some("CAP_BPF"),
        (true, false) => Some("CAP_PERFMON"),
        (false, false) => Some("CAP_BPF and CAP_PERFMON"),
    }
}

/// Fails with [`EbpfError::MissingPrivilege`] unless this process may load
/// tracing programs.
pub(crate) fn check_privileges() -> Result<(), EbpfError> {
    // Capabilities are per thread: the calling thread's are the ones the
    // kernel checks (`/proc/self` would show the main thread's).
    let status = process::current_thread_status()
        .map_err(io_err("reading /proc/thread-self/status for CapEff"))?;
    let cap_eff = parse::status_hex(&status, b"CapEff").ok_or_else(|| EbpfError::Io {
        what: "parsing CapEff of /proc/thread-self/status".into(),
        source: io::Error::from(io::ErrorKind::InvalidData),
    })?;
    match missing_capabilities(cap_eff) {
        None => Ok(()),
        Some(missing) => Err(EbpfError::MissingPrivilege { missing }),
    }
}

/// Fails with [`EbpfError::NoKernelBtf`] when the kernel's BTF is not at
/// `path` (`None`: the kernel's own, `wakemeter_procfs::system::KERNEL_BTF`).
pub(crate) fn check_kernel_btf(path: Option<&std::path::Path>) -> Result<(), EbpfError> {
    let path = path.unwrap_or(system::kernel_btf());
    if path.exists() {
        Ok(())
    } else {
        Err(EbpfError::NoKernelBtf { path: path.into() })
    }
}

/// The process id of `pid` (itself, or its thread group when it is a thread).
pub(crate) fn process_of(pid: u32) -> Result<u32, EbpfError> {
    if pid == 0 {
        return Err(EbpfError::NoSuchProcess { pid });
    }
    let status = match process::status(pid) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(EbpfError::NoSuchProcess { pid });
        }
        Err(e) => return Err(io_err(format!("reading /proc/{pid}/status"))(e)),
    };
    parse::status_field(&status, b"Tgid")
        .and_then(|v| u32::try_from(v).ok())
        .ok_or(EbpfError::NoSuchProcess { pid })
}

/// The number of threads of process `pid` (`Threads:` of its
/// `/proc/<pid>/status`), `None` when it cannot be read.
pub(crate) fn thread_count(pid: u32) -> Option<u32> {
    let status = process::status(pid).ok()?;
    parse::status_field(&status, b"Threads").and_then(|n| u32::try_from(n).ok())
}

/// The thread ids of process `pid`, from `/proc/<pid>/task`, into `out`
/// (cleared first). `false` when the directory cannot be read (the
/// process is gone, or `/proc` is another PID namespace's).
pub(crate) fn list_tids(pid: u32, out: &mut Vec<u32>) -> bool {
    out.clear();
    let Ok(tids) = process::tids(pid) else {
        return false;
    };
    out.extend(tids);
    true
}

/// What a thread that is blocked right now is blocked in (see
/// [`blocked_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocked {
    /// The off-CPU cause (`abi::OFF_*`), classified as the kernel side's
    /// `off_cpu_cause` does.
    pub cause: usize,
    /// The syscall number when it is one of the poll or sleep family.
    pub poll_or_sleep_syscall: Option<u64>,
    /// Its `comm`, NUL-padded.
    pub comm: [u8; abi::COMM_LEN],
}

/// The off-CPU cause of a thread blocked in syscall `nr` with task state
/// `state` (a `/proc` state letter), as the kernel side's `off_cpu_cause`
/// and `syscall_class` classify a switch-out; `None` for a runnable
/// thread (it is about to run, and the programs will see it).
pub(crate) fn blocked_cause(nr: Option<i64>, state: char) -> Option<(usize, bool)> {
    if matches!(state, 'R') {
        return None;
    }
    let sleep = [libc::SYS_nanosleep, libc::SYS_clock_nanosleep];
    let lock = [libc::SYS_futex, libc::SYS_futex_waitv];
    #[cfg(target_arch = "x86_64")]
    let poll = [
        libc::SYS_poll,
        libc::SYS_select,
        libc::SYS_epoll_wait,
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
        libc::SYS_ppoll,
        libc::SYS_pselect6,
    ];
    #[cfg(not(target_arch = "x86_64"))]
    let poll = [
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
        libc::SYS_ppoll,
        libc::SYS_pselect6,
    ];
    Some(match nr {
        Some(n) if sleep.contains(&n) => (abi::OFF_SLEEP, true),
        Some(n) if lock.contains(&n) => (abi::OFF_LOCK, false),
        Some(n) if poll.contains(&n) => (abi::OFF_POLL, true),
        _ if state == 'D' => (abi::OFF_IO, false),
        _ => (abi::OFF_OTHER, false),
    })
}

/// What thread `tid` of process `pid` is blocked in now, from
/// `/proc/<pid>/task/<tid>/{stat,syscall,comm}` (`syscall` needs the
/// privilege to trace the process, which the eBPF attach has); `None` when
/// it is runnable, gone, or the files cannot be read.
pub(crate) fn blocked_in(pid: u32, tid: u32) -> Option<Blocked> {
    let stat = process::task_file(pid, tid, "stat").ok()?;
    let state = char::from(parse::stat_state(&stat)?);
    let syscall = process::task_file(pid, tid, "syscall").ok()?;
    let nr = match parse::task_syscall(&syscall)? {
        TaskSyscall::Running => return None,
        TaskSyscall::NotInSyscall => None,
        TaskSyscall::InSyscall(nr) => Some(nr),
    };
    let (cause, poll_or_sleep) = blocked_cause(nr, state)?;
    let mut comm = [0u8; abi::COMM_LEN];
    if let Ok(raw) = process::task_file(pid, tid, "comm") {
        let name = parse::comm(&raw);
        let n = name.len().min(abi::COMM_LEN - 1);
        comm[..n].copy_from_slice(&name[..n]);
    }
    Some(Blocked {
        cause,
        poll_or_sleep_syscall: if poll_or_sleep {
            nr.and_then(|n| u64::try_from(n).ok())
        } else {
            None
        },
        comm,
    })
}

/// `BPF_MAP_LOOKUP_BATCH` (`enum bpf_cmd`, Linux 5.6+).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// `BPF_MAP_UPDATE_BATCH` (`enum bpf_cmd`, Linux 5.6+).
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
/// `ENOTSUPP`: the kernel-internal "not supported" some map types return.
const ENOTSUPP: i32 = 524;

/// The `batch` member of `union bpf_attr` (the kernel zero-fills the rest).
#[repr(C)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// `bpf(cmd, attr)`: what the command returns (0, or a new descriptor),
/// or -1 with `errno` set.
///
/// # Safety
///
/// `attr` must be a valid member of `union bpf_attr` for `cmd`, and the
/// pointers in it (for a batch command `in_batch`, `out_batch`, `keys`,
/// `values`, when not 0: `count` keys of the map's key size, values of its
/// value size and a u32 cursor) valid for what `cmd` reads and writes.
unsafe fn bpf_call<A>(cmd: libc::c_long, attr: &mut A) -> libc::c_long {
    let size = libc::c_uint::try_from(size_of::<A>()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: `attr` is `size` bytes of a valid `bpf_attr` member; the
    // memory its pointers name is the caller's promise (see above). The
    // kernel keeps no pointer after it returns.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, std::ptr::from_mut(attr), size) }
}

/// `BPF_LINK_CREATE` (`enum bpf_cmd`, Linux 5.7+).
const BPF_LINK_CREATE: libc::c_long = 28;
/// `BPF_ITER_CREATE` (`enum bpf_cmd`, Linux 5.8+).
const BPF_ITER_CREATE: libc::c_long = 33;
/// `BPF_TRACE_ITER` (`enum bpf_attach_type`).
const BPF_TRACE_ITER: u32 = 28;

/// The `link_create` member of `union bpf_attr` for an iterator.
#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    iter_info: u64,
    iter_info_len: u32,
    pad: u32,
}

/// The `task` member of `union bpf_iter_link_info` (Linux 6.1+), padded
/// to the union's 16 bytes.
#[repr(C)]
struct TaskIterInfo {
    tid: u32,
    pid: u32,
    pid_fd: u32,
    pad: u32,
}

/// The `iter_create` member of `union bpf_attr`.
#[repr(C)]
struct IterCreateAttr {
    link_fd: u32,
    flags: u32,
}

/// A new descriptor from `bpf(cmd, attr)`.
///
/// # Safety
///
/// `attr` must be a valid member of `bpf_attr` for `cmd`, and any pointer
/// in it valid for what `cmd` reads.
unsafe fn fd_call<A>(cmd: libc::c_long, attr: &mut A) -> io::Result<OwnedFd> {
    // SAFETY: the caller's promise (see above).
    let rc = unsafe { bpf_call(cmd, attr) };
    let fd = i32::try_from(rc).map_err(|_| io::Error::last_os_error())?;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A task iterator of program `prog` (loaded as `iter/task`) over the
/// threads of process `pid` only, an id of this process's PID namespace
/// (Linux 6.1+; `EINVAL` before): the file whose reading runs it. aya's
/// `Iter::attach` takes no such parameter, and the walk over every task
/// of the machine costs about 0.3 µs a task (BENCHMARKS.md, "`read()`
/// under thread churn").
pub(crate) fn task_iter_of_process(prog: BorrowedFd<'_>, pid: u32) -> io::Result<std::fs::File> {
    let info = TaskIterInfo {
        tid: 0,
        pid,
        pid_fd: 0,
        pad: 0,
    };
    let mut link = LinkCreateAttr {
        prog_fd: u32::try_from(prog.as_raw_fd())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        target_fd: 0,
        attach_type: BPF_TRACE_ITER,
        flags: 0,
        iter_info: std::ptr::from_ref(&info) as u64,
        iter_info_len: u32::try_from(size_of::<TaskIterInfo>()).unwrap_or(0),
        pad: 0,
    };
    // SAFETY: a `link_create` attr whose `iter_info` points at `info`,
    // `iter_info_len` bytes that live across the call.
    let link_fd = unsafe { fd_call(BPF_LINK_CREATE, &mut link) }?;
    let mut iter = IterCreateAttr {
        link_fd: u32::try_from(link_fd.as_raw_fd())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        flags: 0,
    };
    // SAFETY: an `iter_create` attr naming the link just made.
    let iter_fd = unsafe { fd_call(BPF_ITER_CREATE, &mut iter) }?;
    // The iterator holds the link: closing ours here is what aya does too.
    drop(link_fd);
    Ok(std::fs::File::from(iter_fd))
}

/// What one [`lookup_batch`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Batch {
    /// Filled this many entries; call again with the same cursor for more.
    More(usize),
    /// Filled this many entries, and the map has no more.
    Done(usize),
    /// One hash bucket holds more entries than the buffers: grow them and
    /// call again with the same cursor.
    TooSmall,
    /// The kernel has no batch operations for this map (before Linux 5.6).
    Unsupported,
}

/// Writes `values` at keys `first`, `first + 1`, ... of array map `map` in
/// one call.
/// Returns `Ok(false)` when the kernel has no batch operations (before
/// Linux 5.6): write them one by one instead.
///
/// `V` must be the map's value type and its keys `u32` (checked by aya when
/// the map was opened).
pub(crate) fn update_array_batch<V: aya::Pod>(
    map: BorrowedFd<'_>,
    first: u32,
    values: &[V],
) -> io::Result<bool> {
    let count = u32::try_from(values.len()).unwrap_or(u32::MAX);
    let keys: Vec<u32> = (first..first.saturating_add(count)).collect();
    let mut attr = BatchAttr {
        in_batch: 0,
        out_batch: 0,
        keys: keys.as_ptr() as u64,
        values: values.as_ptr() as u64,
        count: u32::try_from(keys.len()).unwrap_or(0),
        map_fd: u32::try_from(map.as_raw_fd()).unwrap_or(u32::MAX),
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: the kernel reads `count` u32 keys from `keys` and `count`
    // values of the map's value size (V's) from `values`, both exactly that
    // long, and writes back only `attr.count`. Both live across the call.
    let rc = unsafe { bpf_call(BPF_MAP_UPDATE_BATCH, &mut attr) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP) => Ok(false),
        _ => Err(err),
    }
}

/// Copies the next entries of hash map `map` into `keys` and `values`
/// (as many as the shorter of the two holds), walking the map's buckets
/// from `cursor` (`None`: from the start), which is advanced. Entries
/// deleted meanwhile never make the walk start over, as the key-by-key
/// walk does, and each bucket is visited once.
///
/// `K` and `V` must be the map's key and value types (sizes checked by aya
/// when the map was opened).
pub(crate) fn lookup_batch<K: aya::Pod, V: aya::Pod>(
    map: BorrowedFd<'_>,
    cursor: &mut Option<u32>,
    keys: &mut [K],
    values: &mut [V],
) -> io::Result<Batch> {
    let room = keys.len().min(values.len());
    let mut next: u32 = 0;
    let mut attr = BatchAttr {
        in_batch: cursor.as_ref().map_or(0, |c| std::ptr::from_ref(c) as u64),
        out_batch: std::ptr::from_mut(&mut next) as u64,
        keys: keys.as_mut_ptr() as u64,
        values: values.as_mut_ptr() as u64,
        count: u32::try_from(room).unwrap_or(u32::MAX),
        map_fd: u32::try_from(map.as_raw_fd())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: the kernel reads `*in_batch` (a u32 cursor, as hash maps use)
    // and writes `*out_batch` (a u32), up to `count` keys of the map's key
    // size into `keys` and values of its value size into `values`; `count`
    // is at most the length of both slices, and K and V are the map's key
    // and value types, so every write is in bounds. All of them live
    // across the call.
    let rc = unsafe { bpf_call(BPF_MAP_LOOKUP_BATCH, &mut attr) };
    let filled = usize::try_from(attr.count).unwrap_or(0).min(room);
    if rc == 0 {
        *cursor = Some(next);
        return Ok(Batch::More(filled));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENOENT) => Ok(Batch::Done(filled)),
        Some(libc::ENOSPC) => Ok(Batch::TooSmall),
        Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP) => Ok(Batch::Unsupported),
        _ => Err(err),
    }
}

/// The part of the soft `RLIMIT_NOFILE` that the exit watches of all the
/// targets of this process may hold as pidfds, as a divisor: an eighth
/// (128 under the common limit of 1024). Targets beyond it are watched by
/// their start time.
///
/// Why: a pidfd per target held for life made `watch --name` over 300
/// processes under `ulimit -n 256` run out of descriptors at about 97. A
/// pidfd check is one `poll`; a start-time check reads `/proc/<pid>/stat`
/// (a few µs a read, once per sample), cheap enough for the targets past
/// the first hundred.
const PIDFD_SHARE_DIVISOR: u64 = 8;

/// Pidfds held now by the exit watches of this process.
static PIDFDS_HELD: AtomicU64 = AtomicU64::new(0);

/// Counts one more pidfd if the share allows it.
fn take_pidfd_slot() -> bool {
    let allowed = wakemeter_procfs::process::open_fd_limit()
        .map_or(u64::MAX, |limit| limit / PIDFD_SHARE_DIVISOR);
    PIDFDS_HELD
        .try_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
            (h < allowed).then_some(h + 1)
        })
        .is_ok()
}

/// A pidfd of an exit watch, its slot in [`PIDFDS_HELD`] given back on drop.
#[derive(Debug)]
pub(crate) struct CountedPidFd(OwnedFd);

impl Drop for CountedPidFd {
    fn drop(&mut self) {
        release_pidfd_slot();
    }
}

/// Gives back a slot of [`take_pidfd_slot`].
fn release_pidfd_slot() {
    let _ = PIDFDS_HELD.try_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
        Some(h.saturating_sub(1))
    });
}

/// A handle on a process that tells when it has exited: a pidfd where the
/// kernel has them (5.3+) and the share allows ([`PIDFD_SHARE_DIVISOR`]),
/// the process start time in `/proc` otherwise.
#[derive(Debug)]
pub(crate) enum ExitWatch {
    /// Readable once the process has exited.
    PidFd(CountedPidFd),
    /// `(pid, starttime)` from `/proc/<pid>/stat`; a different or missing
    /// start time means the process is gone (and maybe the id reused).
    StartTime(u32, u64),
}

impl ExitWatch {
    pub(crate) fn new(pid: u32) -> Result<ExitWatch, EbpfError> {
        let pid_t = libc::pid_t::try_from(pid).map_err(|_| EbpfError::NoSuchProcess { pid })?;
        if take_pidfd_slot() {
            // SAFETY: pidfd_open takes a pid and flags by value; no memory is shared.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid_t, 0) };
            if fd >= 0 {
                let raw = i32::try_from(fd).map_err(|_| EbpfError::NoSuchProcess { pid })?;
                // SAFETY: the kernel just returned this fd to us and nothing else owns it.
                let fd = unsafe { OwnedFd::from_raw_fd(raw) };
                return Ok(ExitWatch::PidFd(CountedPidFd(fd)));
            }
            let err = io::Error::last_os_error();
            release_pidfd_slot();
            if err.raw_os_error() == Some(libc::ESRCH) {
                return Err(EbpfError::NoSuchProcess { pid });
            }
        }
        match start_time(pid) {
            Some(t) => Ok(ExitWatch::StartTime(pid, t)),
            None => Err(EbpfError::NoSuchProcess { pid }),
        }
    }

    /// Whether the process has exited (a zombie counts as exited).
    pub(crate) fn has_exited(&self) -> bool {
        match self {
            ExitWatch::PidFd(CountedPidFd(fd)) => {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: `pfd` is a valid pollfd for the duration of the call;
                // a zero timeout never blocks.
                let n = unsafe { libc::poll(&mut pfd, 1, 0) };
                n > 0 && pfd.revents & (libc::POLLIN | libc::POLLHUP) != 0
            }
            ExitWatch::StartTime(pid, t) => start_time(*pid) != Some(*t),
        }
    }
}

/// Field 22 (`starttime`) of `/proc/<pid>/stat`, or `None` when the process
/// is gone or a zombie.
fn start_time(pid: u32) -> Option<u64> {
    let stat = process::stat(pid).ok()?;
    parse_start_time(&stat)
}

/// `starttime` of a `/proc/<pid>/stat` text; `None` for zombies.
pub(crate) fn parse_start_time(stat: &[u8]) -> Option<u64> {
    if matches!(parse::stat_state(stat)?, b'Z' | b'X') {
        return None;
    }
    parse::stat_start_ticks(stat)
}

#[cfg(test)]
mod tests {
    #[test]
    fn past_the_pidfd_share_an_exit_is_told_by_the_start_time() {
        use super::{ExitWatch, Ordering, PIDFDS_HELD};
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        // A pidfd on kernels that have them (5.3+).
        let within = ExitWatch::new(pid).expect("watch");
        // The share taken (by other targets): no pidfd is opened.
        const TAKEN: u64 = u64::MAX / 2;
        PIDFDS_HELD.fetch_add(TAKEN, Ordering::Relaxed);
        let past = ExitWatch::new(pid);
        PIDFDS_HELD.fetch_sub(TAKEN, Ordering::Relaxed);
        let past = past.expect("watch");
        assert!(
            matches!(past, ExitWatch::StartTime(p, _) if p == pid),
            "{past:?}"
        );
        assert!(!within.has_exited() && !past.has_exited());
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert!(within.has_exited() && past.has_exited());
    }

    #[test]
    fn blocked_threads_are_classified_as_the_kernel_side_does() {
        use super::{abi, blocked_cause};
        assert_eq!(
            blocked_cause(Some(libc::SYS_futex), 'S'),
            Some((abi::OFF_LOCK, false))
        );
        assert_eq!(
            blocked_cause(Some(libc::SYS_clock_nanosleep), 'S'),
            Some((abi::OFF_SLEEP, true))
        );
        assert_eq!(
            blocked_cause(Some(libc::SYS_epoll_pwait), 'S'),
            Some((abi::OFF_POLL, true))
        );
        assert_eq!(
            blocked_cause(Some(libc::SYS_read), 'D'),
            Some((abi::OFF_IO, false))
        );
        assert_eq!(
            blocked_cause(Some(libc::SYS_read), 'S'),
            Some((abi::OFF_OTHER, false))
        );
        assert_eq!(blocked_cause(None, 'S'), Some((abi::OFF_OTHER, false)));
        // Runnable: the programs see it at its next switch.
        assert_eq!(blocked_cause(Some(libc::SYS_futex), 'R'), None);
    }

    use super::*;

    #[test]
    fn capabilities() {
        assert_eq!(missing_capabilities(0x000001fffeffffff), None);
        assert_eq!(missing_capabilities(1 << CAP_SYS_ADMIN), None);
        assert_eq!(
            missing_capabilities((1 << CAP_BPF) | (1 << CAP_PERFMON)),
            None
        );
        assert_eq!(missing_capabilities(1 << CAP_BPF), Some("CAP_PERFMON"));
        assert_eq!(missing_capabilities(1 << CAP_PERFMON), Some("CAP_BPF"));
        assert_eq!(missing_capabilities(0), Some("CAP_BPF and CAP_PERFMON"));
    }

    #[test]
    fn start_times() {
        let line = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10 18446744073709551615";
        assert_eq!(parse_start_time(line.as_bytes()), Some(98765));
        let zombie = "1234 (x) Z 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 0 0";
        assert_eq!(parse_start_time(zombie.as_bytes()), None);
        assert_eq!(parse_start_time(b"garbage"), None);
    }

    #[test]
    fn own_thread_count() {
        let n = thread_count(std::process::id()).unwrap();
        assert!(n >= 1);
        assert_eq!(thread_count(1 << 30), None);
    }

    #[test]
    fn own_process_resolves_and_clock_moves() {
        assert_eq!(process_of(std::process::id()).unwrap(), std::process::id());
        assert!(matches!(
            process_of(0),
            Err(EbpfError::NoSuchProcess { pid: 0 })
        ));
        let a = wakemeter::monotonic_ns();
        let b = wakemeter::monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
