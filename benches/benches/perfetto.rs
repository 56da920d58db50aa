//! What the Perfetto trace writer adds to the sampler, at 1 Hz and 256
//! threads whose counters all change every interval (the writer's worst
//! case: an unchanged counter is not written again), beside the JSON
//! report of the same snapshots, in the same run.
//!
//! Each round: one snapshot (`Sampler::sample`), then the findings of
//! that snapshot (`Sampler::findings`: computed once per snapshot and
//! kept for every reader, so timed on their own, before the consumers),
//! then the writer's poll, then the JSON report (`serde_json` of
//! `Sampler::report`), each timed with the calling thread's CPU clock.
//! The poll is timed in two settings, in alternate rounds:
//!
//! - the only follower: the poll is the first to ask for the interval
//!   between the two newest snapshots, and computes it;
//! - beside another follower (a metrics exporter, a recording, a
//!   listener): that one asks first (`Sampler::latest_interval_shared`,
//!   timed: the interval cold), and the poll takes the interval the
//!   sampler keeps for every follower.
//!
//! The writer buffers its records and writes them every 64 KiB or 5 s
//! (`TraceConfig`), so most polls write nothing and some write several
//! intervals at once: the mean poll is its cost per interval, the median
//! a poll that did not write. A write carries the intervals of both
//! settings but lands on the rounds of one: with one write every five or
//! six rounds, all of them may fall in one setting (its mean then carries
//! the writes of twice its intervals, the other's none). So each
//! setting's MEAN is also printed with the writes spread over every
//! interval: the mean of its polls that did not write, plus each write's
//! excess over that mean (of its own setting), summed over the run and
//! divided by the intervals. A second trace, writing at every poll (the
//! writer before buffering), is polled after each round's timed poll,
//! with the interval shared, for its write's cost. The encoding alone is
//! timed too, on an encoder of its own fed the same interval. Prints the
//! medians (and the polls' means), the ratios to the snapshot, and the
//! trace's bytes per interval with what an hour at 1 Hz makes.
//!
//! Until 2026-11-27 the poll ran first and paid for the findings, which
//! the JSON report then found computed, and the interval was timed only
//! warm; until the interval was shared and the writes buffered (the same
//! day), the poll computed its own interval and wrote every interval
//! with a `pwrite` of its own. The encoding alone is timed on sequence 1
//! (the file's first process, whose track uuids are short) since the
//! uuids were shortened (the same day); it was sequence 99 before.
//!
//! `cargo bench -p wakemeter-benches --bench perfetto` (`-- --rounds N`,
//! default 30; `--hz H`, default 1).

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

fn mean(v: &[u64]) -> u64 {
    v.iter().sum::<u64>() / v.len().max(1) as u64
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Prints one line: the figure in µs and its ratio to the snapshot.
fn line(what: &str, ns: u64, snapshot: u64) {
    println!(
        "  {what:<58} {:>8.1} us   ratio to sampler {:.3}",
        ns as f64 / 1e3,
        ns as f64 / snapshot as f64
    );
}

fn main() {
    let rounds = arg("--rounds", 30).max(4);
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
    // The writer as it was before buffering: a write at every poll.
    let unbuffered = PerfettoFile::create(
        dir.join("unbuffered.perfetto-trace"),
        TraceConfig::default()
            .with_flush_bytes(0)
            .with_flush_every(Duration::ZERO),
    )
    .expect("trace");
    sampler.sample().expect("first sample");
    let mut trace = file.add(&sampler).expect("add");
    let mut trace_unbuffered = unbuffered.add(&sampler).expect("add");
    // Sequence 1, as the file's first process: its track uuids are the
    // file's (a sequence from 8 on would make them wider).
    let mut encoder = TraceEncoder::new(sampler.target_identity(), 1);
    let mut scratch = Vec::new();
    encoder.header(&mut scratch);
    let (mut sample, mut findings_cached, mut json) = (vec![], vec![], vec![]);
    let (mut poll_alone, mut poll_beside, mut poll_wrote) = (vec![], vec![], vec![]);
    // Per poll: its setting (beside another follower or not), its time,
    // whether it wrote the buffer.
    let mut polls: Vec<(bool, u64, bool)> = vec![];
    let (mut interval_cold, mut poll_unbuffered) = (vec![], vec![]);
    let (mut encode, mut encode_findings, mut diagnose) = (vec![], vec![], vec![]);
    let mut bytes = vec![];
    let mut threads_seen = 0;
    for round in 0..rounds {
        std::thread::sleep(Duration::from_millis(1000 / hz));
        let before = file.status();
        sample.push(timed(|| sampler.sample().expect("sample")).1);
        let (findings, t) = timed(|| sampler.findings());
        findings_cached.push(t);
        let t = if round % 2 == 0 {
            let t = timed(|| trace.poll()).1;
            poll_alone.push(t);
            t
        } else {
            let (other, t) = timed(|| sampler.latest_interval_shared().expect("interval"));
            interval_cold.push(t);
            let t = timed(|| trace.poll()).1;
            poll_beside.push(t);
            drop(other);
            t
        };
        let after = file.status();
        let wrote = after.bytes_written > before.bytes_written;
        if wrote {
            poll_wrote.push(t);
        }
        polls.push((round % 2 == 1, t, wrote));
        bytes.push(
            (after.bytes_written + after.bytes_buffered)
                - (before.bytes_written + before.bytes_buffered),
        );
        poll_unbuffered.push(timed(|| trace_unbuffered.poll()).1);
        json.push(
            timed(|| {
                let r = sampler.report();
                serde_json::to_string(&r).expect("json");
            })
            .1,
        );
        let i = sampler.latest_interval_shared().expect("interval");
        // As before 2026-11-27, so that the encoding is timed after the
        // same work as then: the findings again, uncached.
        diagnose.push(timed(|| sampler.findings_with(sampler.thresholds())).1);
        threads_seen = i.threads.len();
        scratch.clear();
        let counters = timed(|| encoder.interval(&i, &mut scratch)).1;
        let slices = timed(|| encoder.findings(i.end_monotonic_ns, &findings, &mut scratch)).1;
        encode.push(counters + slices);
        encode_findings.push(slices);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    drop(trace);
    drop(trace_unbuffered);
    let writes = poll_wrote.len();
    // The writes spread over every interval: a write carries the records
    // of the intervals of both settings, whichever setting's round it
    // lands on. Each write's excess over the mean poll of its setting that
    // did not write, summed and divided by the intervals, on top of that
    // mean.
    let no_write_mean = |beside: bool| {
        let v: Vec<u64> = polls
            .iter()
            .filter(|p| p.0 == beside && !p.2)
            .map(|p| p.1)
            .collect();
        mean(&v)
    };
    let (alone_base, beside_base) = (no_write_mean(false), no_write_mean(true));
    let write_excess: u64 = polls
        .iter()
        .filter(|p| p.2)
        .map(|p| {
            p.1.saturating_sub(if p.0 { beside_base } else { alone_base })
        })
        .sum();
    let write_share = write_excess / polls.len().max(1) as u64;
    let (alone_mean, beside_mean) = (mean(&poll_alone), mean(&poll_beside));
    let s = median(&mut sample);
    // The first interval describes every track: leave it out of the
    // steady-state size.
    let steady: Vec<u64> = bytes.iter().skip(1).copied().collect();
    let per_interval = steady.iter().sum::<u64>() / steady.len().max(1) as u64;
    println!(
        "perfetto writer, {threads_seen} threads, {hz} Hz, {rounds} rounds (medians of thread CPU time per interval, unless said):"
    );
    println!("  sampler (one snapshot)  {:>8.1} us", s as f64 / 1e3);
    line(
        "findings (once per snapshot, shared by every reader)",
        median(&mut findings_cached),
        s,
    );
    line("JSON report (report + serde)", median(&mut json), s);
    line(
        "trace poll, the only follower: MEAN (per interval)",
        alone_mean,
        s,
    );
    line(
        "  … median (a poll that did not write)",
        median(&mut poll_alone),
        s,
    );
    line(
        "trace poll beside another follower: MEAN (per interval)",
        beside_mean,
        s,
    );
    line(
        "  … median (a poll that did not write)",
        median(&mut poll_beside),
        s,
    );
    line(
        "the shared interval, cold (paid by the first follower)",
        median(&mut interval_cold),
        s,
    );
    line(
        "trace poll beside another follower: MEAN, writes spread over every interval",
        beside_base + write_share,
        s,
    );
    line(
        "trace poll, the only follower: MEAN, writes spread over every interval",
        alone_base + write_share,
        s,
    );
    line(
        &format!(
            "polls that wrote the buffer ({writes} of {rounds}; {} beside another follower): median",
            polls.iter().filter(|p| p.0 && p.2).count()
        ),
        median(&mut poll_wrote),
        s,
    );
    line(
        "unbuffered poll (a pwrite each), interval shared",
        median(&mut poll_unbuffered),
        s,
    );
    line("trace encoding alone", median(&mut encode), s);
    println!(
        "  … of which the finding slices  {:>8.1} us  (the findings uncached, findings_with, {:.1} us)",
        median(&mut encode_findings) as f64 / 1e3,
        median(&mut diagnose) as f64 / 1e3
    );
    println!(
        "  trace size: {per_interval} bytes per interval (first interval, with the track descriptors: {} bytes); an hour at {hz} Hz: {:.1} MB",
        bytes.first().copied().unwrap_or(0),
        per_interval as f64 * 3600.0 * hz as f64 / 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
}
