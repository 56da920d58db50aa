//! Thread churn against the eBPF source of this process: short-lived
//! threads, each waking one long-lived thread, then what the kernel maps
//! hold and what a read costs.
//!
//! ```text
//! cargo run --release -p wakemeter-ebpf --example churn -- [THREADS]
//! ```

use std::sync::mpsc;
use std::time::Instant;

use wakemeter::KernelSource;
use wakemeter_ebpf::{EbpfSource, Target};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let churn: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(5000);
    let mut source = EbpfSource::attach(Target::SelfProcess)?;
    let (tx, rx) = mpsc::channel::<()>();
    let sink = std::thread::spawn(move || rx.iter().count());
    let report = |label: &str, source: &mut EbpfSource| -> Result<(), Box<dyn std::error::Error>> {
        let mut best = f64::MAX;
        let mut sample = source.read()?;
        for _ in 0..5 {
            let t0 = Instant::now();
            sample = source.read()?;
            best = best.min(t0.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "{label}: read best of 5 {best:.3} ms, {} threads in the sample, {} dropped events, {:?}",
            sample.threads.len(),
            sample.total_dropped_events,
            source.map_usage()?
        );
        Ok(())
    };
    report("before churn", &mut source)?;
    for _ in 0..churn {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(());
        })
        .join()
        .map_err(|_| "a churn thread panicked")?;
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    report(&format!("after {churn} threads"), &mut source)?;
    drop(tx);
    let received = sink.join().map_err(|_| "the sink panicked")?;
    println!("the sink received {received} messages");
    Ok(())
}
