//! The criterion part: attach + detach, and one `read()` of a source
//! tracking this process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::Criterion;
use wakemeter::KernelSource;
use wakemeter_ebpf::{EbpfSource, Target};

pub fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("ebpf");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_millis(500));
    g.bench_function("attach_detach", |b| {
        b.iter(|| EbpfSource::attach(Target::SelfProcess).map(drop).is_ok())
    });

    // read() of a source tracking this process with 8 extra sleeping threads.
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    if let Ok(mut source) = EbpfSource::attach(Target::SelfProcess) {
        std::thread::sleep(Duration::from_millis(50));
        let n = source.read().map(|s| s.threads.len()).unwrap_or(0);
        g.bench_function(format!("read_{n}_threads"), |b| {
            b.iter(|| source.read().is_ok())
        });
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    g.finish();
}
