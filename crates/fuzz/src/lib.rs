//! Fuzz inputs for wakemeter's parsers of untrusted bytes, on stable Rust.
//!
//! `cargo-fuzz` needs a nightly compiler (its sanitizer flags are unstable),
//! and the toolchain here is pinned to a stable release; so the harnesses
//! (`tests/`) are proptest properties over the inputs made here: arbitrary
//! bytes, and mutations of a seed corpus (`corpus/`) with overwrites,
//! inserts, deletions, truncations, splices and tokens of the format.
//! proptest shrinks a failing input and keeps it next to its harness
//! (`tests/NAME.proptest-regressions`, proptest's default place),
//! which is committed so every later run tries it first.
//!
//! How long: `FUZZ_CASES` cases per property (default 5,000: about 3 to 4 s
//! each in a debug build, the short pass of `scripts/test.sh`). A longer run:
//! `FUZZ_CASES=500000 cargo test --release -p wakemeter-fuzz` (RELIABILITY.md,
//! "Fuzzing").

use proptest::prelude::*;

/// Cases per property: `FUZZ_CASES`, else 5,000.
pub fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

/// The seed files of `corpus/<dir>`, in name order.
///
/// # Panics
/// When the directory cannot be read (a broken checkout).
pub fn corpus(dir: &str) -> Vec<Vec<u8>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", path.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// One edit of a byte string.
#[derive(Debug, Clone)]
enum Edit {
    /// Overwrite the byte at (position modulo length).
    Set(usize, u8),
    /// Insert bytes at (position modulo length + 1).
    Insert(usize, Vec<u8>),
    /// Remove up to n bytes from (position modulo length).
    Remove(usize, usize),
    /// Keep only the first (position modulo length + 1) bytes.
    Truncate(usize),
    /// Copy up to n bytes from one place to another (a splice).
    Copy(usize, usize, usize),
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = bytes.len();
        match e {
            Edit::Set(at, b) if len > 0 => bytes[at % len] = *b,
            Edit::Insert(at, what) => {
                let at = at % (len + 1);
                bytes.splice(at..at, what.iter().copied());
            }
            Edit::Remove(at, n) if len > 0 => {
                let at = at % len;
                let end = (at + n).min(len);
                bytes.drain(at..end);
            }
            Edit::Truncate(at) => bytes.truncate(at % (len + 1)),
            Edit::Copy(from, to, n) if len > 0 => {
                let from = from % len;
                let piece: Vec<u8> = bytes[from..(from + n).min(len)].to_vec();
                let to = to % (len + 1);
                bytes.splice(to..to, piece);
            }
            _ => {}
        }
    }
    bytes
}

fn edit(tokens: &'static [&'static [u8]]) -> impl Strategy<Value = Edit> {
    let token = prop::sample::select(tokens).prop_map(<[u8]>::to_vec);
    let junk = prop::collection::vec(any::<u8>(), 1..16);
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Edit::Set(a, b)),
        (any::<usize>(), prop_oneof![token, junk]).prop_map(|(a, v)| Edit::Insert(a, v)),
        (any::<usize>(), 1..64usize).prop_map(|(a, n)| Edit::Remove(a, n)),
        any::<usize>().prop_map(Edit::Truncate),
        (any::<usize>(), any::<usize>(), 1..256usize).prop_map(|(a, b, n)| Edit::Copy(a, b, n)),
    ]
}

/// Inputs for a parser: a seed of `corpus` with up to 16 edits (tokens from
/// `tokens` among them) three times in four, else arbitrary bytes.
pub fn inputs(
    corpus: Vec<Vec<u8>>,
    tokens: &'static [&'static [u8]],
) -> impl Strategy<Value = Vec<u8>> {
    let mutated = (
        prop::sample::select(corpus),
        prop::collection::vec(edit(tokens), 0..16),
    )
        .prop_map(|(seed, edits)| apply(seed, &edits));
    prop_oneof![
        3 => mutated,
        1 => prop::collection::vec(any::<u8>(), 0..2048),
    ]
}

/// Tokens of a recording (NDJSON of wakemeter's record lines).
pub const RECORDING_TOKENS: &[&[u8]] = &[
    b"\n",
    b"\r\n",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"null",
    b"true",
    b"-1",
    b"0",
    b"1e309",
    b"-0.0",
    b"18446744073709551616",
    b"NaN",
    b"\"\\u0000\"",
    b"\"record\":\"header\"",
    b"\"record\":\"interval\"",
    b"\"schema_version\":1",
    b"\"schema_version\":99",
    b"\"threads\":[]",
    b"\"duration_ns\":0",
    b"{\"record\":\"header\",\"schema_version\":1}\n",
    b"\xff\xfe",
    b"\"\\ud800\"",
];

/// Tokens of an HTTP/1.x request head.
pub const HTTP_TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\r\n\r\n",
    b"\n",
    b"\r",
    b" ",
    b"GET ",
    b"HEAD ",
    b"POST ",
    b"/metrics",
    b"/",
    b"?",
    b"%",
    b"%00",
    b"HTTP/1.1",
    b"HTTP/1.0",
    b"HTTP/9.9",
    b"Host: ",
    b"Accept: application/openmetrics-text",
    b"Content-Length: 18446744073709551616",
    b"Transfer-Encoding: chunked",
    b"\x00",
    b"\xff",
    b"\x1b[31m",
    b":",
];

/// Tokens of the `/proc` and `/sys` files `wakemeter-procfs` parses.
pub const PROCFS_TOKENS: &[&[u8]] = &[
    b"\n",
    b" ",
    b"\t",
    b"(",
    b")",
    b") ",
    b":",
    b"-",
    b"\0",
    b"0",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-1",
    b"Name:\t",
    b"Tgid:\t",
    b"Threads:\t",
    b"VmHWM:\t",
    b"CapEff:\t",
    b"voluntary_ctxt_switches:\t",
    b"nonvoluntary_ctxt_switches:\t",
    b" kB",
    b"running",
    b"btime ",
    b"cgroup2",
    b"pid:[",
    b"]",
    b"r-xp",
    b" Z ",
    b"\xff",
];
