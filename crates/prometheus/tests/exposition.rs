//! The exposition of a real sampler of this process: names, units,
//! bounded cardinality, the series cap, and the endpoint's bad input.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use wakemeter::{SampleWait, SamplerBuilder};
use wakemeter_prometheus::{Error, Exporter, ExporterConfig, MetricsServer};

/// One test at a time: each samples this whole process and ranks its
/// threads, so another test's threads (a sampler, an updater, a server)
/// would take places in the ranking.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `n` threads named by `name(i)`, parked until the barrier is passed.
fn named_threads(
    n: usize,
    name: impl Fn(usize) -> String,
) -> (Arc<Barrier>, Vec<std::thread::JoinHandle<()>>) {
    let gate = Arc::new(Barrier::new(n + 1));
    let ready = Arc::new(Barrier::new(n + 1));
    let hs = (0..n)
        .map(|i| {
            let (g, r) = (gate.clone(), ready.clone());
            std::thread::Builder::new()
                .name(name(i))
                .spawn(move || {
                    r.wait();
                    g.wait();
                })
                .unwrap()
        })
        .collect();
    ready.wait();
    (gate, hs)
}

/// Sample lines (not comments) of an exposition.
fn series(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

fn value(text: &str, series_prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn numbered_threads_are_one_group_and_the_rest_is_other_under_a_cap() {
    let _one = one_at_a_time();
    let (gate, hs) = named_threads(40, |i| format!("pool-{i}"));
    let (gate2, hs2) = named_threads(6, |i| format!("solo{}", char::from(b'a' + i as u8)));
    let s = SamplerBuilder::new().build().unwrap();
    let mut probe = s.loop_probe("io-3").unwrap();
    for _ in 0..5 {
        probe.before_wait(Some(Duration::ZERO));
        probe.after_wait(0);
    }
    let exporter = Exporter::new(ExporterConfig::default().with_top_threads(3)).unwrap();
    s.sample().unwrap();
    assert!(exporter.update(&s));
    s.sample().unwrap();
    assert!(exporter.update(&s));
    let om = exporter.openmetrics();
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(om.contains("# TYPE wakemeter_thread_cpu_seconds counter\n# UNIT wakemeter_thread_cpu_seconds seconds\n"), "{om}");
    assert_eq!(
        value(&om, "wakemeter_thread_group_threads{thread=\"pool-{n}\"}"),
        Some(40.0),
        "{om}"
    );
    let labelled: Vec<&str> = series(&om)
        .into_iter()
        .filter(|l| l.starts_with("wakemeter_thread_cpu_seconds_total{"))
        .collect();
    assert_eq!(labelled.len(), 4, "3 groups and other: {labelled:?}");
    assert!(
        om.contains("wakemeter_thread_cpu_seconds_total{thread=\"other\"}"),
        "{om}"
    );
    assert_eq!(
        value(&om, "wakemeter_loop_wakeups_total{loop=\"io-{n}\"}"),
        Some(5.0),
        "{om}"
    );
    assert_eq!(
        value(
            &om,
            "wakemeter_loop_zero_timeout_waits_total{loop=\"io-{n}\"}"
        ),
        Some(5.0),
        "{om}"
    );
    assert!(
        om.contains("wakemeter_loop_poll_delay_seconds_bucket{le=\"+Inf\",loop=\"io-{n}\"}"),
        "{om}"
    );
    assert_eq!(
        value(
            &om,
            "wakemeter_findings{kind=\"busy_poller\",severity=\"critical\"}"
        ),
        Some(0.0),
        "{om}"
    );
    assert_eq!(
        value(&om, "wakemeter_exporter_dropped_series_total"),
        Some(0.0),
        "{om}"
    );
    assert!(
        om.contains(&format!(
            "wakemeter_target_info{{pid=\"{}\"",
            std::process::id()
        )),
        "{om}"
    );

    // A cap that leaves room for the fixed series and a few groups only.
    let small = Exporter::new(
        ExporterConfig::default()
            .with_top_threads(50)
            .with_max_series(64),
    )
    .unwrap();
    s.sample().unwrap();
    assert!(small.update(&s));
    let om = small.openmetrics();
    let n = series(&om).len();
    assert!(n <= 64, "{n} series over a cap of 64:\n{om}");
    assert_eq!(
        value(&om, "wakemeter_exporter_series"),
        Some(n as f64),
        "{om}"
    );
    assert!(
        value(&om, "wakemeter_exporter_dropped_series_total").unwrap() > 0.0,
        "{om}"
    );

    gate.wait();
    gate2.wait();
    hs.into_iter().chain(hs2).for_each(|h| h.join().unwrap());
}

#[test]
fn bad_config_and_bad_addresses_are_typed_errors() {
    let _one = one_at_a_time();
    assert!(matches!(
        Exporter::new(ExporterConfig::default().with_max_series(10)),
        Err(Error::InvalidConfig {
            field: "max_series",
            ..
        })
    ));
    assert!(matches!(
        Exporter::new(ExporterConfig::default().with_top_threads(0)),
        Err(Error::InvalidConfig {
            field: "top_threads",
            ..
        })
    ));
    let e = Exporter::new(ExporterConfig::default()).unwrap();
    let remote: SocketAddr = "0.0.0.0:0".parse().unwrap();
    assert!(matches!(
        MetricsServer::bind(remote, e.clone()),
        Err(Error::NotLoopback { .. })
    ));
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let err = MetricsServer::bind(taken.local_addr().unwrap(), e).unwrap_err();
    assert!(matches!(err, Error::Bind { .. }), "{err}");
    assert!(
        err.to_string().starts_with("cannot listen on 127.0.0.1:"),
        "{err}"
    );
}

fn get(addr: SocketAddr, path: &str, accept: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn a_stalled_client_holds_up_neither_sampling_nor_other_state() {
    let _one = one_at_a_time();
    let s = SamplerBuilder::new()
        .with_interval(Duration::from_millis(20))
        .build()
        .unwrap();
    let _run = s.start().unwrap();
    let exporter = Exporter::new(ExporterConfig::default()).unwrap();
    let _updates = exporter.spawn_updater(s.clone()).unwrap();
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), exporter.clone()).unwrap();
    // A client that connects and never sends its request: the server's
    // one thread waits on it, and sampling and updates go on.
    let stalled = TcpStream::connect(server.local_addr()).unwrap();
    let mut last = None;
    for _ in 0..5 {
        match s.wait_for_sample(last, Duration::from_secs(120)) {
            SampleWait::Stored { seq } => last = Some(seq),
            other => panic!("sampling stopped while a client stalled: {other:?}"),
        }
    }
    assert!(
        exporter
            .openmetrics()
            .contains("wakemeter_sampler_samples_total")
    );
    drop(stalled);
    let text = get(server.local_addr(), "/metrics", "*/*");
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.contains("Content-Type: text/plain; version=0.0.4"),
        "{text}"
    );
    assert!(!text.contains("# EOF"), "{text}");
    let om = get(
        server.local_addr(),
        "/metrics",
        "application/openmetrics-text;version=1.0.0",
    );
    assert!(
        om.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{om}"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(get(server.local_addr(), "/other", "*/*").starts_with("HTTP/1.1 404"));
}

#[test]
fn control_characters_in_names_never_reach_the_scraper_raw() {
    let _one = one_at_a_time();
    let names = ["esc\x1b[2Jbell\x07", "q\"b\\s", "nl\nx\tz"];
    let (gate, hs) = named_threads(names.len(), |i| names[i].to_string());
    let s = SamplerBuilder::new().build().unwrap();
    s.sample().unwrap();
    let exporter = Exporter::new(ExporterConfig::default().with_top_threads(100)).unwrap();
    assert!(exporter.update(&s));
    let om = exporter.openmetrics().to_string();
    for text in [om.clone(), exporter.prometheus_text()] {
        assert!(
            !text.bytes().any(|b| b.is_ascii_control() && b != b'\n'),
            "a raw control byte:\n{text:?}"
        );
        // ESC and BEL as visible text (the backslash escaped as
        // OpenMetrics asks); digits collapsed as for every name.
        assert!(
            text.contains(r#"wakemeter_thread_cpu_seconds_total{thread="esc\\x1b[{n}Jbell\\x07"}"#),
            "{text}"
        );
        // `"` escaped as OpenMetrics says, a tab shown. (The core may
        // already show `\` and newline in its own way: the names of
        // /proc's `status` escape them.)
        assert!(
            text.contains(r#"wakemeter_thread_cpu_seconds_total{thread="q\"b"#),
            "{text}"
        );
        assert!(text.contains(r#"x\\x09z"}"#), "{text}");
    }
    gate.wait();
    hs.into_iter().for_each(|h| h.join().unwrap());
}
