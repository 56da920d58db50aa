//! The per-thread reads a Linux sample is built from, one by one, against
//! `Instant::now()` measured in the same run: another thread's CPU clock,
//! each of its `/proc/self/task/<tid>` files through a kept descriptor and
//! by open-read-close, the process `status`, the thread count from the task
//! directory's link count, listing the task directory, and a TID map lookup
//! with SipHash and with a multiplicative hash. Then the reads a sample of
//! an idle process makes, each once after a 1 s gap (cold caches), as the
//! background sampler meets them. The sampler's design choices (which files
//! it keeps open, what it skips, its TID hasher) rest on these figures;
//! BENCHMARKS.md, "Per-thread reads", holds them.
//!
//! Run: `cargo bench -p wakemeter-benches --bench reads`

use std::collections::HashMap;
use std::ffi::CString;
use std::hash::{BuildHasherDefault, Hasher};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::Criterion;
use wakemeter_benches::{ParkedThreads, Ratios};

/// Extra threads while listing, so the per-thread cost is not the fixed cost.
const LISTED_THREADS: usize = 256;
/// Threads in the TID maps (two lookups per thread and sample in the backend).
const MAP_THREADS: u32 = 257;
/// Cold reads: one read after each of this many 1 s gaps (the median is reported).
const COLD_ROUNDS: usize = 5;
/// The gap before a cold read: the background sampler's default interval.
const COLD_GAP: Duration = Duration::from_secs(1);

fn ratios() -> &'static Ratios {
    static R: OnceLock<Ratios> = OnceLock::new();
    R.get_or_init(Ratios::default)
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// A thread parked until the process exits; returns its TID (the sampler
/// reads other threads' files, not its own).
fn parked_tid() -> u32 {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("read-target".into())
        .spawn(move || {
            let _ = tx.send(gettid());
            loop {
                std::thread::park();
            }
        })
        .expect("spawn the read target");
    rx.recv().expect("the read target's TID")
}

/// Link count of the task directory: 2 + the number of threads.
fn task_count(dir: &OwnedFd) -> u64 {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer; the fd is open.
    unsafe { libc::fstat(dir.as_raw_fd(), &mut st) };
    st.st_nlink as u64
}

fn open(path: &str) -> OwnedFd {
    let c = CString::new(path).expect("no NUL in the path");
    // SAFETY: `c` is a valid NUL-terminated path; the flags open read-only.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open {path}: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just opened and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn pread(fd: &OwnedFd, buf: &mut [u8]) -> isize {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the fd is open.
    unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) }
}

fn open_read_close(path: &CString, buf: &mut [u8]) -> isize {
    // SAFETY: `path` is a valid NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return -1;
    }
    // SAFETY: `fd` was just opened and is owned by nobody else; it closes on drop.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    pread(&fd, buf)
}

/// The thread's CPU clock as the backend reads it (the kernel's
/// per-thread clock id for `tid`).
fn thread_cpu_ns(tid: u32) -> u64 {
    let clock = (!(tid as libc::clockid_t)).wrapping_shl(3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Lists a task directory as the backend does: rewind a kept descriptor,
/// `getdents64` into a reused buffer. Returns the bytes of entries read.
fn list(dir: &OwnedFd, buf: &mut [u8]) -> usize {
    let fd = dir.as_raw_fd();
    // SAFETY: lseek on an owned directory fd has no memory-safety preconditions.
    unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
    let mut total = 0;
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            return total;
        }
        total += n as usize;
    }
}

/// The multiplicative TID hash of the Linux backend (`TidHasher`).
#[derive(Default)]
struct MulHasher(u64);

impl Hasher for MulHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = u64::from(v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("reads");
    g.sample_size(30)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    let tid = parked_tid();
    let mut buf = vec![0u8; 4096];

    g.bench_function("instant_now", |b| {
        b.iter_custom(|iters| ratios().time("instant_now", iters, Instant::now))
    });
    g.bench_function("thread_cpu_clock", |b| {
        b.iter_custom(|iters| ratios().time("thread_cpu_clock", iters, || thread_cpu_ns(tid)))
    });
    for file in ["schedstat", "status", "stat"] {
        let path = format!("/proc/self/task/{tid}/{file}");
        let kept = open(&path);
        g.bench_function(format!("{file}_kept"), |b| {
            b.iter_custom(|iters| {
                ratios().time(&format!("{file}_kept"), iters, || pread(&kept, &mut buf))
            })
        });
        let cpath = CString::new(path).expect("no NUL in the path");
        g.bench_function(format!("{file}_open_read_close"), |b| {
            b.iter_custom(|iters| {
                ratios().time(&format!("{file}_open_read_close"), iters, || {
                    open_read_close(&cpath, &mut buf)
                })
            })
        });
    }
    let process_status = open("/proc/self/status");
    g.bench_function("process_status_kept", |b| {
        b.iter_custom(|iters| {
            ratios().time("process_status_kept", iters, || {
                pread(&process_status, &mut buf)
            })
        })
    });
    let task_dir = open("/proc/self/task");
    g.bench_function("task_count_fstat", |b| {
        b.iter_custom(|iters| ratios().time("task_count_fstat", iters, || task_count(&task_dir)))
    });
    {
        let _parked = ParkedThreads::spawn(LISTED_THREADS);
        let dir = open("/proc/self/task");
        let mut dents = vec![0u8; 32 * 1024];
        g.bench_function("list_tasks", |b| {
            b.iter_custom(|iters| ratios().time("list_tasks", iters, || list(&dir, &mut dents)))
        });
        let threads = std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count());
        LISTED.get_or_init(|| threads);
    }
    let sip: HashMap<u32, u64> = (0..MAP_THREADS).map(|t| (1000 + t * 7, 0)).collect();
    let mul: HashMap<u32, u64, BuildHasherDefault<MulHasher>> =
        (0..MAP_THREADS).map(|t| (1000 + t * 7, 0)).collect();
    g.bench_function("tid_lookup_siphash", |b| {
        b.iter_custom(|iters| {
            ratios().time("tid_lookup_siphash", iters, || {
                (0..MAP_THREADS)
                    .filter_map(|t| sip.get(&(1000 + t * 7)))
                    .count()
            })
        })
    });
    g.bench_function("tid_lookup_multiplicative", |b| {
        b.iter_custom(|iters| {
            ratios().time("tid_lookup_multiplicative", iters, || {
                (0..MAP_THREADS)
                    .filter_map(|t| mul.get(&(1000 + t * 7)))
                    .count()
            })
        })
    });
    g.finish();
}

/// A named read for `cold_reads`.
type ColdRead<'a> = (&'static str, Box<dyn FnMut() -> u64 + 'a>);

/// Each read once after a 1 s gap, `COLD_ROUNDS` times; median ns.
fn cold_reads() -> Vec<(&'static str, f64)> {
    let tid = parked_tid();
    let mut buf = vec![0u8; 4096];
    let schedstat = open(&format!("/proc/self/task/{tid}/schedstat"));
    let status = open(&format!("/proc/self/task/{tid}/status"));
    let process_status = open("/proc/self/status");
    let task_dir = open("/proc/self/task");
    let mut reads: Vec<ColdRead<'_>> = vec![
        ("thread CPU clock", Box::new(|| thread_cpu_ns(tid))),
        (
            "schedstat: pread on a kept descriptor",
            Box::new(|| pread(&schedstat, &mut [0u8; 256]) as u64),
        ),
        (
            "status: pread on a kept descriptor",
            Box::new(|| pread(&status, &mut [0u8; 4096]) as u64),
        ),
        (
            "process status: pread on a kept descriptor",
            Box::new(|| pread(&process_status, &mut buf) as u64),
        ),
        (
            "thread count: fstat of the task directory",
            Box::new(|| task_count(&task_dir)),
        ),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); reads.len()];
    for _ in 0..COLD_ROUNDS {
        for (i, (_, read)) in reads.iter_mut().enumerate() {
            std::thread::sleep(COLD_GAP);
            let t0 = Instant::now();
            std::hint::black_box(read());
            times[i].push(t0.elapsed().as_nanos() as f64);
        }
    }
    reads
        .iter()
        .zip(times)
        .map(|((name, _), mut t)| {
            t.sort_by(|a, b| a.total_cmp(b));
            (*name, t[t.len() / 2])
        })
        .collect()
}

/// Threads in the process while listing.
static LISTED: OnceLock<usize> = OnceLock::new();

fn report() {
    let Some(base) = ratios().median("instant_now") else {
        return;
    };
    let row = |what: &str, ns: f64| {
        println!("{what:<48} {ns:>10.0} {:>9.1}x", ns / base);
    };
    println!("\n== per-thread reads (median ns) and ratios to Instant::now(), same run ==");
    println!("{:<48} {:>10} {:>10}", "what", "ns", "ratio");
    row("Instant::now() (baseline)", base);
    if let Some(v) = ratios().median("thread_cpu_clock") {
        row("thread CPU clock (clock_gettime)", v);
    }
    for file in ["schedstat", "status", "stat"] {
        if let Some(v) = ratios().median(&format!("{file}_kept")) {
            row(&format!("{file}: pread on a kept descriptor"), v);
        }
        if let Some(v) = ratios().median(&format!("{file}_open_read_close")) {
            row(&format!("{file}: open-read-close"), v);
        }
    }
    if let Some(v) = ratios().median("process_status_kept") {
        row("process status: pread on a kept descriptor", v);
    }
    if let Some(v) = ratios().median("task_count_fstat") {
        row("thread count: fstat of the task directory", v);
    }
    if let (Some(v), Some(&n)) = (ratios().median("list_tasks"), LISTED.get()) {
        row(
            &format!("listing /proc/self/task, per thread ({n} threads)"),
            v / n as f64,
        );
    }
    let per_lookup = |name: &str| ratios().median(name).map(|v| v / f64::from(MAP_THREADS));
    if let (Some(s), Some(m)) = (
        per_lookup("tid_lookup_siphash"),
        per_lookup("tid_lookup_multiplicative"),
    ) {
        row("TID map lookup, SipHash", s);
        row("TID map lookup, multiplicative hash", m);
    }
    println!(
        "\n== after a {} s gap (cold), one read, median of {COLD_ROUNDS} ==",
        COLD_GAP.as_secs()
    );
    for (what, ns) in cold_reads() {
        row(what, ns);
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    report();
}
