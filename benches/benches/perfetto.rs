//! What the Perfetto trace writer adds to the sampler, at 1 Hz and 256
//! threads whose counters all change every interval (the writer's worst
//! case: an unchanged counter is not written again), beside the JSON
//! report of the same snapshots, in the same run.
//!
//! Each round: one snapshot (`Sampler::sample`), then the findings of
//! that snapshot (`Sampler::findings`: computed once per snapshot and
//! kept for every reader, so timed on their own, before both consumers),
//! then the writer's poll (its interval + encoding + one write to a
//! file), then the JSON report (`serde_json` of `Sampler::report`), each
//! timed with the calling thread's CPU clock. The encoding alone is timed
//! too, on an encoder of its own fed the same interval. Every other round
//! times the interval as the poll computes it, cold (the first reader of
//! a new snapshot), before an untimed poll: the poll's largest part,
//! which a warm second computation understates. Prints the medians, the
//! ratios to the sampler's own cost, and the trace's bytes per interval
//! with what an hour at 1 Hz makes.
//!
//! Until 2026-11-27 the poll ran first and paid for the findings, which
//! the JSON report then found computed: the poll's ratio mixed the
//! writer's own cost with a diagnosis every reader of that snapshot
//! shares, and the report's left it out; and the interval was timed only
//! warm (computed again after the poll).
//!
//! `cargo bench -p wakemeter-benches --bench perfetto` (`-- --rounds N`,
//! default 20; `--hz H`, default 1).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wakemeter::SamplerBuilder;
use wakemeter_perfetto::{PerfettoFile, TraceConfig, TraceEncoder};

const THREADS: usize = 256;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let t = thread_cpu_ns();
    let out = f();
    (out, thread_cpu_ns().saturating_sub(t))
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rounds = arg("--rounds", 20).max(3);
    let hz = arg("--hz", 1).clamp(1, 100);
    let stop = Arc::new(AtomicBool::new(false));
    // 256 threads that each wake every 20 ms and spin a little, so that
    // CPU, switches and run-queue wait change in every interval.
    let workers: Vec<_> = (0..THREADS)
        .map(|n| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("worker-{n}"))
                .spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for i in 0..(2000 + n as u64 * 10) {
                            x = x.wrapping_mul(31).wrapping_add(i);
                        }
                        std::hint::black_box(x);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                })
                .expect("spawn")
        })
        .collect();
    let sampler = SamplerBuilder::new()
        .with_interval(Duration::from_millis(1000 / hz))
        .build()
        .expect("sampler");
    let dir = std::env::temp_dir().join(format!("wakemeter-bench-perfetto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("bench.perfetto-trace");
    let file = PerfettoFile::create(&path, TraceConfig::default()).expect("trace");
    sampler.sample().expect("first sample");
    let mut trace = file.add(&sampler).expect("add");
    let mut encoder = TraceEncoder::new(sampler.target_identity(), 99);
    let mut scratch = Vec::new();
    encoder.header(&mut scratch);
    let (mut sample, mut poll, mut encode, mut json) = (vec![], vec![], vec![], vec![]);
    let (mut interval, mut diagnose, mut encode_findings) = (vec![], vec![], vec![]);
    let (mut findings_cached, mut interval_cold) = (vec![], vec![]);
    let mut bytes = vec![];
    let mut prev = sampler.latest().map(|s| s.seq).unwrap_or(0);
    let mut threads_seen = 0;
    for round in 0..rounds {
        std::thread::sleep(Duration::from_millis(1000 / hz));
        let before = file.status().bytes_written;
        let (seq, t) = timed(|| sampler.sample().expect("sample"));
        sample.push(t);
        let (findings, t) = timed(|| sampler.findings());
        findings_cached.push(t);
        if round % 2 == 1 {
            let t = timed(|| sampler.interval_between(prev, seq).expect("interval")).1;
            interval_cold.push(t);
            trace.poll();
        } else {
            poll.push(timed(|| trace.poll()).1);
        }
        bytes.push(file.status().bytes_written - before);
        json.push(
            timed(|| {
                let r = sampler.report();
                serde_json::to_string(&r).expect("json");
            })
            .1,
        );
        let (i, t) = timed(|| sampler.interval_between(prev, seq).expect("interval"));
        interval.push(t);
        // As before 2026-11-27, so that the encoding is timed after the
        // same work as then: the findings again, uncached.
        diagnose.push(timed(|| sampler.findings_with(sampler.thresholds())).1);
        threads_seen = i.threads.len();
        scratch.clear();
        let counters = timed(|| encoder.interval(&i, &mut scratch)).1;
        let slices = timed(|| encoder.findings(i.end_monotonic_ns, &findings, &mut scratch)).1;
        encode.push(counters + slices);
        encode_findings.push(slices);
        prev = seq;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    drop(trace);
    let (s, p, e, j) = (
        median(&mut sample),
        median(&mut poll),
        median(&mut encode),
        median(&mut json),
    );
    // The first interval describes every track: leave it out of the
    // steady-state size.
    let steady: Vec<u64> = bytes.iter().skip(1).copied().collect();
    let per_interval = steady.iter().sum::<u64>() / steady.len().max(1) as u64;
    println!(
        "perfetto writer, {threads_seen} threads, {hz} Hz, {rounds} rounds (medians of thread CPU time per interval):"
    );
    println!(
        "  sampler (one snapshot)         {:>9.1} us",
        s as f64 / 1e3
    );
    let f = median(&mut findings_cached);
    println!(
        "  findings (once per snapshot, shared by every reader) {:>9.1} us   ratio to sampler {:.3}",
        f as f64 / 1e3,
        f as f64 / s as f64
    );
    println!(
        "  JSON report (report + serde)   {:>9.1} us   ratio to sampler {:.3}",
        j as f64 / 1e3,
        j as f64 / s as f64
    );
    println!(
        "  trace poll (interval+encode+write) {:>9.1} us   ratio to sampler {:.3}",
        p as f64 / 1e3,
        p as f64 / s as f64
    );
    let (ic, iv, dg) = (
        median(&mut interval_cold),
        median(&mut interval),
        median(&mut diagnose),
    );
    println!(
        "  … of which its interval (interval_between, cold) {:>9.1} us   ratio to sampler {:.3}",
        ic as f64 / 1e3,
        ic as f64 / s as f64
    );
    println!(
        "  (again warm: the interval {:.1} us; the findings uncached, findings_with, {:.1} us)",
        iv as f64 / 1e3,
        dg as f64 / 1e3
    );
    println!(
        "  trace encoding alone           {:>9.1} us   ratio to sampler {:.3}",
        e as f64 / 1e3,
        e as f64 / s as f64
    );
    println!(
        "  … of which the finding slices    {:>9.1} us",
        median(&mut encode_findings) as f64 / 1e3
    );
    println!(
        "  trace size: {per_interval} bytes per interval (first interval, with the track descriptors: {} bytes); an hour at {hz} Hz: {:.1} MB",
        bytes.first().copied().unwrap_or(0),
        per_interval as f64 * 3600.0 * hz as f64 / 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
}
