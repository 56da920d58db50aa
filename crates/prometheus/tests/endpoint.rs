//! The metrics endpoint under hostile and careless clients: idle and
//! trickling connections, more connections than the cap, a slow client
//! at shutdown, oversized and malformed requests, and gzip. No timing is
//! asserted: each test waits for a condition with a generous bound, and
//! what it checks is that a scrape or a drop completes while the hostile
//! clients are still connected.
#![cfg(target_os = "linux")]
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use wakemeter::SamplerBuilder;
use wakemeter_prometheus::{
    Error, Exporter, ExporterConfig, MAX_REQUEST_BYTES, MAX_REQUEST_DEADLINE, MetricsServer,
    ServerOptions,
};

/// Bound of every wait: far beyond what any step needs on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// An exporter with one real update of this process, and its endpoint.
fn served() -> (Exporter, MetricsServer) {
    let s = SamplerBuilder::new().build().unwrap();
    s.sample().unwrap();
    let exporter = Exporter::new(ExporterConfig::default()).unwrap();
    assert!(exporter.update(&s));
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), exporter.clone()).unwrap();
    (exporter, server)
}

/// Sends `request` as is and reads the whole answer (the server closes).
fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    c.write_all(request).unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    out
}

fn split(answer: &[u8]) -> (String, Vec<u8>) {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    (
        String::from_utf8(answer[..end].to_vec()).unwrap(),
        answer[end + 4..].to_vec(),
    )
}

fn scrape(addr: SocketAddr) -> (String, Vec<u8>) {
    split(&exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n",
    ))
}

/// Clients that each send one byte of a request every `every`, forever,
/// until dropped.
struct Tricklers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Tricklers {
    fn start(addr: SocketAddr, n: usize, every: Duration) -> Tricklers {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                let mut c = TcpStream::connect(addr).unwrap();
                std::thread::spawn(move || {
                    let request = b"GET /metrics HTTP/1.1\r\nX-Slow: ";
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        // A closed connection (the deadline) ends in an
                        // error; reconnect to keep trickling.
                        let byte = request.get(i).copied().unwrap_or(b'a');
                        if c.write_all(&[byte]).is_err() {
                            match TcpStream::connect(addr) {
                                Ok(n) => c = n,
                                Err(_) => return,
                            }
                            i = 0;
                        } else {
                            i += 1;
                        }
                        std::thread::sleep(every);
                    }
                })
            })
            .collect();
        Tricklers { stop, threads }
    }
}

impl Drop for Tricklers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Waits (bounded) for `cond`.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn idle_and_trickling_clients_delay_no_scrape() {
    let (_exporter, server) = served();
    let addr = server.local_addr();
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let trickling = Tricklers::start(addr, 10, Duration::from_millis(500));
    wait_until("the server accepted every client", || {
        server.stats().connections >= 110
    });
    // Several scrapes in a row, each while all those clients hold on.
    for _ in 0..5 {
        let (head, body) = scrape(addr);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(body.ends_with(b"# EOF\n"));
    }
    drop(trickling);
    drop(idle);
}

#[test]
fn a_client_slower_than_the_deadline_is_cut_off_with_408() {
    let (_exporter, server) = served();
    let mut c = TcpStream::connect(server.local_addr()).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    // Never finishes its head: the server answers 408 at its deadline
    // and closes, whatever the client keeps sending.
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{text}"
    );
    assert!(server.stats().timeouts >= 1);
}

#[test]
fn beyond_the_cap_the_oldest_waiting_connection_is_shed_and_scrapes_go_on() {
    let (exporter, _) = served();
    // A small cap, and a deadline no step of the test comes near.
    let cap = 8;
    let server = MetricsServer::bind_with(
        "127.0.0.1:0".parse().unwrap(),
        exporter,
        ServerOptions::default()
            .with_max_connections(cap)
            .with_request_deadline(Duration::from_secs(600)),
    )
    .unwrap();
    let addr = server.local_addr();
    let mut held: Vec<TcpStream> = Vec::new();
    for i in 0..cap + 3 {
        held.push(TcpStream::connect(addr).unwrap());
        // One at a time, so that "oldest" is the order of `held`.
        wait_until("the server accepted the client", || {
            server.stats().connections > i as u64
        });
    }
    assert_eq!(server.stats().shed, 3);
    assert_eq!(server.stats().timeouts, 0);
    // The 3 oldest were closed with a 503.
    for c in held.iter_mut().take(3) {
        assert!(read_all(c).starts_with(b"HTTP/1.1 503 Service Unavailable\r\n"));
    }
    let (head, _) = scrape(addr);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    // The scrape shed one more (the oldest still open), not itself.
    assert_eq!(server.stats().shed, 4);
    assert!(read_all(&mut held[3]).starts_with(b"HTTP/1.1 503"));
}

fn read_all(c: &mut TcpStream) -> Vec<u8> {
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    out
}

#[test]
fn bad_server_options_are_typed_errors() {
    let (exporter, _) = served();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    for (options, field) in [
        (
            ServerOptions::default().with_max_connections(0),
            "max_connections",
        ),
        (
            ServerOptions::default().with_request_deadline(Duration::ZERO),
            "request_deadline",
        ),
        (
            ServerOptions::default().with_request_deadline(MAX_REQUEST_DEADLINE * 2),
            "request_deadline",
        ),
    ] {
        match MetricsServer::bind_with(addr, exporter.clone(), options) {
            Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn drop_returns_while_slow_clients_are_still_connected() {
    let (_exporter, server) = served();
    let addr = server.local_addr();
    let trickling = Tricklers::start(addr, 3, Duration::from_millis(200));
    let idle = TcpStream::connect(addr).unwrap();
    // A client that asked and never reads its answer.
    let mut asked = TcpStream::connect(addr).unwrap();
    asked
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    wait_until("the server accepted every client", || {
        server.stats().connections >= 5
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(server);
        let _ = done_tx.send(());
    });
    // The clients are all still there while the drop completes.
    assert!(
        done_rx.recv_timeout(PATIENCE).is_ok(),
        "dropping the server waited on its clients"
    );
    // And the port is closed: nothing accepts there any more.
    wait_until("the listening socket is closed", || {
        TcpStream::connect(addr).is_err()
    });
    drop((trickling, idle, asked));
}

#[test]
fn every_answer_has_its_status() {
    let (_exporter, server) = served();
    let addr = server.local_addr();
    let status = |req: &[u8]| {
        let (head, body) = split(&exchange(addr, req));
        (head, body)
    };
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    big.resize(MAX_REQUEST_BYTES + 100, b'a');
    let (head, _) = status(&big);
    assert!(
        head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{head}"
    );
    // A 9 KiB head whose blank line is in the same write as the rest (it
    // may arrive in the read that passes the limit).
    let mut whole = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    whole.resize(9 * 1024, b'a');
    whole.extend_from_slice(b"\r\n\r\n");
    let (head, _) = status(&whole);
    assert!(
        head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{head}"
    );
    // Exactly at the limit, blank line included: answered.
    let mut at_limit = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    at_limit.resize(MAX_REQUEST_BYTES - 4, b'a');
    at_limit.extend_from_slice(b"\r\n\r\n");
    let (head, _) = status(&at_limit);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    let (head, _) = status(b"POST /metrics HTTP/1.1\r\n\r\n");
    assert!(
        head.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nAllow: GET, HEAD"), "{head}");
    let (head, _) = status(b"hello there\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
    let (head, _) = status(b"GET /other HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 404 Not Found\r\n"), "{head}");
    let (get_head, get_body) = status(b"GET /metrics HTTP/1.0\r\n\r\n");
    let (head, body) = status(b"HEAD /metrics HTTP/1.0\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(body.is_empty());
    assert!(
        head.contains(&format!("Content-Length: {}", get_body.len())),
        "{head}\n{get_head}"
    );
    assert!(
        get_head.contains("Content-Type: text/plain; version=0.0.4"),
        "{get_head}"
    );
}

#[test]
fn gzip_when_the_client_asks_for_it() {
    let (exporter, server) = served();
    let addr = server.local_addr();
    let (head, body) = split(&exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\nAccept-Encoding: gzip\r\n\r\n",
    ));
    assert!(head.contains("\r\nContent-Encoding: gzip"), "{head}");
    assert!(head.contains(&format!("Content-Length: {}", body.len())));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, *exporter.openmetrics());
    assert!(body.len() * 3 < text.len(), "gzip barely shrank the text");
    // Refused or not asked: plain.
    let (head, body) = split(&exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip;q=0, identity\r\n\r\n",
    ));
    assert!(!head.contains("Content-Encoding"), "{head}");
    assert_eq!(String::from_utf8(body).unwrap(), exporter.prometheus_text());
}
