//! Probe hot paths against a clock baseline measured in the same run, and
//! the findings engine over a full default history.
//!
//! Run: `cargo bench -p wakemeter-benches --bench probes`

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::Criterion;
use wakemeter::{SamplerBuilder, Thresholds};
use wakemeter_benches::{ParkedThreads, Ratios, median};

fn ratios() -> &'static Ratios {
    static R: OnceLock<Ratios> = OnceLock::new();
    R.get_or_init(Ratios::default)
}

fn bench(c: &mut Criterion) {
    let sampler = SamplerBuilder::new().build().expect("sampler");
    let mut g = c.benchmark_group("probe");
    g.sample_size(50)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    g.bench_function("instant_now_x2", |b| {
        b.iter_custom(|iters| {
            ratios().time("instant_now_x2", iters, || (Instant::now(), Instant::now()))
        })
    });
    let clock = quanta::Clock::new();
    g.bench_function("quanta_now_x2", |b| {
        b.iter_custom(|iters| ratios().time("quanta_now_x2", iters, || (clock.now(), clock.now())))
    });
    let mut probe = sampler.loop_probe("bench").expect("probe");
    g.bench_function("loop_probe_wait_pair", |b| {
        b.iter_custom(|iters| {
            ratios().time("loop_probe_wait_pair", iters, || {
                probe.before_wait(Some(Duration::from_millis(1)));
                probe.after_wait(0);
            })
        })
    });
    let mut sleep = sampler.sleep_probe("bench").expect("probe");
    g.bench_function("sleep_probe_begin_end", |b| {
        b.iter_custom(|iters| {
            ratios().time("sleep_probe_begin_end", iters, || {
                sleep.begin(Duration::from_millis(1));
                sleep.end();
            })
        })
    });
    g.finish();

    // 300 snapshots of ~257 threads: the default history of a busy process.
    let _parked = ParkedThreads::spawn(256);
    let t = Thresholds::default().with_min_window(Duration::from_nanos(1));
    let s = SamplerBuilder::new()
        .with_thresholds(t.clone())
        .build()
        .expect("sampler");
    let mut loops: Vec<_> = (0..8)
        .map(|i| s.loop_probe(&format!("loop-{i}")).expect("probe"))
        .collect();
    for _ in 0..300 {
        for l in &mut loops {
            l.before_wait(Some(Duration::ZERO));
            l.after_wait(0);
        }
        let _ = s.sample();
    }
    let mut g = c.benchmark_group("findings");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    g.bench_function("300x257_threads", |b| {
        // `findings()` is computed once per snapshot and then copied;
        // `findings_with` computes every time, which is what this measures.
        b.iter_custom(|iters| {
            ratios().time("findings", iters, || {
                s.findings_with(&t).map_or(0, |f| f.len())
            })
        })
    });
    g.finish();
}

/// Ratios measured in alternating batches (A, B, A, B, ...) of `n` calls,
/// median over `rounds`: both sides see the same load, which the
/// sequential criterion groups above do not on a noisy 2-vCPU VM.
fn interleaved(rounds: usize, n: u32, mut a: impl FnMut(), mut b: impl FnMut()) -> (f64, f64, f64) {
    let (mut ta, mut tb, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..n {
            a();
        }
        let x = t.elapsed().as_nanos() as f64 / f64::from(n);
        let t = Instant::now();
        for _ in 0..n {
            b();
        }
        let y = t.elapsed().as_nanos() as f64 / f64::from(n);
        ta.push(x);
        tb.push(y);
        r.push(y / x);
    }
    (median(&mut ta), median(&mut tb), median(&mut r))
}

fn interleaved_report() {
    let sampler = SamplerBuilder::new().build().expect("sampler");
    let mut probe = sampler.loop_probe("interleaved").expect("probe");
    let mut sleep = sampler.sleep_probe("interleaved").expect("probe");
    let mut sampled = sampler.sleep_probe("interleaved-8").expect("probe");
    sampled.set_cpu_every(std::num::NonZeroU32::new(8).expect("8"));
    let base = || {
        std::hint::black_box((Instant::now(), Instant::now()));
    };
    // A sample calibrates the probes' counter clock (x86_64 Linux with a
    // trusted TSC, at least 1 s after the first sampler was built; the
    // criterion part above took longer). `WAKEMETER_PROBE_CLOCK=os` keeps
    // the OS clock, for the comparison.
    let _ = sampler.sample();
    let clock = match std::env::var("WAKEMETER_PROBE_CLOCK") {
        Ok(v) if v == "os" => "OS clock (WAKEMETER_PROBE_CLOCK=os)",
        _ => "counter clock where safe, else the OS clock",
    };
    println!(
        "\n== interleaved batches, median of 101 rounds (ns per call; ratio per round); probes: {clock} =="
    );
    let (a, b, r) = interleaved(101, 20_000, base, || {
        probe.before_wait(Some(Duration::from_millis(1)));
        probe.after_wait(0);
    });
    println!("2x Instant::now {a:>7.1}  loop wait pair {b:>7.1}  ratio {r:.2}x (target <= 1.0)");
    let (a, b, r) = interleaved(101, 2_000, base, || {
        sleep.begin(Duration::from_millis(1));
        sleep.end();
    });
    println!("2x Instant::now {a:>7.1}  sleep begin+end {b:>7.1}  ratio {r:.2}x (target <= 1 µs)");
    let (a, b, r) = interleaved(101, 8_000, base, || {
        sampled.begin(Duration::from_millis(1));
        sampled.end();
    });
    println!(
        "2x Instant::now {a:>7.1}  sleep begin+end, CPU every 8th {b:>7.1}  ratio {r:.2}x (target <= 200 ns)"
    );
}

fn report() {
    let m = |n: &str| ratios().median(n).unwrap_or(f64::NAN);
    let base = m("instant_now_x2");
    println!("\n== probe hot paths (median ns per call, ratio to 2x Instant::now(), same run) ==");
    for n in [
        "instant_now_x2",
        "quanta_now_x2",
        "loop_probe_wait_pair",
        "sleep_probe_begin_end",
    ] {
        println!("{n:<24} {:>8.1} ns  {:>5.2}x", m(n), m(n) / base);
    }
    println!(
        "findings over 300 snapshots x 257 threads: {:.0} µs",
        m("findings") / 1e3
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    report();
    interleaved_report();
}
