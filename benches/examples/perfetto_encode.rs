//! The Perfetto trace encoder alone, for profilers: the intervals of a
//! sampler of busy threads are taken first, then encoded one after the
//! other by one encoder, as the trace writer does at each snapshot.
//! Between two intervals a buffer larger than the last-level cache is
//! written, so that the encoder's state is as cold as it is a second after
//! the last snapshot (`warm` leaves that out); the interval is copied
//! after it, so that it is in cache, as one just computed is.
//! `valgrind --tool=callgrind --toggle-collect='*perfetto_encode::encode*'`
//! counts the instructions of the encoding only.
//!
//! Usage: `perfetto_encode [THREADS] [INTERVALS] [GAP_MS] [cold|warm]`
//! (defaults: 257 threads in all, 30 intervals, 100 ms apart, cold).
//! Prints the median CPU time of one interval's encoding, in µs, and the
//! bytes it wrote.

use std::time::Duration;

use wakemeter::{Interval, SamplerBuilder};
use wakemeter_benches::{ActiveThreads, median, thread_cpu_ns};
use wakemeter_perfetto::TraceEncoder;

/// One interval's encoding, as the writer's poll does it.
#[inline(never)]
fn encode(e: &mut TraceEncoder, i: &Interval, out: &mut Vec<u8>) {
    e.interval(i, out);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let threads: usize = arg(1, "257").parse().unwrap_or(257);
    let n: usize = arg(2, "30").parse().unwrap_or(30).max(2);
    let gap = Duration::from_millis(arg(3, "100").parse().unwrap_or(100));
    let cold = arg(4, "cold") != "warm";
    let workers = ActiveThreads::spawn(threads.saturating_sub(1));
    let s = SamplerBuilder::new().build().expect("sampler");
    s.sample().expect("first sample");
    let intervals: Vec<Interval> = (0..n)
        .map(|_| {
            std::thread::sleep(gap);
            s.sample().expect("sample");
            s.latest_interval().expect("interval")
        })
        .collect();
    drop(workers);
    let mut encoder = TraceEncoder::new(s.target_identity(), 1);
    let mut out = Vec::new();
    encoder.header(&mut out);
    let mut thrash = vec![0u8; 64 << 20];
    let (mut times, mut bytes) = (Vec::new(), Vec::new());
    for (k, i) in intervals.iter().enumerate() {
        if cold {
            for (n, b) in thrash.iter_mut().enumerate().step_by(64) {
                *b = b.wrapping_add(n as u8);
            }
            std::hint::black_box(&thrash);
        }
        // As the writer finds it: just computed (by it or another
        // follower), so in cache, while the encoder's state is not.
        let i = i.clone();
        out.clear();
        let t = thread_cpu_ns();
        encode(&mut encoder, &i, &mut out);
        let t = thread_cpu_ns() - t;
        // The first interval describes every track.
        if k > 0 {
            times.push(t as f64 / 1e3);
            bytes.push(out.len() as f64);
        }
    }
    println!(
        "encoding, {} threads, {} intervals ({}): median {:.1} us, {:.0} bytes per interval",
        intervals[0].threads.len(),
        times.len(),
        if cold { "cold" } else { "warm" },
        median(&mut times),
        median(&mut bytes),
    );
}
