//! The workload: a child process (this binary, started with
//! [`WORKLOAD_FLAG`]) with two kinds of runs:
//! - two threads ping-pong one byte over two pipes, on one CPU or two;
//! - a pool of [`POOL_THREADS`] threads, unpinned, in pairs that each
//!   ping-pong a byte over their own two pipes: the switches and wakes of
//!   a busy server's worker pool, spread over every CPU.
//!
//! The parent side starts it and times runs of it; the child side is
//! [`serve`].

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use crate::stats::{Deltas, deltas, program_stats};

/// argv flag that turns this binary into the workload child.
pub const WORKLOAD_FLAG: &str = "--wakemeter-ebpf-workload";
/// Round trips per timed run (two context switches each).
pub const ROUND_TRIPS: u64 = 40_000;
/// Timed runs per configuration (the median is reported).
pub const RUNS: usize = 5;
/// Active threads of the pool layout (pairs of ping-pong threads).
pub const POOL_THREADS: usize = 64;
/// Round trips per pair in one timed pool run (two switches each).
pub const POOL_ROUND_TRIPS: u64 = 2_500;

/// Where the workload's two threads run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Both on CPU 0: every switch is from one workload thread to the other.
    SameCpu,
    /// On CPUs 0 and 1: every switch is between a workload thread and
    /// the idle task (or whatever else runs there).
    CrossCpu,
    /// The [`POOL_THREADS`] pool threads, on whichever CPUs the scheduler
    /// picks; the two threads above stay blocked.
    Pool,
}

/// What [`Workload::measure_window`] measured.
pub struct Window {
    /// Median wall time of one run, ns.
    pub median_ns: u64,
    /// Wall time between the two program-stat reads, ns.
    pub wall_ns: u64,
    /// Program-stat deltas between those reads.
    pub deltas: Deltas,
}

/// The running workload child; killed on drop.
pub struct Workload {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Workload {
    pub fn start() -> Option<Workload> {
        let exe = std::env::current_exe().ok()?;
        let mut child = Command::new(exe)
            .arg(WORKLOAD_FLAG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        let stdin = child.stdin.take()?;
        let stdout = BufReader::new(child.stdout.take()?);
        Some(Workload {
            child,
            stdin,
            stdout,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// One timed run of `ROUND_TRIPS` round trips (`POOL_ROUND_TRIPS` per
    /// pair in the pool); wall time in ns.
    fn run(&mut self, layout: Layout) -> Option<u64> {
        match layout {
            Layout::SameCpu => writeln!(self.stdin, "{ROUND_TRIPS} 0"),
            Layout::CrossCpu => writeln!(self.stdin, "{ROUND_TRIPS} 1"),
            Layout::Pool => writeln!(self.stdin, "{POOL_ROUND_TRIPS} pool"),
        }
        .ok()?;
        self.stdin.flush().ok()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line).ok()?;
        line.trim().parse().ok()
    }

    /// Median wall time of `RUNS` runs, with program-stat deltas over all of them.
    pub fn measure(&mut self, layout: Layout, ids: &[u32]) -> (u64, Deltas) {
        let m = self.measure_window(layout, ids);
        (m.median_ns, m.deltas)
    }

    /// `RUNS` runs after a warm-up: their median wall time, the program-stat
    /// deltas over all of them and the wall time those deltas span.
    pub fn measure_window(&mut self, layout: Layout, ids: &[u32]) -> Window {
        let _ = self.run(layout); // warm-up
        let before = program_stats();
        let t0 = Instant::now();
        let mut times: Vec<u64> = (0..RUNS).filter_map(|_| self.run(layout)).collect();
        let wall_ns = t0.elapsed().as_nanos() as u64;
        let after = program_stats();
        times.sort_unstable();
        let median_ns = times.get(times.len() / 2).copied().unwrap_or(0);
        Window {
            median_ns,
            wall_ns,
            deltas: deltas(&before, &after, ids),
        }
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pins thread `tid` (0 = the caller) to one CPU.
fn pin(tid: libc::pid_t, cpu: usize) {
    // SAFETY: `set` is a zeroed cpu_set_t that CPU_SET fills; the
    // call only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set);
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe writes.
    let rc = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(rc, 0, "pipe failed");
    // SAFETY: pipe returned two fresh descriptors that we now own.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn xfer(fd: &OwnedFd, write: bool) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: one byte of a valid buffer on a descriptor we own.
    let n = unsafe {
        if write {
            libc::write(fd.as_raw_fd(), b.as_ptr().cast(), 1)
        } else {
            libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 1)
        }
    };
    n == 1
}

/// The pool: `POOL_THREADS / 2` pairs, each one thread that starts round
/// trips and one that echoes them. The starters meet the caller at `gate`
/// before and after each run; `round_trips` is the run's count per pair.
struct Pool {
    gate: std::sync::Arc<std::sync::Barrier>,
    round_trips: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Pool {
    /// Starts the threads; they inherit the caller's CPU affinity, so call
    /// it before pinning.
    fn start() -> Pool {
        use std::sync::atomic::Ordering;
        use std::sync::{Arc, Barrier};
        let pairs = POOL_THREADS / 2;
        let gate = Arc::new(Barrier::new(pairs + 1));
        let round_trips = Arc::new(std::sync::atomic::AtomicU64::new(0));
        for _ in 0..pairs {
            let (ping_r, ping_w) = pipe();
            let (pong_r, pong_w) = pipe();
            std::thread::spawn(move || {
                while xfer(&ping_r, false) {
                    if !xfer(&pong_w, true) {
                        break;
                    }
                }
            });
            let (gate, round_trips) = (gate.clone(), round_trips.clone());
            std::thread::spawn(move || {
                loop {
                    gate.wait();
                    for _ in 0..round_trips.load(Ordering::Relaxed) {
                        if !(xfer(&ping_w, true) && xfer(&pong_r, false)) {
                            return;
                        }
                    }
                    gate.wait();
                }
            });
        }
        Pool { gate, round_trips }
    }

    /// One run of `n` round trips per pair; wall time in ns.
    fn run(&self, n: u64) -> u128 {
        self.round_trips
            .store(n, std::sync::atomic::Ordering::Relaxed);
        let t0 = Instant::now();
        self.gate.wait();
        self.gate.wait();
        t0.elapsed().as_nanos()
    }
}

/// The workload child. Reads one run per line on stdin: `<n> 0` (two
/// threads pinned to CPU 0 ping-pong one byte `n` times over two pipes),
/// `<n> 1` (the same on CPUs 0 and 1) or `<n> pool` (`n` round trips in
/// each pair of the pool); answers the wall time in ns; exits at end of
/// input.
pub fn serve() {
    let pool = Pool::start();
    let (a_to_b_r, a_to_b_w) = pipe();
    let (b_to_a_r, b_to_a_w) = pipe();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        let _ = tid_tx.send(unsafe { libc::gettid() });
        while xfer(&a_to_b_r, false) {
            if !xfer(&b_to_a_w, true) {
                break;
            }
        }
    });
    let Ok(b_tid) = tid_rx.recv() else {
        return;
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else {
            break;
        };
        let mut words = line.split_whitespace();
        let n: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        let how = words.next();
        let ns = if how == Some("pool") {
            pool.run(n)
        } else {
            let cross = how == Some("1") && cpus > 1;
            pin(0, 0);
            pin(b_tid, usize::from(cross));
            let t0 = Instant::now();
            for _ in 0..n {
                if !(xfer(&a_to_b_w, true) && xfer(&b_to_a_r, false)) {
                    return;
                }
            }
            t0.elapsed().as_nanos()
        };
        if writeln!(out, "{ns}").and_then(|()| out.flush()).is_err() {
            return;
        }
    }
}
