//! What the readers computed for the newest snapshot, kept until a newer
//! one is stored, so that every consumer of one tick (a listener's
//! findings, a report, its JSON, a metrics scrape, a dashboard polling
//! faster than the sampler) shares one computation instead of redoing it.
//!
//! Findings and the body of a report are functions of the history, the
//! configured thresholds and the sampler's own thread (never a subject).
//! The thresholds are fixed at build, and the history is determined by
//! its newest sequence number (the ring only changes by storing a newer
//! snapshot), so an entry keyed by that number and that thread is exact,
//! not an approximation. Only the configured thresholds are kept:
//! [`super::Sampler::findings_with`] computes every time.
//!
//! Bounded: one entry. Until a report is made from it, it holds the
//! findings' window interval, every thread of the target (432 bytes per
//! thread plus its name: about 2.2 MB at 5,000 threads, 0.1 MB at 250);
//! after, one report's worth of records (at most `report_threads` threads
//! listed). It is replaced at the next snapshot.
//!
//! Beside it, the interval between the two newest snapshots, which every
//! consumer that follows each snapshot asks for (a trace writer, a metrics
//! exporter, a recording, a listener): one interval, every thread, kept
//! until a reader computes the next pair's. An interval depends only on
//! the snapshots from its start to its end, which never change once
//! stored, so the pair of sequence numbers identifies it exactly.

use std::sync::{Arc, Mutex};

use crate::diagnose::Finding;
use crate::interval::groups::ThreadGroupInterval;
use crate::interval::{Interval, ThreadInterval};
use crate::model::SampleWarning;
use crate::sync::lock;

/// Which history an entry was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Key {
    /// Sequence number of the newest snapshot.
    pub seq: u64,
    /// The sampler's own thread, excluded from the findings (0: none).
    pub exclude_tid: u64,
}

/// The part of a report that depends on the history only (not its time
/// of making or the sampler's running counters).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ReportBody {
    pub interval: Option<Interval>,
    pub thread_groups: Vec<ThreadGroupInterval>,
    pub threads_folded: u32,
    pub findings: Vec<Finding>,
    pub warnings: Vec<SampleWarning>,
}

/// Findings with the interval over the report's window they were
/// computed with (the rate rules' window) and its warnings, which a report
/// needs too, all from one copy of the history.
#[derive(Debug)]
pub(super) struct Diagnosis {
    /// Which history (None: an empty one).
    pub key: Option<Key>,
    pub findings: Vec<Finding>,
    /// None with fewer than two snapshots.
    pub window: Option<Interval>,
    pub warnings: Vec<SampleWarning>,
}

#[derive(Default)]
struct Entry {
    key: Option<Key>,
    diagnosis: Option<Arc<Diagnosis>>,
    body: Option<Arc<ReportBody>>,
}

/// The one shared entry and the newest interval; their locks are held
/// only to swap `Arc`s, never while anything is computed.
#[derive(Default)]
pub(super) struct Readings {
    entry: Mutex<Entry>,
    interval: Mutex<Option<Arc<Interval>>>,
}

impl Readings {
    /// The findings (and window) computed for `key`, if any reader did.
    pub fn diagnosis(&self, key: Key) -> Option<Arc<Diagnosis>> {
        let e = lock(&self.entry);
        (e.key == Some(key)).then(|| e.diagnosis.clone()).flatten()
    }

    /// The report body computed for `key`, if any reader did.
    pub fn body(&self, key: Key) -> Option<Arc<ReportBody>> {
        let e = lock(&self.entry);
        (e.key == Some(key)).then(|| e.body.clone()).flatten()
    }

    /// Keeps findings computed for `key`.
    pub fn keep_diagnosis(&self, key: Key, diagnosis: Arc<Diagnosis>) {
        self.keep(key, |e| e.diagnosis = Some(diagnosis));
    }

    /// Keeps a report body computed for `key`. The diagnosis's window
    /// interval (every thread of the target: megabytes at thousands of
    /// threads) is let go: the body holds what a report needs of it.
    pub fn keep_body(&self, key: Key, body: Arc<ReportBody>) {
        self.keep(key, |e| {
            if let Some(d) = e.diagnosis.as_ref().filter(|d| d.window.is_some()) {
                e.diagnosis = Some(Arc::new(Diagnosis {
                    key: d.key,
                    findings: d.findings.clone(),
                    window: None,
                    warnings: d.warnings.clone(),
                }));
            }
            e.body = Some(body);
        });
    }

    /// The interval from snapshot `from_seq` to `to_seq`, if a reader
    /// computed and kept it.
    pub fn interval(&self, from_seq: u64, to_seq: u64) -> Option<Arc<Interval>> {
        lock(&self.interval)
            .as_ref()
            .filter(|i| (i.from_seq, i.to_seq) == (from_seq, to_seq))
            .cloned()
    }

    /// The thread records of the kept interval, taken out, when it ends
    /// before `to_seq` (a newer pair is being computed, which replaces it)
    /// and no reader holds it any more: the new interval is written into
    /// them ([`crate::interval::between_in_history_reusing`]). Empty
    /// otherwise.
    pub fn take_spare(&self, to_seq: u64) -> Vec<ThreadInterval> {
        let older = {
            let mut kept = lock(&self.interval);
            match kept.as_ref() {
                Some(k) if k.to_seq < to_seq => kept.take(),
                _ => None,
            }
        };
        older
            .and_then(|i| Arc::try_unwrap(i).ok())
            .map(|i| i.threads)
            .unwrap_or_default()
    }

    /// Keeps `interval` when it is the one between the two newest
    /// snapshots (`newest_seq` is the newest stored) and newer than the
    /// one kept: a reader that is behind (catching up one interval at a
    /// time, or a span of several) never replaces what the others share.
    pub fn keep_interval(&self, interval: &Arc<Interval>, newest_seq: u64) {
        let (from, to) = (interval.from_seq, interval.to_seq);
        if to != newest_seq || from.checked_add(1) != Some(to) {
            return;
        }
        let replaced = {
            let mut kept = lock(&self.interval);
            if kept.as_ref().is_some_and(|k| k.to_seq >= to) {
                return;
            }
            kept.replace(interval.clone())
        };
        // Freed outside the lock (every thread of the target), when a
        // reader held it while the new one was computed.
        drop(replaced);
    }

    /// Stores into the entry of `key`, starting a new entry when `key` is
    /// newer; a reader that finished after a newer snapshot was read by
    /// another keeps nothing, so an entry never goes back in time.
    fn keep(&self, key: Key, store: impl FnOnce(&mut Entry)) {
        let mut e = lock(&self.entry);
        match e.key {
            Some(k) if k == key => {}
            Some(k) if k.seq > key.seq => return,
            _ => {
                *e = Entry {
                    key: Some(key),
                    ..Entry::default()
                }
            }
        }
        store(&mut e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seq: u64) -> Key {
        Key {
            seq,
            exclude_tid: 7,
        }
    }

    fn none() -> Arc<Diagnosis> {
        Arc::new(Diagnosis {
            key: None,
            findings: Vec::new(),
            window: None,
            warnings: Vec::new(),
        })
    }

    #[test]
    fn an_entry_serves_only_its_own_history() {
        let r = Readings::default();
        assert!(r.diagnosis(key(1)).is_none());
        r.keep_diagnosis(key(1), none());
        assert!(r.diagnosis(key(1)).is_some());
        assert!(r.body(key(1)).is_none(), "findings alone make no body");
        assert!(r.diagnosis(key(2)).is_none());
        assert!(
            r.diagnosis(Key {
                seq: 1,
                exclude_tid: 8
            })
            .is_none()
        );
    }

    #[test]
    fn a_kept_body_lets_the_window_interval_go() {
        let r = Readings::default();
        let s = super::super::SamplerBuilder::new().build().unwrap();
        s.sample().unwrap();
        s.sample().unwrap();
        let window = s.latest_interval();
        assert!(window.is_some());
        r.keep_diagnosis(
            key(1),
            Arc::new(Diagnosis {
                key: Some(key(1)),
                findings: Vec::new(),
                window,
                warnings: Vec::new(),
            }),
        );
        assert!(r.diagnosis(key(1)).is_some_and(|d| d.window.is_some()));
        r.keep_body(
            key(1),
            Arc::new(ReportBody {
                interval: None,
                thread_groups: Vec::new(),
                threads_folded: 0,
                findings: Vec::new(),
                warnings: Vec::new(),
            }),
        );
        let d = r.diagnosis(key(1));
        assert!(d.is_some_and(|d| d.window.is_none() && d.key == Some(key(1))));
        assert!(r.body(key(1)).is_some());
    }

    #[test]
    fn only_the_newest_pair_is_kept_and_an_older_one_never_replaces_it() {
        let s = super::super::SamplerBuilder::new().build().unwrap();
        for _ in 0..4 {
            s.sample().unwrap();
        }
        let interval = |from, to| Arc::new(s.interval_between(from, to).unwrap());
        let r = Readings::default();
        r.keep_interval(&interval(1, 2), 3);
        assert!(r.interval(1, 2).is_none(), "not the newest pair");
        r.keep_interval(&interval(0, 2), 2);
        assert!(r.interval(0, 2).is_none(), "not a pair of neighbours");
        r.keep_interval(&interval(1, 2), 2);
        assert!(r.interval(1, 2).is_some());
        assert!(r.interval(0, 2).is_none());
        r.keep_interval(&interval(1, 2), 3);
        assert!(r.interval(1, 2).is_some(), "kept until a newer pair is");
        r.keep_interval(&interval(2, 3), 3);
        assert!(r.interval(1, 2).is_none());
        assert!(r.interval(2, 3).is_some());
        r.keep_interval(&interval(1, 2), 2);
        assert!(
            r.interval(2, 3).is_some(),
            "an older pair never replaces it"
        );
    }

    #[test]
    fn a_spare_is_only_an_older_interval_no_reader_holds() {
        let s = super::super::SamplerBuilder::new().build().unwrap();
        for _ in 0..3 {
            s.sample().unwrap();
        }
        let r = Readings::default();
        let kept = Arc::new(s.interval_between(0, 1).unwrap());
        r.keep_interval(&kept, 1);
        assert!(r.take_spare(1).is_empty(), "not older than the pair asked");
        assert!(r.take_spare(2).is_empty(), "a reader still holds it");
        assert!(r.interval(0, 1).is_none(), "taken out all the same");
        let threads = kept.threads.len();
        r.keep_interval(&kept, 1);
        drop(kept);
        assert_eq!(r.take_spare(2).len(), threads);
        assert!(r.interval(0, 1).is_none());
    }

    #[test]
    fn a_newer_snapshot_replaces_the_entry_and_an_older_one_never_does() {
        let r = Readings::default();
        r.keep_diagnosis(key(5), none());
        r.keep_diagnosis(key(4), none());
        assert!(r.diagnosis(key(5)).is_some());
        assert!(r.diagnosis(key(4)).is_none());
        r.keep_diagnosis(key(6), none());
        assert!(r.diagnosis(key(5)).is_none());
        assert!(r.diagnosis(key(6)).is_some());
    }
}
