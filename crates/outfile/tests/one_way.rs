//! No library or CLI code writes a file any other way than through this
//! crate: a scan of every crate's sources (test code left out) for the
//! standard library's ways to create or truncate a file.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// Ways to create or truncate a file that follow links.
const FORBIDDEN: &[&str] = &[
    "File::create(",
    "fs::write(",
    ".create(true)",
    ".truncate(true)",
    "create_new(true)",
    "create_dir_all(",
    "create_dir(",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "tests") {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(p);
        }
    }
}

#[test]
fn every_file_is_written_through_wakemeter_outfile() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for c in std::fs::read_dir(&crates).unwrap().flatten() {
        let src = c.path().join("src");
        // This crate's own tests, and the fuzz harnesses' scratch files,
        // are not outputs.
        if src.is_dir() && c.file_name() != "fuzz" {
            sources(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "{} source files found", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            // Test code from here on (unit tests close their files).
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let code = line.split("//").next().unwrap_or("");
            for bad in FORBIDDEN {
                let hit = code.match_indices(bad).any(|(at, _)| {
                    // A whole name: `OutFile::create(` (the one way) or
                    // `PerfettoFile::create(` is not `File::create(`.
                    !code[..at]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if hit {
                    found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "write these through wakemeter_outfile:\n{}",
        found.join("\n")
    );
}
