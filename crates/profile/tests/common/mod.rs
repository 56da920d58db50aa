//! Helpers of the profile tests: C programs with a known answer, built
//! from the test with `cc`, and run as children.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Compiles `tests/programs/<name>.c` with `flags` into the test's temp dir.
pub fn build(name: &str, out_name: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(out_name);
    let status = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .arg("-lpthread")
        .status()
        .expect("cc runs (install a C compiler: apt-get install gcc)");
    assert!(status.success(), "cc {name}.c failed");
    out
}

/// A running child, killed when dropped.
pub struct Running(pub Child);

impl Running {
    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `program args` and waits for its `ready` line.
pub fn start(program: &Path, args: &[&str]) -> Running {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("test program starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("reads the ready line");
    assert_eq!(line.trim(), "ready", "test program did not start");
    Running(child)
}
