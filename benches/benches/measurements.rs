//! wakemeter-criterion: the measurements on textbook cases whose counts are
//! known, on wakemeter itself, and what each measurement costs per
//! `start`/`end` pair against a bare `Instant` pair measured in the same run.
//!
//! `cargo bench -p wakemeter-benches --bench measurements`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::measurement::Measurement;
use criterion::{Criterion, criterion_group};
use wakemeter_criterion::{
    ContextSwitches, PerfCounter, PerfEvent, ProcessCpuTime, ThreadCpuTime, Wakeups,
};

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[cfg(target_os = "linux")]
fn ready_epoll() -> impl FnMut() {
    // SAFETY: plain syscalls creating fds owned by the returned closure's
    // process for the bench's lifetime; pointers are to live locals.
    let ep = unsafe {
        let efd = libc::eventfd(1, libc::EFD_NONBLOCK);
        let ep = libc::epoll_create1(0);
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 1,
        };
        libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, efd, &mut ev);
        ep
    };
    move || {
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 1];
        // SAFETY: `out` is a live buffer of one event; `ep` stays open.
        black_box(unsafe { libc::epoll_wait(ep, out.as_mut_ptr(), 1, -1) });
    }
}

fn switches(c: &mut Criterion<ContextSwitches>) {
    let mut g = c.benchmark_group("voluntary switches");
    g.sample_size(10).warm_up_time(Duration::from_millis(200));
    g.measurement_time(Duration::from_secs(1));
    g.bench_function("thread::sleep(1 ms)", |b| {
        b.iter(|| std::thread::sleep(Duration::from_millis(1)))
    });
    g.bench_function("spin 20 µs", |b| {
        b.iter(|| spin(Duration::from_micros(20)))
    });
    #[cfg(target_os = "linux")]
    {
        let mut f = ready_epoll();
        g.bench_function("epoll_wait on a ready fd", |b| b.iter(&mut f));
    }
    g.finish();
}

fn cpu(c: &mut Criterion<ThreadCpuTime>) {
    let sampler = wakemeter::Sampler::new().ok();
    let mut g = c.benchmark_group("thread cpu");
    g.sample_size(10).warm_up_time(Duration::from_millis(200));
    g.measurement_time(Duration::from_secs(1));
    g.bench_function("thread::sleep(1 ms)", |b| {
        b.iter(|| std::thread::sleep(Duration::from_millis(1)))
    });
    if let Some(s) = sampler {
        g.bench_function("wakemeter sample_now", |b| {
            b.iter(|| black_box(s.sample_now().ok()))
        });
        let mut probe = s.loop_probe("bench-loop").ok();
        g.bench_function("LoopProbe before+after_wait", |b| {
            b.iter(|| {
                if let Some(p) = probe.as_mut() {
                    p.before_wait(Some(Duration::ZERO));
                    p.after_wait(0);
                }
            })
        });
    }
    g.finish();
}

/// Median ns of one `f()` over `rounds` batches of `n` calls.
fn median_ns(n: u32, rounds: usize, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pair<M: Measurement>(m: &M) -> impl FnMut() + '_ {
    move || {
        let s = m.start();
        black_box(m.end(s));
    }
}

/// Counts per iteration of the textbook cases, and the overhead table.
fn report() {
    let n = 200u64;
    let per = |m: &ContextSwitches, f: &mut dyn FnMut()| {
        let s = m.start();
        for _ in 0..n {
            f();
        }
        m.end(s) as f64 / n as f64
    };
    let vol = ContextSwitches::voluntary();
    println!("\nper-iteration counts (thread's voluntary switches, {n} iterations):");
    println!(
        "  thread::sleep(1 ms)       {:.3}",
        per(&vol, &mut || std::thread::sleep(Duration::from_millis(1)))
    );
    println!(
        "  spin 20 µs                {:.3}",
        per(&vol, &mut || spin(Duration::from_micros(20)))
    );
    #[cfg(target_os = "linux")]
    {
        let mut f = ready_epoll();
        println!("  epoll_wait on a ready fd  {:.3}", per(&vol, &mut f));
    }

    let (batch, rounds) = (2000, 51);
    let bare = median_ns(batch, rounds, || {
        let t = Instant::now();
        black_box(t.elapsed());
    });
    println!("\noverhead of one start()+end() pair (median of {rounds} x {batch}):");
    println!(
        "  {:<34} {:>8.1} ns  1.00x",
        "Instant::now + elapsed (bare)", bare
    );
    let row = |name: &str, ns: f64| println!("  {name:<34} {ns:>8.1} ns  {:.2}x", ns / bare);
    row(
        "ThreadCpuTime",
        median_ns(batch, rounds, pair(&ThreadCpuTime)),
    );
    row(
        "ProcessCpuTime",
        median_ns(batch, rounds, pair(&ProcessCpuTime)),
    );
    row(
        "ContextSwitches (thread)",
        median_ns(batch, rounds, pair(&vol)),
    );
    let pvol = ContextSwitches::voluntary().process();
    row(
        "ContextSwitches (process)",
        median_ns(batch, rounds, pair(&pvol)),
    );
    row(
        "Wakeups (process)",
        median_ns(batch, rounds, pair(&Wakeups::process())),
    );
    for ev in PerfEvent::ALL {
        match PerfCounter::new(ev) {
            Ok(c) => {
                let ns = median_ns(batch, rounds, pair(&c));
                row(&format!("PerfCounter {}", ev.name()), ns);
                println!("  {:<34} {:>8.1} ns per read", "", ns / 2.0);
            }
            Err(e) => println!("  PerfCounter {:<22} unavailable: {e}", ev.name()),
        }
    }
}

criterion_group! {
    name = switch_benches;
    config = Criterion::default().with_measurement(ContextSwitches::voluntary());
    targets = switches
}

criterion_group! {
    name = cpu_benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu
}

fn main() {
    switch_benches();
    cpu_benches();
    report();
    Criterion::default().configure_from_args().final_summary();
}
