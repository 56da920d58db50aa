//! Listeners implemented in Kotlin or Swift, and the thread that calls them.
//!
//! The core samples on its own thread and knows nothing about listeners. A
//! small dispatcher thread here waits on the core's "sample stored"
//! notification (one wakeup per sample, no clock of its own), reads the
//! newest interval and hands it to every listener. A slow or failing listener
//! therefore never delays sampling, and the dispatcher's work counts in the
//! sampler's reported overhead.
//!
//! After each interval the dispatcher runs the findings engine and hands
//! over the findings that are new (not present after the previous sample)
//! or more severe than before, so a listener hears about a problem once,
//! not every second.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

use crate::error::{ListenerError, WakemeterError};
use wakemeter::{Finding, Interval};

use wakemeter::sync::lock;

/// Receives what the sampler measures; implement it in Kotlin or Swift.
///
/// Methods are called on a wakemeter thread, one call at a time. Throwing
/// from a method is fine: the failure is counted in
/// `Sampler.listener_stats()` and delivery continues.
#[uniffi::export(with_foreign)]
pub trait SamplerListener: Send + Sync {
    /// Called after each background sample with the interval it closed.
    ///
    /// # Errors
    /// Whatever the listener throws; it is counted, never propagated.
    fn on_interval(&self, interval: Interval) -> Result<(), ListenerError>;

    /// Called when a finding appears, or comes back more severe, after a
    /// background sample (at most once per finding and sample).
    ///
    /// # Errors
    /// Whatever the listener throws; it is counted, never propagated.
    fn on_finding(&self, finding: Finding) -> Result<(), ListenerError>;
}

/// Counters of listener delivery.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, uniffi::Record)]
pub struct ListenerStats {
    /// Listeners currently registered.
    pub listeners: u32,
    /// Intervals handed to listeners (one per listener per interval).
    pub intervals_delivered: u64,
    /// Findings handed to listeners (one per listener per finding).
    pub findings_delivered: u64,
    /// Listener calls that threw or returned an error.
    pub listener_errors: u64,
    /// The message of the last listener failure, if any.
    pub last_listener_error: Option<String>,
}

/// The registered listeners and their delivery counters.
#[derive(Default)]
pub(crate) struct Listeners {
    list: Mutex<Vec<(u64, Arc<dyn SamplerListener>)>>,
    next_id: AtomicU64,
    /// Signalled when a listener is added, so an idle dispatcher starts ticking.
    added: Condvar,
    intervals_delivered: AtomicU64,
    findings_delivered: AtomicU64,
    listener_errors: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Listeners {
    pub(crate) fn add(&self, listener: Arc<dyn SamplerListener>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.list).push((id, listener));
        self.added.notify_all();
        id
    }

    pub(crate) fn remove(&self, id: u64) -> bool {
        let mut list = lock(&self.list);
        let before = list.len();
        list.retain(|(i, _)| *i != id);
        list.len() != before
    }

    pub(crate) fn clear(&self) {
        lock(&self.list).clear();
    }

    pub(crate) fn stats(&self) -> ListenerStats {
        ListenerStats {
            listeners: u32::try_from(lock(&self.list).len()).unwrap_or(u32::MAX),
            intervals_delivered: self.intervals_delivered.load(Ordering::Relaxed),
            findings_delivered: self.findings_delivered.load(Ordering::Relaxed),
            listener_errors: self.listener_errors.load(Ordering::Relaxed),
            last_listener_error: lock(&self.last_error).clone(),
        }
    }

    /// A copy of the list, so no lock is held while foreign code runs.
    fn current(&self) -> Vec<Arc<dyn SamplerListener>> {
        lock(&self.list).iter().map(|(_, l)| l.clone()).collect()
    }

    fn is_empty(&self) -> bool {
        lock(&self.list).is_empty()
    }

    fn record_failure(&self, message: String) {
        self.listener_errors.fetch_add(1, Ordering::Relaxed);
        *lock(&self.last_error) = Some(message);
    }

    /// Calls `f` on every listener and returns how many were called;
    /// failures and panics are counted, never propagated.
    fn deliver(&self, f: impl Fn(&dyn SamplerListener) -> Result<(), ListenerError>) -> u64 {
        let listeners = self.current();
        for listener in &listeners {
            match catch_unwind(AssertUnwindSafe(|| f(listener.as_ref()))) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => self.record_failure(e.to_string()),
                Err(_) => self.record_failure("listener call panicked".to_string()),
            }
        }
        listeners.len() as u64
    }

    /// Hands `interval` to every listener.
    fn deliver_interval(&self, interval: &Interval) {
        let n = self.deliver(|l| l.on_interval(interval.clone()));
        self.intervals_delivered.fetch_add(n, Ordering::Relaxed);
    }

    /// Hands `finding` to every listener.
    fn deliver_finding(&self, finding: &Finding) {
        let n = self.deliver(|l| l.on_finding(finding.clone()));
        self.findings_delivered.fetch_add(n, Ordering::Relaxed);
    }
}

/// The thread that calls listeners after each background sample.
pub(crate) struct Dispatcher {
    stop: Arc<AtomicBool>,
    listeners: Arc<Listeners>,
    handle: Option<JoinHandle<()>>,
    thread: ThreadId,
}

impl Dispatcher {
    /// Starts delivering the intervals of `core` to `listeners`.
    pub(crate) fn spawn(
        core: wakemeter::Sampler,
        listeners: Arc<Listeners>,
    ) -> Result<Dispatcher, WakemeterError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, l) = (stop.clone(), listeners.clone());
        let handle = std::thread::Builder::new()
            .name("wakemeter-cb".to_string())
            .spawn(move || run(&core, &s, &l))
            .map_err(|e| WakemeterError::Spawn {
                message: e.to_string(),
            })?;
        Ok(Dispatcher {
            thread: handle.thread().id(),
            stop,
            listeners,
            handle: Some(handle),
        })
    }

    /// Asks the thread to stop. It wakes when the sampler's background run
    /// ends (stop it next), or from its wait for listeners.
    pub(crate) fn signal_stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _g = lock(&self.listeners.list);
        self.listeners.added.notify_all();
    }

    /// Waits for the thread, and so for a call in progress, to return
    /// (unless called from a listener itself, which must not wait for itself).
    pub(crate) fn join(mut self) {
        if let Some(h) = self.handle.take()
            && std::thread::current().id() != self.thread
        {
            // The thread catches listener panics; a join error has nothing to report.
            let _ = h.join();
        }
    }
}

/// The delivery loop. It has no clock of its own: it wakes when the core
/// stores a snapshot (`wait_for_sample`), so it costs one wakeup per sample
/// and never samples or guesses when a sample is due.
fn run(core: &wakemeter::Sampler, stop: &AtomicBool, listeners: &Listeners) {
    // A bound on one wait, for a run that ended before the wait began
    // (which `wait_for_sample` cannot report as `Stopped`).
    let timeout = core
        .interval()
        .saturating_mul(2)
        .max(Duration::from_millis(100));
    let mut last_seq: Option<u64> = None;
    let mut known = KnownFindings::default();
    while !stop.load(Ordering::Acquire) {
        // Sleep without waking while nobody listens.
        {
            let mut list = lock(&listeners.list);
            while list.is_empty() && !stop.load(Ordering::Acquire) {
                list = listeners
                    .added
                    .wait(list)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
        match core.wait_for_sample(last_seq, timeout) {
            wakemeter::SampleWait::Stored { seq } => {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                last_seq = Some(seq);
                if listeners.is_empty() {
                    continue;
                }
                // The interval and the findings count themselves as sampler
                // overhead; so does the bookkeeping of what is new.
                // The interval every follower of the snapshots shares (a
                // trace writer beside this listener computes it once).
                if let Some(iv) = core.latest_interval_shared() {
                    listeners.deliver_interval(&iv);
                }
                let findings = core.findings();
                for finding in core.account(|| known.update(&findings)) {
                    listeners.deliver_finding(&finding);
                }
            }
            wakemeter::SampleWait::TimedOut if core.is_running() => {}
            // The run ended (stopped, or the target exited): nothing more comes.
            _ => return,
        }
    }
}

/// The findings seen after the previous sample, to report only what changed.
#[derive(Default)]
struct KnownFindings {
    /// Severity by (kind, subject label).
    seen: HashMap<(wakemeter::FindingKind, String), wakemeter::Severity>,
}

impl KnownFindings {
    /// Remembers `current` and returns those that are new or more severe.
    fn update(&mut self, current: &[wakemeter::Finding]) -> Vec<Finding> {
        let mut fresh = Vec::new();
        let mut seen = HashMap::with_capacity(current.len());
        for f in current {
            let key = (f.kind, f.subject.label());
            if self
                .seen
                .get(&key)
                .is_none_or(|before| f.severity > *before)
            {
                fresh.push(f.clone());
            }
            seen.insert(key, f.severity);
        }
        self.seen = seen;
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::KnownFindings;
    use wakemeter::{FindingKind, Severity};

    /// A busy-poller finding on loop `name`, as the core would make it.
    fn busy(name: &str, severity: &str) -> wakemeter::Finding {
        serde_json::from_value(serde_json::json!({
            "kind": "busy_poller",
            "severity": severity,
            "subject": { "type": "loop", "name": name, "tid": 7 },
            "summary": "",
            "evidence": [],
            "advice": "",
            "window_ns": 1_000_000,
        }))
        .expect("a finding in the core's JSON form")
    }

    fn heard(known: &mut KnownFindings, now: &[wakemeter::Finding]) -> Vec<(String, Severity)> {
        known
            .update(now)
            .into_iter()
            .inspect(|f| assert_eq!(f.kind, FindingKind::BusyPoller))
            .map(|f| (f.subject.label(), f.severity))
            .collect()
    }

    #[test]
    fn a_finding_is_heard_when_new_or_more_severe_and_again_after_it_clears() {
        let mut k = KnownFindings::default();
        let (w, c) = (busy("spin", "warning"), busy("spin", "critical"));
        assert_eq!(heard(&mut k, std::slice::from_ref(&w)).len(), 1, "new");
        assert!(heard(&mut k, std::slice::from_ref(&w)).is_empty(), "same");
        assert_eq!(
            heard(&mut k, std::slice::from_ref(&c))[0].1,
            Severity::Critical,
            "escalated"
        );
        assert!(heard(&mut k, std::slice::from_ref(&c)).is_empty(), "same");
        assert!(
            heard(&mut k, std::slice::from_ref(&w)).is_empty(),
            "less severe"
        );
        // Back to critical from the warning just seen: it escalated again.
        assert_eq!(heard(&mut k, std::slice::from_ref(&c)).len(), 1);
        assert!(heard(&mut k, &[]).is_empty(), "cleared: nothing to say");
        assert_eq!(heard(&mut k, std::slice::from_ref(&c)).len(), 1, "back");
        // Another loop's finding is its own.
        let other = busy("other", "critical");
        let both = heard(&mut k, &[c.clone(), other]);
        assert_eq!(both.len(), 1);
        assert!(both[0].0.contains("other"), "{both:?}");
    }
}
