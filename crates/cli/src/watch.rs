//! `wakemeter watch --pid`: the sidecar use.

use std::error::Error;
use std::io::{self, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use wakemeter::{SamplerBuilder, Target};

use crate::{kernel, print};

pub fn run(
    pid: u32,
    every: u64,
    seconds: Option<u64>,
    json: bool,
    ebpf: bool,
) -> Result<ExitCode, Box<dyn Error>> {
    if !(1..=3600).contains(&every) {
        return Err("--every must be between 1 and 3600 seconds".into());
    }
    let window = Duration::from_secs(every.max(2));
    let thresholds = wakemeter::Thresholds::default()
        .with_window(window)
        .with_min_window(Duration::from_secs(1));
    let mut builder = SamplerBuilder::new()
        .with_target(Target::Pid(pid))
        .with_interval(Duration::from_millis(500))
        .with_switch_split_every(2)
        .with_thresholds(thresholds);
    match kernel::attach(Target::Pid(pid), ebpf) {
        Ok(src) => builder = builder.with_kernel_source(src),
        Err(why) => print::note(&format!("eBPF: not attached ({why}); /proc sampling only")),
    }
    let sampler = builder.build()?;
    let guard = sampler.start()?;
    let mut out = io::stdout().lock();
    let start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_secs(every));
        let report = sampler.report();
        if json {
            writeln!(out, "{}", print::json(&report)?)?;
        } else if let Some(i) = &report.interval {
            print::threads(&mut out, i)?;
            print::kernel(&mut out, i)?;
            print::findings(&mut out, &report.findings)?;
        }
        out.flush()?;
        if let Some(e) = sampler.stats().last_error {
            print::note(&format!("wakemeter: stopped: {e}"));
            break;
        }
        if seconds.is_some_and(|s| start.elapsed() >= Duration::from_secs(s)) {
            break;
        }
    }
    drop(guard);
    Ok(ExitCode::SUCCESS)
}
