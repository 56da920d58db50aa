//! Attaches to a process (this one by default, or the PID given as the
//! first argument), prints how long attaching took, waits, and prints what
//! the kernel saw per thread (`rq_waits`: its waits for a CPU after a
//! wakeup; `rq_p50_us`: the lower bound of the median one's log2 bucket).
//!
//! ```text
//! cargo run --release -p wakemeter-ebpf --example attach -- [PID] [SECONDS]
//! ```

use std::time::Duration;

use wakemeter::KernelSource;
use wakemeter_ebpf::{EbpfSource, Target};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let target = match args.next() {
        Some(pid) => Target::Pid(pid.parse()?),
        None => Target::SelfProcess,
    };
    let seconds: f64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1.0);

    let mut source = EbpfSource::attach(target)?;
    println!(
        "attached to pid {} in {:.1} ms ({:?}, syscalls by {:?}, entries in {})",
        source.pid(),
        source.attach_duration().as_secs_f64() * 1e3,
        source.attach_kind(),
        source.syscall_hook(),
        if source.map_usage()?.task_storage {
            "task storage"
        } else {
            "a hash map"
        }
    );
    if target == Target::SelfProcess {
        // Something to see: a thread that sleeps 1 ms at a time.
        std::thread::Builder::new()
            .name("sleeper".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })?;
    }
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let sample = source.read()?;
    println!(
        "{:>8} {:<16} {:>10} {:>6} {:>6} {:>10} {:>10} {:>10} {:>8} {:>7} {:>7} {:>8} {:>9}",
        "tid",
        "name",
        "on_cpu_us",
        "vol",
        "invol",
        "sleep_us",
        "lock_us",
        "poll_us",
        "wakes",
        "polls",
        "sleeps",
        "rq_waits",
        "rq_p50_us"
    );
    for t in &sample.threads {
        println!(
            "{:>8} {:<16} {:>10} {:>6} {:>6} {:>10} {:>10} {:>10} {:>8} {:>7} {:>7} {:>8} {:>9}",
            t.tid,
            t.name,
            t.total_on_cpu_ns / 1000,
            t.total_voluntary_switches,
            t.total_involuntary_switches,
            t.total_off_cpu.sleep_ns / 1000,
            t.total_off_cpu.lock_ns / 1000,
            t.total_off_cpu.poll_ns / 1000,
            t.total_wakes,
            t.poll.total_calls,
            t.sleep.total_calls,
            t.run_queue_latency_histogram.count(),
            // The median wakeup-to-run wait's bucket, [p50, 2 * p50) µs.
            t.run_queue_latency_histogram
                .quantile_lower_bound(0.5)
                .map_or("-".to_string(), |ns| format!("{:.1}", ns as f64 / 1e3))
        );
        for w in &t.top_wakers {
            println!(
                "{:>26} woken {} times by {} ({})",
                "", w.total_wakes, w.tid, w.name
            );
        }
    }
    println!("dropped events: {}", sample.total_dropped_events);
    Ok(())
}
