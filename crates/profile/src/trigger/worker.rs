//! The profiler's thread: woken by the sampler's snapshots, it reads the
//! findings, captures, keeps, writes and drops.

use super::files::{remove_files, write_files};
use super::policy::{CpuUse, choose, window_floor_ns};
use super::*;

/// The profiler's thread.
pub(super) struct Worker {
    pub(super) shared: Arc<Shared>,
    pub(super) sampler: Sampler,
    pub(super) config: AutoProfilerBuilder,
    pub(super) profiler: Profiler,
    /// Sequence number of the newest snapshot seen.
    pub(super) last_seq: Option<u64>,
    /// This thread's id, never a subject (it is busy symbolizing when the
    /// target is this very process).
    pub(super) own_tid: Option<u64>,
    /// The output directory, opened once.
    pub(super) dir: Option<wakemeter_outfile::Dir>,
}

/// How a wait for the next snapshot ended.
enum Woke {
    Snapshot,
    NoSnapshot,
    SamplerStopped,
    Stop,
}

impl Worker {
    fn stopping(&self) -> bool {
        self.shared.stop.load(Ordering::Acquire)
    }

    /// Waits for the next stored snapshot, at most `timeout` (capped at
    /// [`STOP_CHECK`]).
    fn wait(&mut self, timeout: Duration) -> Woke {
        let woke = match self
            .sampler
            .wait_for_sample(self.last_seq, timeout.min(STOP_CHECK))
        {
            SampleWait::Stored { seq } => {
                self.last_seq = Some(seq);
                Woke::Snapshot
            }
            SampleWait::Stopped => Woke::SamplerStopped,
            _ => Woke::NoSnapshot,
        };
        if self.stopping() { Woke::Stop } else { woke }
    }

    pub(super) fn run(mut self) {
        let mut recent: HashMap<TriggerKey, Instant> = HashMap::new();
        let mut next_check = Instant::now();
        let mut next_capture = Instant::now();
        let mut next_id = 1u64;
        loop {
            match self.wait(STOP_CHECK) {
                Woke::Stop => return,
                Woke::Snapshot => {}
                Woke::NoSnapshot | Woke::SamplerStopped => continue,
            }
            let now = Instant::now();
            if now < next_check || now < next_capture {
                continue;
            }
            next_check = now + self.config.check_every;
            recent.retain(|_, at| now.duration_since(*at) < self.config.repeat_after);
            let Some((trigger, stacks)) = self.next_trigger(&recent) else {
                continue;
            };
            recent.insert(trigger.key(), Instant::now());
            let id = next_id;
            next_id += 1;
            if !self.capture(id, trigger, stacks) {
                return;
            }
            next_capture = Instant::now() + self.config.cooldown;
        }
    }

    fn next_trigger(&self, recent: &HashMap<TriggerKey, Instant>) -> Option<(Trigger, StackKind)> {
        // Both count themselves as sampler overhead.
        let findings = if self.config.findings.is_empty() {
            Vec::new()
        } else {
            self.sampler.findings()
        };
        let cpu = if self.config.process_cpu_percent.is_some()
            || self.config.thread_cpu_percent.is_some()
        {
            self.sampler
                .interval_over(self.config.cpu_window)
                .filter(|i| i.duration_ns >= window_floor_ns(&self.sampler, &self.config))
        } else {
            None
        };
        let cpu = cpu.as_ref().map(CpuUse::of);
        self.sampler
            .account(|| choose(findings, cpu.as_ref(), &self.config, recent, self.own_tid))
    }

    /// One capture; returns false when the profiler must stop.
    fn capture(&mut self, id: u64, trigger: Trigger, stacks: StackKind) -> bool {
        let mut options = self.config.options.clone();
        options.set_kind(stacks);
        options = options.with_thread(
            trigger
                .thread()
                .and_then(|t| u32::try_from(t).ok())
                .unwrap_or(0),
        );
        lock(&self.shared.state).capturing = Some(trigger.clone());
        let target = self.sampler.target();
        let started = self
            .sampler
            .account(|| self.profiler.start(target, &options));
        let mut capture = match started {
            Ok(c) => c,
            Err(e) => {
                let mut s = lock(&self.shared.state);
                s.capturing = None;
                s.failed(format!("capture of {}: {e}", trigger.label()));
                return true;
            }
        };
        loop {
            let left = self.config.capture.saturating_sub(capture.elapsed());
            if left.is_zero() || capture.target_exited() {
                break;
            }
            match self.wait(left) {
                Woke::Stop => return false,
                Woke::SamplerStopped => break,
                Woke::Snapshot | Woke::NoSnapshot => {}
            }
            self.sampler.account(|| capture.refresh_modules());
        }
        let finished = self.sampler.account(|| {
            let profile = capture.finish(&self.profiler)?;
            let files = match &self.dir {
                Some(dir) => Some(write_files(dir, id, &trigger, &profile, self.config.pprof)?),
                None => None,
            };
            Ok::<_, ProfileError>(TriggeredProfile {
                id,
                trigger: trigger.clone(),
                profile,
                files,
            })
        });
        let mut s = lock(&self.shared.state);
        s.capturing = None;
        match finished {
            Ok(kept) => {
                s.total_captures += 1;
                let dropped = s.keep(kept, self.config.max_kept, self.config.max_kept_bytes);
                drop(s);
                let removed = self
                    .sampler
                    .account(|| remove_files(self.dir.as_ref(), &dropped));
                if let Err(e) = removed {
                    lock(&self.shared.state).failed(e.to_string());
                }
            }
            Err(e) => s.failed(format!("capture of {}: {e}", trigger.label())),
        }
        true
    }
}

/// This thread's id (Linux: from `/proc/thread-self`), when known.
pub(super) fn current_tid() -> Option<u64> {
    wakemeter_procfs::process::current_tid().map(u64::from)
}
