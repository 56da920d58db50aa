//! `wakemeter demo`: the main job.

use std::error::Error;
use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use wakemeter::{Finding, FindingKind, Report, SamplerBuilder, Subject, Target};

use crate::{kernel, print, scenarios};

/// What the demo writes as JSON.
#[derive(Serialize)]
struct DemoReport<'a> {
    /// The sampler's report (interval over the findings window, findings, overhead).
    report: &'a Report,
    /// Whether the eBPF kernel source was attached, or why not.
    kernel_source: String,
    /// Work done by each scenario thread (same requests for each twin).
    handled: &'a scenarios::Handled,
    /// The demo's own checks.
    checks: Vec<Check>,
}

#[derive(Serialize)]
struct Check {
    what: String,
    passed: bool,
}

fn flagged(f: &[Finding], tid: u64, kind: Option<FindingKind>) -> bool {
    f.iter()
        .any(|x| x.subject.tid() == Some(tid) && kind.is_none_or(|k| x.kind == k))
}

pub fn run(
    seconds: u64,
    report_path: &Path,
    kernel: kernel::Choice,
) -> Result<ExitCode, Box<dyn Error>> {
    if !(5..=600).contains(&seconds) {
        return Err("--seconds must be between 5 and 600".into());
    }
    let mut builder = SamplerBuilder::new()
        .with_interval(Duration::from_millis(500))
        .with_switch_split_every(2);
    let kernel_status = match kernel::attach(Target::SelfProcess, kernel) {
        Ok(src) => {
            builder = builder.with_kernel_source(src);
            "attached".to_string()
        }
        Err(why) => {
            print::note(&format!(
                "eBPF: not attached ({why}); in-process sampling only"
            ));
            format!("not attached: {why}")
        }
    };
    let sampler = builder.build()?;
    // Written with `?`, not println!: a closed stdout (`| head`) ends the
    // demo quietly instead of panicking.
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "wakemeter demo: {seconds} s of four threads doing the same work two ways each"
    )?;
    writeln!(
        out,
        "  spin-poller   polls a UDP socket with a zero timeout   | epoll-loop     blocks in epoll_wait"
    )?;
    writeln!(
        out,
        "  usleep-poller checks a flag, usleep(1 ms), repeat      | condvar-waiter blocks on a condition variable"
    )?;
    writeln!(
        out,
        "  a client sends one request every {} ms to each\n",
        scenarios::REQUEST_PERIOD.as_millis()
    )?;
    let running = scenarios::start(&sampler)?;
    let guard = sampler.start()?;
    for s in 1..=seconds {
        std::thread::sleep(Duration::from_secs(1));
        if let Some(i) = sampler.interval_over(Duration::from_secs(1)) {
            let l = |n: &str| {
                i.loops
                    .iter()
                    .find(|l| l.name == n)
                    .map_or(0.0, |l| l.wakeups_per_sec)
            };
            let sl = i.sleeps.first().map_or(0.0, |s| s.sleeps_per_sec);
            let cpu = |tid: u64| {
                i.threads
                    .iter()
                    .find(|t| t.tid == tid)
                    .map_or(0.0, |t| t.cpu_percent)
            };
            let tids = &running.tids;
            writeln!(
                out,
                "[{s:>3}/{seconds} s] spin-poller {:>7.0} wakeups/s {:>5.1}% CPU | epoll-loop {:>3.0}/s | usleep-poller {:>5.0} sleeps/s | process {:>5.1}% CPU",
                l("spin-poller"),
                cpu(tids.spin_poller.load(Ordering::Relaxed)),
                l("epoll-loop"),
                sl,
                i.process.cpu_percent
            )?;
        }
    }
    drop(guard);
    sampler.sample()?;
    let report = sampler.report();
    running.stop_after(|running| {
        if let Some(i) = &report.interval {
            print::threads(&mut out, i)?;
            print::kernel(&mut out, i)?;
        }
        print::findings(&mut out, &report.findings)?;
        let f = &report.findings;
        let t = &running.tids;
        let h = &running.handled;
        let (spin, epoll) = (
            h.spin_poller.load(Ordering::Relaxed),
            h.epoll_loop.load(Ordering::Relaxed),
        );
        let checks = vec![
            Check {
                what: "the spinning poller is flagged as a busy poller".into(),
                passed: f.iter().any(|x| {
                    x.kind == FindingKind::BusyPoller
                        && matches!(&x.subject, Subject::Loop { name, .. } if name == "spin-poller")
                }),
            },
            Check {
                what: "the epoll loop is not flagged".into(),
                passed: !flagged(f, t.epoll_loop.load(Ordering::Relaxed), None),
            },
            Check {
                what: "the usleep polling thread is flagged for sleep overhead".into(),
                passed: flagged(
                    f,
                    t.usleep_poller.load(Ordering::Relaxed),
                    Some(FindingKind::SleepOverhead),
                ),
            },
            Check {
                what: "the condition-variable waiter is not flagged".into(),
                passed: !flagged(f, t.condvar_waiter.load(Ordering::Relaxed), None),
            },
            Check {
                what: format!("both loops served the same requests ({spin} vs {epoll})"),
                passed: spin.abs_diff(epoll) <= 2 && spin > 0,
            },
        ];
        writeln!(out, "\nchecks:")?;
        for c in &checks {
            writeln!(
                out,
                "  {} {}",
                if c.passed { "ok  " } else { "FAIL" },
                print::safe(&c.what)
            )?;
        }
        let all = checks.iter().all(|c| c.passed);
        let doc = DemoReport {
            report: &report,
            kernel_source: kernel_status,
            handled: h,
            checks,
        };
        let json = print::json_pretty(&doc)?;
        wakemeter_outfile::OutFile::write_whole(report_path, json.as_bytes())?;
        writeln!(
            out,
            "\nfull report: {}",
            print::safe(&report_path.display().to_string())
        )?;
        Ok(if all {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}

impl scenarios::Scenarios {
    /// Runs `f` with the scenarios still running, then stops them.
    fn stop_after<R>(self, f: impl FnOnce(&Self) -> R) -> R {
        let r = f(&self);
        self.stop();
        r
    }
}
