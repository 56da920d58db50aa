//! The Kotlin layer copies the fast path's return codes, its smallest
//! buffer and the sampler's operation numbers (`FastPath.kt`,
//! `FastSampler.kt`): this test fails when a copy differs from the Rust
//! constant, or when either side has an operation the other lacks.

use std::collections::BTreeMap;
use std::path::PathBuf;

use wakemeter_ffi::fast;

/// The `const val NAME = <integer>` lines of a Kotlin file of the
/// idiomatic layer (private ones included), by name.
fn kotlin_constants(file: &str) -> BTreeMap<String, i64> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../bindings/kotlin/src/main/kotlin/dev/wakemeter")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("private ").unwrap_or(line.trim());
            let (name, value) = rest.strip_prefix("const val ")?.split_once('=')?;
            let value = value.trim().parse::<i64>().ok()?;
            Some((name.trim().to_string(), value))
        })
        .collect()
}

fn assert_same(file: &str, kotlin: &BTreeMap<String, i64>, rust: &[(&str, i64)]) {
    for (name, value) in rust {
        assert_eq!(
            kotlin.get(*name),
            Some(value),
            "{file}: `{name}` must be {value}, as in crates/ffi/src/fast"
        );
    }
}

#[test]
fn return_codes_and_the_smallest_buffer_match_fast_path_kt() {
    let kotlin = kotlin_constants("FastPath.kt");
    let rust = [
        ("OK", i64::from(fast::OK)),
        ("SAMPLER_GONE", i64::from(fast::SAMPLER_GONE)),
        ("BAD_HANDLE", i64::from(fast::BAD_HANDLE)),
        ("PANICKED", i64::from(fast::PANICKED)),
        ("WRONG_KIND", i64::from(fast::WRONG_KIND)),
        ("BAD_INPUT", i64::from(fast::BAD_INPUT)),
        ("MIN_CAPACITY", fast::MIN_CAPACITY as i64),
    ];
    assert_same("FastPath.kt", &kotlin, &rust);
}

#[test]
fn operation_numbers_match_fast_sampler_kt() {
    let kotlin = kotlin_constants("FastSampler.kt");
    let rust: Vec<(&str, i64)> = [
        ("STATS", fast::SAMPLER_STATS),
        ("REPORT", fast::SAMPLER_REPORT),
        ("REPORT_JSON", fast::SAMPLER_REPORT_JSON),
        ("FINDINGS", fast::SAMPLER_FINDINGS),
        ("FINDINGS_WITH", fast::SAMPLER_FINDINGS_WITH),
        ("LATEST_INTERVAL", fast::SAMPLER_LATEST_INTERVAL),
        ("INTERVAL_OVER", fast::SAMPLER_INTERVAL_OVER),
        ("SAMPLE_NOW", fast::SAMPLER_SAMPLE_NOW),
        ("LATEST", fast::SAMPLER_LATEST),
        ("SNAPSHOTS", fast::SAMPLER_SNAPSHOTS),
        ("LISTENER_STATS", fast::SAMPLER_LISTENER_STATS),
        ("IS_RUNNING", fast::SAMPLER_IS_RUNNING),
        ("CONFIG", fast::SAMPLER_CONFIG),
        ("SYSTEM", fast::SAMPLER_SYSTEM),
        ("THRESHOLDS", fast::SAMPLER_THRESHOLDS),
        ("LOOP_PROBE", fast::SAMPLER_LOOP_PROBE),
        ("SLEEP_PROBE", fast::SAMPLER_SLEEP_PROBE),
    ]
    .into_iter()
    .map(|(name, op)| (name, i64::from(op)))
    .collect();
    assert_same("FastSampler.kt", &kotlin, &rust);
    // Every constant of FastSampler.kt is an operation number: one Kotlin
    // has and Rust does not would be answered `BAD_INPUT`.
    let extra: Vec<&String> = kotlin
        .keys()
        .filter(|k| !rust.iter().any(|(name, _)| name == k))
        .collect();
    assert!(
        extra.is_empty(),
        "FastSampler.kt has operations Rust does not: {extra:?}"
    );
}
