//! Fuzzes the reading of recordings (`wakemeter diff`'s input) through the
//! library's public entry points: each line as a `RecordLine`, the runs
//! built from them, and their comparison. Nothing may panic, whatever the
//! bytes; what is malformed is an error. The line loop mirrors the CLI's
//! `read_runs` thinly (a header starts a run, intervals follow it).
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use wakemeter::compare::{RecordLine, Run, compare};
use wakemeter_fuzz::{RECORDING_TOKENS, cases, corpus, inputs};

/// The runs of a recording, or `None` where the CLI reports an error.
fn runs(bytes: &[u8]) -> Option<Vec<Run>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut runs: Vec<Run> = Vec::new();
    let mut current = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<RecordLine>(line).ok()? {
            RecordLine::Header(h) => {
                if let Some((h, i)) = current.take() {
                    runs.push(Run::new(h, i));
                }
                current = Some((h, Vec::new()));
            }
            RecordLine::Interval(i) => current.as_mut()?.1.push(i),
            _ => return None,
        }
    }
    if let Some((h, i)) = current {
        runs.push(Run::new(h, i));
    }
    Some(runs)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn a_recording_of_any_bytes_parses_or_is_refused_without_panicking(
        bytes in inputs(corpus("recording"), RECORDING_TOKENS),
    ) {
        if let Some(runs) = runs(&bytes) {
            let both = compare(&runs, &runs);
            let one_side = compare(&runs, &[]);
            // What `diff --json` prints must serialize, non-finite numbers included.
            let _ = serde_json::to_string(&both);
            let _ = serde_json::to_string(&one_side);
        }
    }
}

#[test]
fn the_seed_corpus_parses() {
    for seed in corpus("recording") {
        let runs = runs(&seed).expect("a seed is a valid recording");
        assert!(!runs.is_empty());
        let c = compare(&runs, &runs);
        assert!(serde_json::to_string(&c).is_ok());
    }
}
