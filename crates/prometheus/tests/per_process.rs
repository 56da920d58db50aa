//! Per-process exporting (several processes, one sampler each): every
//! series labelled by `pid` and `process`, the process cap, the global
//! series cap, and a process leaving the set. A file of its own: the
//! thread ranking of the other exposition tests reads this process's
//! threads, and this test's would take their places.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]
#![cfg(target_os = "linux")]

use wakemeter::SamplerBuilder;
use wakemeter_prometheus::{Error, Exporter, ExporterConfig};

/// Sample lines (not comments) of an exposition.
fn series(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

fn value(text: &str, series_prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A `sleep` child, killed and reaped on drop.
struct Child(std::process::Child);

impl Child {
    /// Started and past its exec (named `sleep`), so that a sampler
    /// built now names it so.
    fn sleep() -> Child {
        let c = Child(
            std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .unwrap(),
        );
        wakemeter_testkit::wait_for_name(c.pid(), "sleep");
        c
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sampled(pid: u32) -> wakemeter::Sampler {
    let s = SamplerBuilder::new()
        .with_target(wakemeter::Target::Pid(pid))
        .build()
        .unwrap();
    s.sample().unwrap();
    s
}

#[test]
fn per_process_series_carry_pid_and_process_and_leave_with_their_process() {
    let (a, b) = (Child::sleep(), Child::sleep());
    let (sa, sb) = (sampled(a.pid()), sampled(b.pid()));
    let exporter = Exporter::new(ExporterConfig::default().with_per_process(true)).unwrap();
    assert!(exporter.update_set(&[sb.clone(), sa.clone()]));
    let om = exporter.openmetrics();
    for pid in [a.pid(), b.pid()] {
        let labels = format!("pid=\"{pid}\",process=\"sleep\"");
        assert_eq!(
            value(&om, &format!("wakemeter_process_threads{{{labels}}}")),
            Some(1.0),
            "{om}"
        );
        assert!(
            om.contains(&format!("wakemeter_target_info{{{labels},version=")),
            "{om}"
        );
        assert!(
            om.contains(&format!(
                "wakemeter_thread_cpu_seconds_total{{{labels},thread=\"sleep\"}}"
            )),
            "{om}"
        );
        assert!(
            om.contains(&format!(
                "wakemeter_findings{{{labels},kind=\"busy_poller\",severity=\"info\"}} 0"
            )),
            "{om}"
        );
    }
    // Every process series is labelled; the exporter's own are not.
    for line in series(&om) {
        assert!(
            line.contains("pid=\"") || line.starts_with("wakemeter_exporter_"),
            "{line}"
        );
    }
    assert_eq!(
        series(&om)
            .iter()
            .filter(|l| l.starts_with("wakemeter_exporter_dropped_series_total"))
            .count(),
        1
    );

    // b leaves the set: its series go, a's stay.
    assert!(exporter.update_set(std::slice::from_ref(&sa)));
    let om = exporter.openmetrics();
    assert!(!om.contains(&format!("pid=\"{}\"", b.pid())), "{om}");
    assert!(om.contains(&format!("pid=\"{}\"", a.pid())), "{om}");
    assert!(exporter.remove_process(a.pid()));
    assert!(!exporter.openmetrics().contains("pid=\""));

    // The process cap keeps the lowest PIDs.
    let one = Exporter::new(
        ExporterConfig::default()
            .with_per_process(true)
            .with_max_processes(1),
    )
    .unwrap();
    assert!(one.update_set(&[sa.clone(), sb.clone()]));
    let om = one.openmetrics();
    let (low, high) = (a.pid().min(b.pid()), a.pid().max(b.pid()));
    assert!(om.contains(&format!("pid=\"{low}\"")), "{om}");
    assert!(!om.contains(&format!("pid=\"{high}\"")), "{om}");

    // The series cap is for all together: the fixed series (about 32) of
    // two processes and the exporter's own fit under 80, the third
    // process is left out and counted once, globally.
    let c = Child::sleep();
    let sc = sampled(c.pid());
    let small = Exporter::new(
        ExporterConfig::default()
            .with_per_process(true)
            .with_max_series(80),
    )
    .unwrap();
    assert!(small.update_set(&[sa.clone(), sb.clone(), sc.clone()]));
    let om = small.openmetrics();
    let n = series(&om).len();
    assert!(n <= 80, "{n} series over a cap of 80:\n{om}");
    let mut pids = [a.pid(), b.pid(), c.pid()];
    pids.sort_unstable();
    assert!(om.contains(&format!("pid=\"{}\"", pids[0])), "{om}");
    assert!(om.contains(&format!("pid=\"{}\"", pids[1])), "{om}");
    assert!(!om.contains(&format!("pid=\"{}\"", pids[2])), "{om}");
    assert!(
        value(&om, "wakemeter_exporter_dropped_series_total").unwrap() > 0.0,
        "{om}"
    );
    assert_eq!(
        value(&om, "wakemeter_exporter_series"),
        Some(n as f64),
        "{om}"
    );
}

#[test]
fn a_bad_process_cap_is_a_typed_error() {
    for n in [0, wakemeter_prometheus::MAX_PROCESSES + 1] {
        assert!(matches!(
            Exporter::new(ExporterConfig::default().with_max_processes(n)),
            Err(Error::InvalidConfig {
                field: "max_processes",
                ..
            })
        ));
    }
}
