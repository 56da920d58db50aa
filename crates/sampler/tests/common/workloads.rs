//! Real workloads for findings tests, each with a healthy twin.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use wakemeter::{Sampler, SamplerBuilder, Thresholds};

/// Serializes the workload tests of one binary: each spins, sleeps or
/// contends on purpose and samples the whole process, so two at once would
/// see each other's threads and share the two cores a CI machine may have.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Thresholds with short windows so tests finish in seconds.
pub fn short_thresholds() -> Thresholds {
    Thresholds::default()
        .with_window(Duration::from_secs(2))
        .with_min_window(Duration::from_secs(1))
        .with_cpu_window(Duration::from_secs(2))
        .with_cpu_min_window(Duration::from_secs(1))
        .with_wakeups_window(Duration::from_secs(2))
        .with_wakeups_min_window(Duration::from_secs(1))
        .with_memory_min_window(Duration::from_secs(1))
}

pub fn sampler(t: Thresholds) -> Sampler {
    SamplerBuilder::new()
        .with_interval(Duration::from_millis(100))
        .with_switch_split_every(1)
        .with_thresholds(t)
        .build()
        .expect("sampler")
}

/// Samples in the background for at least `secs` and at least as many
/// samples as [`sampler`]'s 100 ms period gives in `secs`, and returns
/// the findings. Waits for the samples, not for a stretch of time alone:
/// on a loaded machine a sampler may store a fraction of its samples in
/// that time, too few for the rules' windows (a test once took 123 s
/// where it takes 25).
pub fn findings_after(s: &Sampler, secs: f64) -> Vec<wakemeter::Finding> {
    let needed = (secs / 0.1).ceil() as u64;
    let start = std::time::Instant::now();
    let g = s.start().expect("start");
    let (mut seq, mut stored) = (None, 0u64);
    while stored < needed || start.elapsed() < Duration::from_secs_f64(secs) {
        match s.wait_for_sample(seq, Duration::from_secs(180)) {
            wakemeter::SampleWait::Stored { seq: n } => {
                stored += n - seq.map_or(0, |p| p + 1) + 1;
                seq = Some(n);
            }
            other => panic!("no sample within 180 s: {other:?}"),
        }
    }
    drop(g);
    s.findings()
}

/// A named background thread running `body` until the returned handle drops.
pub struct Worker {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
    pub tid: u64,
}

impl Worker {
    pub fn spawn(name: &str, body: impl FnOnce(Arc<AtomicBool>) + Send + 'static) -> Worker {
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicU64::new(0));
        let (s2, t2) = (stop.clone(), tid.clone());
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                t2.store(super::gettid(), Ordering::SeqCst);
                body(s2)
            })
            .unwrap();
        while tid.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        Worker {
            stop,
            handle: Some(handle),
            tid: tid.load(Ordering::SeqCst),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}

pub fn stopped(s: &AtomicBool) -> bool {
    s.load(Ordering::Relaxed)
}

pub fn pipe() -> (i32, i32) {
    let mut fds = [0i32; 2];
    // SAFETY: valid out-array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

pub fn poll_in(fd: i32, timeout_ms: i32) -> usize {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    (unsafe { libc::poll(&mut p, 1, timeout_ms) }).max(0) as usize
}

pub fn drain(fd: i32) {
    let mut b = [0u8; 64];
    // SAFETY: valid buffer.
    unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
}

pub fn write_byte(fd: i32) {
    // SAFETY: valid one-byte buffer.
    unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) };
}

/// An efficient loop: blocks in poll (1 s timeout) on a pipe written every 200 ms.
pub fn efficient_loop(s: &Sampler, name: &str) -> (Worker, Worker) {
    let (r, w) = pipe();
    let mut probe = s.loop_probe(name).unwrap();
    let server = Worker::spawn(name, move |stop| {
        while !stopped(&stop) {
            probe.before_wait(Some(Duration::from_secs(1)));
            let n = poll_in(r, 1000);
            probe.after_wait(n);
            if n > 0 {
                drain(r);
            }
        }
    });
    let client = Worker::spawn("client", move |stop| {
        while !stopped(&stop) {
            std::thread::sleep(Duration::from_millis(200));
            write_byte(w);
        }
    });
    (server, client)
}
