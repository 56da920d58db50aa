//! Shared by the trace tests of this crate and of the CLI (included there
//! with `#[path]`): the schema check with Perfetto's own schema, and the
//! framing check that needs none.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// Runs the schema check on `trace` (with `expected` when given); returns
/// its output, or None after saying MISSING when no Python with
/// `perfetto` is set.
pub fn schema_check(trace: &Path, expected: Option<&Path>) -> Option<String> {
    schema_check_with(trace, expected, &[])
}

/// [`schema_check`] with options of `check_trace.py` (`--sdk`: a trace
/// recorded by a Perfetto session).
pub fn schema_check_with(
    trace: &Path,
    expected: Option<&Path>,
    options: &[&str],
) -> Option<String> {
    let Some(python) = std::env::var_os("WAKEMETER_PERFETTO_PYTHON") else {
        eprintln!(
            "MISSING: WAKEMETER_PERFETTO_PYTHON is not set (scripts/perfetto-test.sh sets it): \
             {} not checked with Perfetto's schema",
            trace.display()
        );
        return None;
    };
    let script = Path::new(file!())
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("check_trace.py"))
        .expect("tests dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
        .join(script);
    let mut cmd = Command::new(python);
    cmd.arg(script).args(options).arg(trace);
    if let Some(e) = expected {
        cmd.arg(e);
    }
    let out = cmd.output().expect("run check_trace.py");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    eprint!("{said}");
    assert!(
        out.status.success(),
        "check_trace.py failed on {}: {said}",
        trace.display()
    );
    Some(said)
}

/// Every record of a trace file is `Trace.packet` (tag 0x0a) with a
/// length that stays inside the file: a Rust-side check that needs no
/// schema.
pub fn whole_records(bytes: &[u8]) -> usize {
    let (mut at, mut n) = (0, 0);
    while at < bytes.len() {
        assert_eq!(bytes[at], 0x0a, "record {n} at {at} is not Trace.packet");
        at += 1;
        let (mut len, mut shift) = (0usize, 0);
        loop {
            let b = bytes[at];
            at += 1;
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        at += len;
        assert!(at <= bytes.len(), "record {n} runs past the end");
        n += 1;
    }
    n
}
