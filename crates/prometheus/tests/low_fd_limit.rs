//! The endpoint under a low descriptor limit: with `ulimit -n 128` and 300
//! idle clients, the fixed cap of 256 connections never applied (the
//! process ran out of descriptors first), accepting failed with `EMFILE`
//! and 9 of 9 scrapes failed. The cap is now sized from the real limit at
//! bind, so idle clients are shed before the table is full and every
//! scrape is answered.
//!
//! Alone in its file: it lowers this test process's descriptor limit. The
//! idle clients are another process (a small Python script), which keeps
//! the limit it was started with.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wakemeter_prometheus::{Exporter, ExporterConfig, MetricsServer};

/// The bound of every wait (a hang guard, not a deadline).
const HANG_GUARD: Duration = Duration::from_secs(300);

const IDLE_CLIENTS: usize = 300;
const SCRAPES: usize = 10;

/// Opens the port read from stdin `IDLE_CLIENTS` times and holds the
/// connections (re-opening those the server closes) until stdin closes.
const IDLE_SCRIPT: &str = r#"
import selectors, socket, sys
port = int(sys.stdin.readline())
n = int(sys.argv[1])
sel = selectors.DefaultSelector()
def connect():
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
for _ in range(n):
    connect()
print("ready", flush=True)
sel.register(sys.stdin, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        if key.fileobj is sys.stdin:
            sys.exit(0)
        try:
            data = key.fileobj.recv(4096)
        except OSError:
            data = b""
        if not data:
            sel.unregister(key.fileobj)
            key.fileobj.close()
            connect()
"#;

fn set_soft_limit(soft: u64) -> libc::rlimit {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write structs we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut old), 0);
        let new = libc::rlimit {
            rlim_cur: old.rlim_max.min(soft),
            rlim_max: old.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &new), 0);
    }
    old
}

/// One `GET /metrics`, retried on a refused or reset connection (one shed
/// by the server before it sent its request counts as a retry, not a
/// failure) until [`HANG_GUARD`]; returns the status line and the tries.
fn scrape(addr: std::net::SocketAddr) -> (String, u32) {
    let start = Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        let answer = (|| {
            let mut c = TcpStream::connect(addr).ok()?;
            c.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
            c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .ok()?;
            let mut out = String::new();
            c.read_to_string(&mut out).ok()?;
            Some(out.lines().next().unwrap_or_default().to_owned())
        })();
        match answer {
            Some(status) if !status.is_empty() => return (status, tries),
            _ => assert!(start.elapsed() < HANG_GUARD, "no answer in {tries} tries"),
        }
    }
}

#[test]
fn under_ulimit_128_with_300_idle_clients_every_scrape_is_answered() {
    let mut idle = Command::new("python3")
        .args(["-c", IDLE_SCRIPT, &IDLE_CLIENTS.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs (apt-get install python3)");
    let old = set_soft_limit(128);
    let exporter = Exporter::new(ExporterConfig::default()).unwrap();
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), exporter).unwrap();
    let cap = server.max_connections();
    assert!((1..=64).contains(&cap), "cap {cap} under a limit of 128");
    let addr = server.local_addr();
    let mut stdin = idle.stdin.take().unwrap();
    writeln!(stdin, "{}", addr.port()).unwrap();
    let mut line = String::new();
    BufReader::new(idle.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let mut answers = Vec::new();
    for _ in 0..SCRAPES {
        answers.push(scrape(addr));
    }
    let stats = server.stats();
    eprintln!(
        "limit 128, {IDLE_CLIENTS} idle clients, cap {cap}: scrapes {answers:?}; endpoint {stats:?}"
    );
    drop(stdin);
    let _ = idle.kill();
    let _ = idle.wait();
    drop(server);
    // SAFETY: setrlimit reads the struct we own.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) };
    for (status, _) in &answers {
        assert!(status.starts_with("HTTP/1.1 200"), "{answers:?}");
    }
    // The idle clients filled the cap and were shed, not the descriptors.
    assert!(stats.shed > 0, "{stats:?}");
    assert_eq!(stats.accept_errors, 0, "{stats:?}");
}
