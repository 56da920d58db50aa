//! `watch`/`record` over many real processes under a low descriptor limit:
//! every sampler of the CLI shares one descriptor budget, processes that
//! cannot be covered are named in one warning, and an incomplete `record`
//! says so in its exit status unless `--allow-partial` accepts it.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use common::{bin, run};

/// Generous: the runs last a few seconds on a quiet machine.
const LIMIT: Duration = Duration::from_secs(120);

/// `count` copies of `sleep` under a name of their own, killed and reaped on drop.
struct Flock {
    children: Vec<Child>,
    name: String,
    dir: PathBuf,
}

impl Flock {
    fn new(tag: &str, count: usize) -> Flock {
        let name = format!("wm{tag}{}", std::process::id() % 100_000);
        let dir = std::env::temp_dir().join(format!("wakemeter-fds-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join(&name);
        std::fs::copy("/bin/sleep", &exe).unwrap();
        let children = (0..count)
            .map(|_| Command::new(&exe).arg("300").spawn().unwrap())
            .collect();
        Flock {
            children,
            name,
            dir,
        }
    }

    fn pids(&self) -> BTreeSet<u64> {
        self.children.iter().map(|c| u64::from(c.id())).collect()
    }
}

impl Drop for Flock {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `wakemeter ARGS` under a soft descriptor limit of `nofile`.
fn limited(nofile: u32, args: &[&str]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
        .arg(bin().get_program())
        .args(args);
    c
}

/// The PIDs a warning line of stderr names after its last ": ".
fn named(stderr: &str, marker: &str) -> BTreeSet<u64> {
    stderr
        .lines()
        .filter(|l| l.contains(marker))
        .flat_map(|l| {
            l.rsplit(": ")
                .next()
                .unwrap()
                .split(", ")
                .map(|p| p.parse::<u64>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn fifty_processes_under_256_descriptors_are_all_watched() {
    // With a budget per sampler, each of the 50 samplers kept its threads'
    // files besides its own three (250 descriptors and more): the last ones
    // met EMFILE and were never watched. One budget for the process leaves
    // room for every sampler.
    let flock = Flock::new("w", 50);
    let r = run(
        &mut limited(
            256,
            &[
                "watch",
                "--name",
                &flock.name,
                "--every",
                "1",
                "--seconds",
                "4",
                "--json",
                "--no-ebpf",
            ],
        ),
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.said());
    let reported: BTreeSet<u64> = r
        .stdout()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["target"]["pid"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(reported, flock.pids(), "{}", r.said());
}

fn record(flock: &Flock, out: &Path, extra: &[&str]) -> common::Run {
    let mut args = vec![
        "record",
        "--name",
        &flock.name,
        "--seconds",
        "3",
        "--interval",
        "0.5",
        "--no-ebpf",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    // 128 descriptors hold about 25 recorded processes (a sampler's three
    // files and its section file each, within the headroom left to the host).
    run(&mut limited(128, &args), LIMIT)
}

#[test]
fn a_record_that_cannot_cover_its_selection_fails_and_names_what_is_missing() {
    let flock = Flock::new("r", 60);
    let out = flock.dir.join("rec.ndjson");
    let r = record(&flock, &out, &[]);
    assert_eq!(r.code, Some(1), "{}", r.said());
    let missing = named(&r.stderr(), "never recorded");
    assert!(!missing.is_empty(), "{}", r.said());
    assert!(missing.is_subset(&flock.pids()), "{}", r.said());
    assert!(r.stderr().contains("--allow-partial"), "{}", r.said());
    // What could be recorded is still written, and nothing named missing is in it.
    let written: BTreeSet<u64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            (v["record"] == "header").then(|| v["target"]["pid"].as_u64())?
        })
        .collect();
    assert!(!written.is_empty(), "{}", r.said());
    assert!(written.is_disjoint(&missing), "{written:?} {missing:?}");
    assert_eq!(
        written.len() + missing.len(),
        flock.pids().len(),
        "every process is either recorded or named: {}",
        r.said()
    );

    let accepted = record(&flock, &out, &["--allow-partial"]);
    assert_eq!(accepted.code, Some(0), "{}", accepted.said());
    assert!(
        !named(&accepted.stderr(), "never recorded").is_empty(),
        "still named: {}",
        accepted.said()
    );
}
