//! `wakemeter watch --profile-dir DIR`: a profile captured when a finding
//! fires or a CPU threshold is crossed (`wakemeter_profile::AutoProfiler`),
//! written to DIR as folded stacks, SVG and pprof; the path is printed
//! under the finding, and stderr says when a capture is written or fails.

use std::path::PathBuf;
#[cfg(feature = "profile")]
use std::time::Duration;

use wakemeter::{Finding, Sampler};

#[cfg(feature = "profile")]
use crate::print;

/// What the user asked for.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "profile"), allow(dead_code))]
pub struct Options {
    /// Where captures are written.
    pub dir: PathBuf,
    /// Length of one capture, s.
    pub seconds: f64,
    /// Process CPU threshold, percent of one core.
    pub process_cpu_percent: Option<f64>,
    /// Thread CPU threshold, percent of one core.
    pub thread_cpu_percent: Option<f64>,
}

/// The running auto-profiler and what has been said about it.
#[cfg(feature = "profile")]
pub struct Watcher {
    auto: wakemeter_profile::AutoProfiler,
    /// Id of the newest capture reported on stderr.
    last_id: u64,
    /// Failures reported on stderr.
    failed: u64,
}

#[cfg(not(feature = "profile"))]
pub enum Watcher {}

/// Starts the auto-profiler when `--profile-dir` was given.
#[cfg(feature = "profile")]
pub fn start(sampler: &Sampler, o: Option<&Options>) -> Result<Option<Watcher>, String> {
    let Some(o) = o else { return Ok(None) };
    if !(o.seconds > 0.0 && o.seconds <= wakemeter_profile::MAX_CAPTURE.as_secs_f64()) {
        return Err(format!(
            "--profile-seconds must be more than 0 and at most {}",
            wakemeter_profile::MAX_CAPTURE.as_secs()
        ));
    }
    // On-CPU captures sample per thread, as `profile` does by default: this
    // process takes the descriptors, not the watched one.
    crate::profile::raise_open_file_limit();
    let options = wakemeter_profile::ProfileOptions::new(wakemeter_profile::StackKind::OnCpu)
        .with_timer(wakemeter_profile::SamplingTimer::PerThread);
    let mut b = wakemeter_profile::AutoProfiler::builder()
        .with_capture(Duration::from_secs_f64(o.seconds))
        .with_options(options)
        .with_output_dir(&o.dir);
    if let Some(p) = o.process_cpu_percent {
        b = b.with_process_cpu_percent(p);
    }
    if let Some(p) = o.thread_cpu_percent {
        b = b.with_thread_cpu_percent(p);
    }
    let auto = b.start(sampler).map_err(|e| error_chain(&e))?;
    Ok(Some(Watcher {
        auto,
        last_id: 0,
        failed: 0,
    }))
}

#[cfg(not(feature = "profile"))]
pub fn start(_: &Sampler, o: Option<&Options>) -> Result<Option<Watcher>, String> {
    match o {
        None => Ok(None),
        Some(_) => Err("--profile-dir: this build has no profiles (feature `profile` off)".into()),
    }
}

#[cfg(feature = "profile")]
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    s
}

#[cfg(feature = "profile")]
impl Watcher {
    /// The SVG of the newest capture for `finding`, for the line under it.
    pub fn path_for(&self, finding: &Finding) -> Option<String> {
        let c = self.auto.profile_for(finding)?;
        let files = c.files.as_ref()?;
        Some(files.svg.display().to_string())
    }

    /// Says on stderr which captures were written and which failed since
    /// the last call.
    pub fn note_new(&mut self) {
        let stats = self.auto.stats();
        if stats.total_failed > self.failed {
            self.failed = stats.total_failed;
            if let Some(why) = &stats.last_error {
                print::note(&format!("wakemeter: profile: {why}"));
            }
        }
        for c in self.auto.captures() {
            if c.id > self.last_id {
                self.last_id = c.id;
                let Some(files) = &c.files else { continue };
                let p = &c.profile;
                print::note(&format!(
                    "wakemeter: profiled {} ({}, {:.1} s, {} distinct stacks{}): {}",
                    c.trigger.label(),
                    wakemeter_profile::kind_label(p.kind).replace('_', "-"),
                    p.duration.as_secs_f64(),
                    p.samples.len(),
                    if p.is_partial() { ", partial" } else { "" },
                    files.svg.display()
                ));
                for w in &p.warnings {
                    print::note(&format!("wakemeter: profile {}: {w}", c.id));
                }
            }
        }
    }
}

#[cfg(not(feature = "profile"))]
impl Watcher {
    pub fn path_for(&self, _: &Finding) -> Option<String> {
        match *self {}
    }

    pub fn note_new(&mut self) {
        match *self {}
    }
}
