//! `wakemeter watch --listen`: the metrics endpoint of the sidecar, and
//! its bad input (each a clear message, exit 2, nothing on stdout).
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Sleeper, run, watch};

/// A bound on waits and runs that only a hang reaches (a loaded machine
/// is slow, never wrong).
const LIMIT: Duration = Duration::from_secs(300);

fn refused(extra: &[&str], says: &str) {
    let target = Sleeper::new("30");
    let mut args = vec!["--every", "1", "--no-ebpf"];
    args.extend_from_slice(extra);
    let r = run(&mut watch(target.pid(), &args), LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.said());
    assert!(r.stderr().contains(says), "{}", r.said());
    assert!(r.stdout.is_empty(), "{}", r.said());
}

#[test]
fn a_non_loopback_address_needs_the_flag() {
    refused(
        &["--listen", "0.0.0.0:0"],
        "--listen 0.0.0.0:0: not a loopback address; the metrics would be reachable from other hosts. Add --allow-non-loopback to mean it",
    );
}

#[test]
fn a_busy_port_is_one_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    refused(
        &["--listen", &addr],
        &format!("wakemeter: cannot listen on {addr}: "),
    );
}

#[test]
fn an_address_not_on_this_host_is_one_clear_error() {
    // TEST-NET-1: never assigned to a host; binding it fails at once
    // and no packet is sent.
    refused(
        &["--listen", "192.0.2.1:9464", "--allow-non-loopback"],
        "wakemeter: cannot listen on 192.0.2.1:9464: ",
    );
    refused(
        &["--listen", "nowhere:port"],
        "expected PORT, HOST:PORT or [IPv6]:PORT",
    );
}

#[test]
fn watch_serves_the_target_on_loopback() {
    let target = Sleeper::new("30");
    let mut child = watch(
        target.pid(),
        &[
            "--every",
            "1",
            "--seconds",
            "20",
            "--no-ebpf",
            "--listen",
            "127.0.0.1:0",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "no address announced"
        );
        if let Some(rest) = line
            .trim()
            .strip_prefix("wakemeter: serving metrics at http://")
        {
            break rest.trim_end_matches("/metrics").to_string();
        }
    };
    let start = Instant::now();
    let body = loop {
        let mut c = TcpStream::connect(&addr).unwrap();
        write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        if out.contains("wakemeter_process_threads 1") {
            break out;
        }
        assert!(start.elapsed() < LIMIT, "never exposed the target:\n{out}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        body.contains(&format!(
            "wakemeter_target_info{{pid=\"{}\",name=\"sleep\"",
            target.pid()
        )),
        "{body}"
    );
    assert!(
        body.contains("wakemeter_thread_cpu_seconds_total{thread=\"sleep\"}"),
        "{body}"
    );
    let _ = child.kill();
    let _ = child.wait();
}
