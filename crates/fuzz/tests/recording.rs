//! Fuzzes the reading of recordings (`wakemeter diff`'s input) through the
//! library's public entry points: `read_recording` line by line, each line
//! pushed into an `Experiment` on both sides, and the comparison. Nothing
//! may panic, whatever the bytes; what is malformed is an error.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use wakemeter::compare::{Experiment, IdentityRule, Side, read_recording};
use wakemeter_fuzz::{RECORDING_TOKENS, cases, corpus, inputs};

/// The experiment with `bytes` as the one run of each side, or `None`
/// where the CLI reports an error.
fn experiment(bytes: &[u8]) -> Option<Experiment> {
    let mut e = Experiment::new(IdentityRule::NameAndRole);
    for side in [Side::Control, Side::Variant] {
        e.begin_run(side);
        read_recording(bytes, |line| e.push(side, line)).ok()?;
    }
    Some(e)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn a_recording_of_any_bytes_parses_or_is_refused_without_panicking(
        bytes in inputs(corpus("recording"), RECORDING_TOKENS),
    ) {
        if let Some(e) = experiment(&bytes) {
            // What `diff --json` prints must serialize.
            let _ = serde_json::to_string(&e.compare());
        }
        // One side only: every row is "only in control".
        let mut one_side = Experiment::new(IdentityRule::Name);
        one_side.begin_run(Side::Control);
        if read_recording(&bytes[..], |line| one_side.push(Side::Control, line)).is_ok() {
            let _ = serde_json::to_string(&one_side.compare());
        }
    }
}

#[test]
fn the_seed_corpus_parses() {
    for seed in corpus("recording") {
        let e = experiment(&seed).expect("a seed is a valid recording");
        let c = e.compare();
        assert!(serde_json::to_string(&c).is_ok());
    }
}
