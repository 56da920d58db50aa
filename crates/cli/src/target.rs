//! The process `watch` observes: resolving what the user named, and noticing
//! when it is gone.
//!
//! On Linux and Android this reads procfs directly (`status` for the thread
//! group, `stat` for the scheduler state), because the sampler alone cannot
//! tell a zombie from a quiet process: a zombie's `/proc` entry stays
//! readable until its parent reaps it.

/// What `watch` will observe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The process (thread-group leader) to sample.
    pub pid: u32,
    /// The non-leader thread id the user gave, when it was one.
    pub via_tid: Option<u32>,
    /// The process's command name (raw; escape before printing).
    pub name: String,
}

/// Whether the watched process is still there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// At least one of its threads can still run.
    Alive,
    /// It has exited but its parent has not reaped it yet.
    Zombie,
    /// Its `/proc` entry is gone (exited and reaped).
    Gone,
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod imp {
    use std::io;

    use wakemeter_procfs::parse;
    use wakemeter_procfs::process::{self, Process};

    use super::{Liveness, Resolved};

    fn gone(e: &io::Error) -> bool {
        matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
    }

    fn comm(pid: u32) -> String {
        process::comm(Process::Pid(pid))
            .map(|raw| String::from_utf8_lossy(&raw).into_owned())
            .unwrap_or_default()
    }

    pub fn resolve(pid: u32) -> Result<Resolved, String> {
        let status = match process::status(pid) {
            Ok(raw) => raw,
            Err(e) if gone(&e) => return Err(format!("no process with pid {pid}")),
            Err(e) => return Err(format!("cannot read the status of pid {pid}: {e}")),
        };
        let leader = parse::status_field(&status, b"Tgid")
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(pid);
        let resolved = Resolved {
            pid: leader,
            via_tid: (leader != pid).then_some(pid),
            name: comm(leader),
        };
        match liveness(leader) {
            Liveness::Alive => Ok(resolved),
            Liveness::Zombie => {
                let parent = process::status(leader)
                    .ok()
                    .and_then(|s| parse::status_field(&s, b"PPid"))
                    .map_or_else(String::new, |p| format!(" (pid {p})"));
                Err(format!(
                    "process {leader} ({}) is a zombie: it has exited and its parent{parent} \
                     has not reaped it; there is nothing to watch",
                    resolved.name
                ))
            }
            Liveness::Gone => Err(format!("no process with pid {pid}")),
        }
    }

    pub fn liveness(pid: u32) -> Liveness {
        // The leader's own `stat` has the state the process `stat` shows,
        // without the process-wide sums the kernel makes over every thread
        // for the latter (most of this check's cost at thousands of threads).
        let stat = match process::task_file(pid, pid, "stat") {
            Ok(raw) => raw,
            Err(e) if gone(&e) => return Liveness::Gone,
            // Unreadable for another reason: not ours to judge; the
            // sampler reports what it can and cannot read.
            Err(_) => return Liveness::Alive,
        };
        match parse::stat_state(&stat) {
            Some(s) if parse::state_finished(s) => {}
            _ => return Liveness::Alive,
        }
        // A leader that called pthread_exit is a zombie while its other
        // threads still run: the process is only over when all of them are.
        let Ok(tids) = process::tids(pid) else {
            return Liveness::Zombie;
        };
        let any_running = tids.into_iter().any(|tid| {
            process::task_file(pid, tid, "stat")
                .is_ok_and(|raw| parse::stat_state(&raw).is_some_and(|s| !parse::state_finished(s)))
        });
        if any_running {
            Liveness::Alive
        } else {
            Liveness::Zombie
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod imp {
    use super::{Liveness, Resolved};

    /// Elsewhere the sampler itself says whether the PID exists.
    pub fn resolve(pid: u32) -> Result<Resolved, String> {
        Ok(Resolved {
            pid,
            via_tid: None,
            name: String::new(),
        })
    }

    /// Without procfs, only "gone" can be told, by signal 0 (which
    /// delivers nothing).
    #[cfg(unix)]
    pub fn liveness(pid: u32) -> Liveness {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return Liveness::Gone;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        let rc = unsafe { libc::kill(pid, 0) };
        if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            Liveness::Gone
        } else {
            Liveness::Alive
        }
    }

    /// Elsewhere the sampler's own stop tells when the target is gone.
    #[cfg(not(unix))]
    pub fn liveness(_pid: u32) -> Liveness {
        Liveness::Alive
    }
}

/// Resolves `pid` to the process to watch: a non-leader thread id becomes
/// its process; a missing or zombie process is an error (as text for the user,
/// unescaped).
pub fn resolve(pid: u32) -> Result<Resolved, String> {
    imp::resolve(pid)
}

/// Whether process `pid` is still alive, a zombie, or gone.
pub fn liveness(pid: u32) -> Liveness {
    imp::liveness(pid)
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;

    #[test]
    fn this_process_resolves_to_itself_and_its_threads_to_it() {
        let me = std::process::id();
        let r = resolve(me).unwrap();
        assert_eq!((r.pid, r.via_tid), (me, None));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let r = resolve(tid).unwrap();
        assert_eq!((r.pid, r.via_tid), (me, Some(tid)));
        drop(done_tx);
        h.join().unwrap();
        assert_eq!(liveness(me), Liveness::Alive);
    }
}
