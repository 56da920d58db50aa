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
    // Walks every operation Rust declares: one added in Rust only fails here.
    let rust: Vec<(&str, i64)> = fast::SamplerOp::ALL
        .iter()
        .map(|op| (op.kotlin_name(), i64::from(*op as u32)))
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
