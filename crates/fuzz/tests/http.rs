//! Fuzzes the metrics endpoint's request parsing through its public entry
//! point: a `MetricsServer` on loopback, sent arbitrary and mutated request
//! bytes. Every answer is an HTTP/1.1 response (or none, for a request cut
//! short), and after every input the server still answers a valid scrape.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use wakemeter::SamplerBuilder;
use wakemeter_fuzz::{HTTP_TOKENS, cases, corpus, inputs};
use wakemeter_prometheus::{Exporter, ExporterConfig, MetricsServer};

/// One server for every case (the server and its sampler live for the run).
fn server() -> SocketAddr {
    static SERVER: OnceLock<(MetricsServer, wakemeter::Sampler)> = OnceLock::new();
    let (s, _) = SERVER.get_or_init(|| {
        let sampler = SamplerBuilder::new().build().unwrap();
        let exporter = Exporter::new(ExporterConfig::default()).unwrap();
        sampler.sample().unwrap();
        sampler.sample().unwrap();
        exporter.update(&sampler);
        let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), exporter).unwrap();
        (server, sampler)
    });
    s.local_addr()
}

/// Sends `bytes` (then end of input) and reads the whole answer.
fn exchange(bytes: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(server()).unwrap();
    // Generous: only a server that hangs reaches it.
    c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    // The server may answer and close before reading everything: a failed
    // write or a reset is its right.
    let _ = c.write_all(bytes);
    let _ = c.shutdown(Shutdown::Write);
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    answer
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn any_request_gets_an_http_answer_and_the_server_goes_on(
        bytes in inputs(corpus("http"), HTTP_TOKENS),
    ) {
        let answer = exchange(&bytes);
        prop_assert!(
            answer.is_empty() || answer.starts_with(b"HTTP/1.1 "),
            "answer {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        );
        let scrape = exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        prop_assert!(scrape.starts_with(b"HTTP/1.1 200 "), "the server stopped answering");
    }
}
