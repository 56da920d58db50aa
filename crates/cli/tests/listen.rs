//! `wakemeter watch --listen`: the metrics endpoint of the sidecar, and
//! its bad input (each a clear message, exit 2, nothing on stdout).
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufReader, Read, Write};
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

/// `watch --listen 127.0.0.1:0 --seconds SECONDS` of `pid` (without
/// eBPF), the address it announced, and its stderr (kept open, so that
/// what it says later never meets a closed pipe).
fn listening(
    pid: u32,
    seconds: &str,
) -> (
    std::process::Child,
    String,
    BufReader<std::process::ChildStderr>,
) {
    let mut child = watch(
        pid,
        &[
            "--every",
            "1",
            "--seconds",
            seconds,
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
    let addr = common::metrics_address(&mut err);
    (child, addr, err)
}

#[test]
fn watch_serves_the_target_on_loopback() {
    let target = Sleeper::new("30");
    let (mut child, addr, _err) = listening(target.pid(), "20");
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

#[test]
fn watch_ends_on_time_while_slow_clients_hold_the_endpoint() {
    let target = Sleeper::new("60");
    let (mut child, addr, _err) = listening(target.pid(), "2");
    // Clients that send a byte of a request every 200 ms for as long as
    // the test lasts (reconnecting when cut off), and one that never sends.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _idle = TcpStream::connect(&addr).unwrap();
    let tricklers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, addr) = (stop.clone(), addr.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(mut c) = TcpStream::connect(&addr) else {
                        return;
                    };
                    for b in b"GET /metrics HTTP/1.1\r\nX-Slow: ".iter().cycle() {
                        if stop.load(std::sync::atomic::Ordering::Relaxed)
                            || c.write_all(&[*b]).is_err()
                        {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            })
        })
        .collect();
    // `watch` ends at its --seconds while they are all still connected
    // (it used to wait for a slow client to leave).
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("watch --seconds 2 still running after {LIMIT:?} with slow clients connected");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    tricklers.into_iter().for_each(|t| t.join().unwrap());
}
