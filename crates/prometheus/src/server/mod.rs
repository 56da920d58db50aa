//! A small HTTP endpoint for the exposition: `GET /metrics` on a thread
//! of its own that no client can hold up. It never touches the sampler:
//! a scrape copies a pointer to the text of the latest update.
//!
//! One event loop ([`mio`]: epoll on Linux) serves every connection at
//! once, each with a deadline for the whole request, from accept to the
//! last byte of the answer ([`REQUEST_DEADLINE`] by default), so idle or
//! trickling clients cost a descriptor and a few KiB each and delay
//! nobody. At most [`MAX_CONNECTIONS`] (by default) are open, and never
//! more than half of the descriptors free under the soft `RLIMIT_NOFILE`
//! when the server is bound ([`MetricsServer::max_connections`]): a new
//! connection beyond that closes the oldest one still waiting for its
//! request (a scraper sends its request at once, so it is never the one
//! shed). Sized from the real limit, the cap applies before the process
//! runs out of descriptors, however low `ulimit -n` is: with the fixed cap
//! alone, under a limit of 128 and 300 idle clients, accepting failed
//! with `EMFILE`, the scraper's connection waited in the queue behind idle
//! ones and 9 of 9 scrapes failed. The server also keeps one descriptor in
//! reserve ([`RESERVED_DESCRIPTORS`]): when an accept fails with `EMFILE`
//! or `ENFILE` anyway (the host took the rest), the reserve is closed to
//! accept the queued connection and the oldest connection still waiting
//! for its request is shed to take the reserve back. Only when there is
//! nothing to shed does accepting pause, 10 ms doubling up to 1 s, each
//! failure counted (`wakemeter_exporter_http_accept_errors_total`,
//! [`ServerStats`]).
//!
//! Why mio and not a hand-written poll loop or an HTTP crate: mio is the
//! readiness layer under tokio, already in the CLI's build (crossterm
//! uses it), and gives a waker that ends the loop at once on drop; an
//! HTTP server crate would bring an async runtime or a thread per
//! connection, for an endpoint that answers one path. What it costs: no
//! new crate in the CLI's build (crossterm already brings mio, the
//! profiler flate2); the release CLI grew by 50 KB (6,163,032 to
//! 6,213,376 bytes, with gzip and the new series), and this crate builds
//! in 9 s of the CLI's 2 min 23 s release rebuild. The request parser
//! is hand-written because all it reads is the request line and two
//! headers (`Accept`, `Accept-Encoding`) of a head of at most 8 KiB.
//!
//! Content negotiation as Prometheus expects: OpenMetrics 1.0 when the
//! `Accept` header asks for `application/openmetrics-text` (the
//! Prometheus server does), the text format 0.0.4 otherwise; gzip when
//! `Accept-Encoding` allows it (Prometheus asks for it).

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::error::Error;
use crate::exporter::Exporter;
use crate::state::ServerStats;

mod http;

pub use http::MAX_REQUEST_BYTES;
use http::{Cache, Conn};

/// Default of [`ServerOptions::max_connections`].
pub const MAX_CONNECTIONS: usize = 256;
/// Default of [`ServerOptions::request_deadline`].
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Largest accepted [`ServerOptions::max_connections`].
pub const MAX_MAX_CONNECTIONS: usize = 65_536;
/// Largest accepted [`ServerOptions::request_deadline`].
pub const MAX_REQUEST_DEADLINE: Duration = Duration::from_secs(3_600);
/// Descriptors the server holds in reserve (an open `/dev/null`) to
/// accept a scraper's connection when the process is out of descriptors.
pub const RESERVED_DESCRIPTORS: usize = 1;
/// Share of the descriptors free at bind (under the soft
/// `RLIMIT_NOFILE`) that connections may hold, as a divisor: the host and
/// its samplers keep the other half.
pub const CONNECTION_SHARE_DIVISOR: usize = 2;

/// How a [`MetricsServer`] treats its clients.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerOptions {
    /// Most connections open at once, 1 to [`MAX_MAX_CONNECTIONS`]; a new
    /// one beyond it closes the oldest connection that has not sent its
    /// whole request yet (with `503`). Each open connection holds one
    /// file descriptor and at most [`MAX_REQUEST_BYTES`] of request.
    /// Lowered at bind to half of the descriptors then free under the
    /// soft `RLIMIT_NOFILE` ([`MetricsServer::max_connections`] says what
    /// applies). Default [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// Time a client has for a whole request, from the accept to the last
    /// byte of the answer, 1 ms to [`MAX_REQUEST_DEADLINE`]; then the
    /// connection is closed (with `408` if the request was not complete).
    /// Default [`REQUEST_DEADLINE`].
    pub request_deadline: Duration,
    /// Whether an address other than loopback may be bound. Off by
    /// default: metrics say a lot about a host.
    pub allow_non_loopback: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_connections: MAX_CONNECTIONS,
            request_deadline: REQUEST_DEADLINE,
            allow_non_loopback: false,
        }
    }
}

impl ServerOptions {
    /// Sets [`ServerOptions::max_connections`].
    #[must_use]
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }

    /// Sets [`ServerOptions::request_deadline`].
    #[must_use]
    pub fn with_request_deadline(mut self, d: Duration) -> Self {
        self.request_deadline = d;
        self
    }

    /// Sets [`ServerOptions::allow_non_loopback`].
    #[must_use]
    pub fn with_allow_non_loopback(mut self, allow: bool) -> Self {
        self.allow_non_loopback = allow;
        self
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |field, reason: String| Err(Error::InvalidConfig { field, reason });
        if !(1..=MAX_MAX_CONNECTIONS).contains(&self.max_connections) {
            return bad(
                "max_connections",
                format!("must be 1 to {MAX_MAX_CONNECTIONS}"),
            );
        }
        if !(Duration::from_millis(1)..=MAX_REQUEST_DEADLINE).contains(&self.request_deadline) {
            return bad(
                "request_deadline",
                format!("must be 1 ms to {} s", MAX_REQUEST_DEADLINE.as_secs()),
            );
        }
        Ok(())
    }
}
/// Longest wait of the server's thread between two looks at its stop
/// flag, whatever its clients do: dropping a [`MetricsServer`] returns
/// within about this long (at once in practice: drop wakes the thread).
pub const STOP_WITHIN: Duration = Duration::from_millis(250);

/// First and longest pause of accepting after a failed accept.
const ACCEPT_PAUSE_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The HTTP endpoint; serves until dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Waker,
    exporter: Exporter,
    handle: Option<JoinHandle<()>>,
    max_connections: usize,
}

/// What the reserve descriptor is: any file that opens on every Unix.
const RESERVE_PATH: &str = "/dev/null";

/// Descriptors free now under the soft `RLIMIT_NOFILE` (the limit less
/// those open, counted in `/proc/self/fd` or `/dev/fd`); `None` without a
/// finite limit or a way to count.
fn descriptors_free() -> Option<usize> {
    let limit = wakemeter_procfs::process::open_fd_limit()?;
    let open = wakemeter_procfs::process::open_fd_count().ok()?;
    usize::try_from(limit.saturating_sub(open)).ok()
}

impl MetricsServer {
    /// Serves `exporter` on `addr`, which must be a loopback address
    /// (127.0.0.0/8 or ::1): metrics say a lot about a host, and a
    /// sidecar's scraper runs beside it. Port 0 picks a free port
    /// ([`MetricsServer::local_addr`] tells which). The default
    /// [`ServerOptions`].
    ///
    /// # Errors
    /// [`Error::NotLoopback`] for any other address (see
    /// [`MetricsServer::bind_any_address`]); [`Error::Bind`] when the
    /// address cannot be bound (in use, not on this host, no permission);
    /// [`Error::EventLoop`] when the event loop cannot be set up (out of
    /// descriptors); [`Error::Spawn`] when the thread cannot be started.
    pub fn bind(addr: SocketAddr, exporter: Exporter) -> Result<MetricsServer, Error> {
        Self::bind_with(addr, exporter, ServerOptions::default())
    }

    /// As [`MetricsServer::bind`], for any address: the caller has decided
    /// to expose the metrics beyond this host.
    ///
    /// # Errors
    /// As [`MetricsServer::bind`], without [`Error::NotLoopback`].
    pub fn bind_any_address(addr: SocketAddr, exporter: Exporter) -> Result<MetricsServer, Error> {
        Self::bind_with(
            addr,
            exporter,
            ServerOptions::default().with_allow_non_loopback(true),
        )
    }

    /// As [`MetricsServer::bind`], with `options`.
    ///
    /// # Errors
    /// As [`MetricsServer::bind`] ([`Error::NotLoopback`] only without
    /// [`ServerOptions::allow_non_loopback`]), and
    /// [`Error::InvalidConfig`] for an option out of range.
    pub fn bind_with(
        addr: SocketAddr,
        exporter: Exporter,
        options: ServerOptions,
    ) -> Result<MetricsServer, Error> {
        options.validate()?;
        if !options.allow_non_loopback && !addr.ip().is_loopback() {
            return Err(Error::NotLoopback { addr });
        }
        let bind_err = |source| Error::Bind { addr, source };
        let std_listener = StdListener::bind(addr).map_err(bind_err)?;
        let local = std_listener.local_addr().map_err(bind_err)?;
        std_listener.set_nonblocking(true).map_err(bind_err)?;
        let mut listener = TcpListener::from_std(std_listener);
        let poll = Poll::new().map_err(Error::EventLoop)?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(Error::EventLoop)?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(Error::EventLoop)?;
        let reserve = std::fs::File::open(RESERVE_PATH).ok();
        let mut options = options;
        options.max_connections = options.max_connections.min(
            descriptors_free().map_or(usize::MAX, |free| (free / CONNECTION_SHARE_DIVISOR).max(1)),
        );
        let max_connections = options.max_connections;
        let stop = Arc::new(AtomicBool::new(false));
        let mut event_loop = EventLoop {
            poll,
            listener,
            exporter: exporter.clone(),
            options,
            stop: stop.clone(),
            conns: BTreeMap::new(),
            next_token: WAKER.0 + 1,
            cache: Cache::default(),
            reserve,
        };
        let handle = std::thread::Builder::new()
            .name("wakemeter-http".to_string())
            .spawn(move || event_loop.run())
            .map_err(Error::Spawn)?;
        Ok(MetricsServer {
            addr: local,
            stop,
            waker,
            exporter,
            handle: Some(handle),
            max_connections,
        })
    }

    /// The address served (with the port chosen when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Most connections open at once: [`ServerOptions::max_connections`],
    /// or half of the descriptors free under the soft `RLIMIT_NOFILE` when
    /// the server was bound if that is fewer (at least 1).
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// What the endpoint did so far (with every other server of the same
    /// exporter).
    pub fn stats(&self) -> ServerStats {
        self.exporter.http().stats()
    }
}

impl Drop for MetricsServer {
    /// Stops the server's thread and joins it: within [`STOP_WITHIN`]
    /// whatever the clients do (every socket is non-blocking), and at once
    /// in practice (the thread is woken). Open connections are closed.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // If the wake fails the thread still sees the flag within STOP_WITHIN.
        let _ = self.waker.wake();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

struct EventLoop {
    poll: Poll,
    listener: TcpListener,
    exporter: Exporter,
    options: ServerOptions,
    stop: Arc<AtomicBool>,
    /// By token, which grows with each accept: the first is the oldest.
    conns: BTreeMap<usize, Conn>,
    next_token: usize,
    cache: Cache,
    /// The descriptor kept to accept with when the process has no other
    /// ([`RESERVED_DESCRIPTORS`]); `None` while it is in use.
    reserve: Option<std::fs::File>,
}

impl EventLoop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        // Whether connections may be waiting in the listener's queue
        // (epoll reports a new one once), and when accepting resumes after
        // a failed accept.
        let mut may_accept = true;
        let mut paused_until: Option<Instant> = None;
        let mut pause = ACCEPT_PAUSE_FIRST;
        while !self.stop.load(Ordering::Acquire) {
            let now = Instant::now();
            let mut wait = STOP_WITHIN;
            if let Some(first) = self.conns.values().map(|c| c.deadline).min() {
                wait = wait.min(first.saturating_duration_since(now));
            }
            if let Some(until) = paused_until {
                wait = wait.min(until.saturating_duration_since(now));
            } else if may_accept {
                // More connections queued than one batch: read the
                // requests just accepted, then accept on.
                wait = Duration::ZERO;
            }
            if self.reserve.is_none() {
                // Taken back once a connection has given its descriptor.
                self.reserve = std::fs::File::open(RESERVE_PATH).ok();
            }
            if let Err(e) = self.poll.poll(&mut events, Some(wait))
                && e.kind() != io::ErrorKind::Interrupted
            {
                // Not expected from epoll_wait; never spin on it.
                std::thread::sleep(STOP_WITHIN);
                continue;
            }
            for ev in &events {
                match ev.token() {
                    WAKER => {}
                    LISTENER => may_accept = true,
                    Token(t) => {
                        let done = self
                            .conns
                            .get_mut(&t)
                            .is_some_and(|c| c.advance(&self.exporter, &mut self.cache));
                        if done {
                            self.conns.remove(&t);
                        }
                    }
                }
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            let now = Instant::now();
            if may_accept && paused_until.is_none_or(|u| now >= u) {
                paused_until = None;
                match self.accept_all(now + self.options.request_deadline) {
                    Ok(drained) => {
                        may_accept = !drained;
                        pause = ACCEPT_PAUSE_FIRST;
                    }
                    Err(()) => {
                        paused_until = Some(now + pause);
                        pause = (pause * 2).min(ACCEPT_PAUSE_MAX);
                    }
                }
            }
            let late: Vec<usize> = self
                .conns
                .iter()
                .filter(|(_, c)| c.deadline <= now)
                .map(|(t, _)| *t)
                .collect();
            for t in late {
                if let Some(c) = self.conns.remove(&t) {
                    bump(&self.exporter.http().timeouts);
                    c.close_with("408 Request Timeout");
                }
            }
        }
    }

    /// Accepts queued connections, at most half of
    /// [`ServerOptions::max_connections`] in one call so that the requests
    /// of those accepted are read before any of them could be shed as
    /// waiting. `Ok(true)` when the queue is empty, `Ok(false)` when more
    /// may wait; `Err` after a failed accept that calls for a pause (out
    /// of descriptors with nothing to shed, or out of memory), counted.
    fn accept_all(&mut self, deadline: Instant) -> Result<bool, ()> {
        let batch = (self.options.max_connections / 2).max(1);
        for _ in 0..batch {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    bump(&self.exporter.http().connections);
                    if self.conns.len() >= self.options.max_connections
                        && !self.shed_oldest_waiting()
                    {
                        // Every slot is answering: the newcomer waits no
                        // better elsewhere, it is the one closed.
                        continue;
                    }
                    self.admit(stream, deadline);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                    ) => {}
                Err(e) if out_of_descriptors(&e) && self.reserve.is_some() => {
                    // The reserve's descriptor accepts the queued
                    // connection; shedding the oldest waiting one gives
                    // the reserve its descriptor back.
                    self.reserve = None;
                    if let Ok((stream, _)) = self.listener.accept() {
                        bump(&self.exporter.http().connections);
                        self.shed_oldest_waiting();
                        self.admit(stream, deadline);
                    }
                    self.reserve = std::fs::File::open(RESERVE_PATH).ok();
                }
                // EMFILE or ENFILE without a reserve, ENOBUFS, ENOMEM, or
                // anything unforeseen: the queued connection stays queued,
                // and retrying at once would spin.
                Err(_) => {
                    bump(&self.exporter.http().accept_errors);
                    return Err(());
                }
            }
        }
        Ok(false)
    }

    /// Closes the oldest connection that has not sent its whole request
    /// (with `503`), counted as shed; `false` when every one is answering.
    fn shed_oldest_waiting(&mut self) -> bool {
        let oldest_waiting = self
            .conns
            .iter()
            .find(|(_, c)| c.reply.is_none())
            .map(|(t, _)| *t);
        match oldest_waiting.and_then(|t| self.conns.remove(&t)) {
            Some(c) => {
                bump(&self.exporter.http().shed);
                c.close_with("503 Service Unavailable");
                true
            }
            None => false,
        }
    }

    /// Registers a new connection, to be answered by `deadline`.
    fn admit(&mut self, mut stream: TcpStream, deadline: Instant) {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(WAKER.0 + 1);
        if self
            .poll
            .registry()
            .register(
                &mut stream,
                Token(token),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            return;
        }
        self.conns.insert(
            token,
            Conn {
                stream,
                deadline,
                request: Vec::new(),
                reply: None,
            },
        );
    }
}

/// Whether `e` says the process or the system is out of descriptors
/// (`EMFILE`, `ENFILE`).
fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

#[cfg(test)]
mod tests {
    use super::http::*;
    use super::*;

    #[test]
    fn requests_are_routed_and_bad_ones_named() {
        let m = |h: bool, o: bool, g: bool| Route::Metrics {
            head_only: h,
            openmetrics: o,
            gzip: g,
        };
        assert_eq!(route(b"GET /metrics HTTP/1.1"), m(false, false, false));
        assert_eq!(
            route(
                b"GET /metrics?x=1 HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1\r\nAccept-Encoding: gzip\r\nHost: a"
            ),
            m(false, true, true)
        );
        assert_eq!(
            route(b"HEAD /metrics HTTP/1.0\r\naccept-encoding: br, gzip;q=0"),
            m(true, false, false)
        );
        assert_eq!(
            route(b"GET / HTTP/1.1"),
            Route::NotFound { head_only: false }
        );
        assert_eq!(route(b"POST /metrics HTTP/1.1"), Route::MethodNotAllowed);
        assert_eq!(route(b"GET /metrics"), Route::BadRequest);
        assert_eq!(route(b"GET /metrics HTTP/1.1 x"), Route::BadRequest);
        assert_eq!(route(b"GET /metrics SMTP"), Route::BadRequest);
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nno colon"),
            Route::BadRequest
        );
        assert_eq!(route(b"\xff\xfe"), Route::BadRequest);
        assert_eq!(route(b""), Route::BadRequest);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Any bytes a client sends get a route (no panic), and a head
        /// that starts like a request for /metrics is one.
        #[test]
        fn any_head_gets_a_route(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            text in "[ -~\r\n]{0,300}",
        ) {
            let _ = route(&bytes);
            let _ = allows_gzip(&text);
            let _ = head_end(&bytes);
            let head = format!("GET /metrics HTTP/1.1\r\nAccept-Encoding: {}", text.replace(['\r', '\n'], ""));
            let is_metrics = matches!(route(head.as_bytes()), Route::Metrics { .. });
            proptest::prop_assert!(is_metrics);
        }
    }

    #[test]
    fn gzip_is_allowed_unless_refused() {
        assert!(allows_gzip("gzip"));
        assert!(allows_gzip(" deflate, GZIP ;q=0.5"));
        assert!(allows_gzip("*"));
        assert!(!allows_gzip("gzip;q=0"));
        assert!(!allows_gzip("identity"));
        assert!(!allows_gzip(""));
    }

    #[test]
    fn a_reply_sends_its_head_then_its_body() {
        let body: Arc<[u8]> = Arc::from(&b"abc"[..]);
        let mut r = Reply::new("200 OK", "", Some(body), 3);
        let head_len = r.head.len();
        assert!(r.pending().starts_with(b"HTTP/1.1 200 OK\r\n"));
        r.sent = head_len - 1;
        assert_eq!(r.pending(), b"\n");
        r.sent = head_len + 1;
        assert_eq!(r.pending(), b"bc");
        r.sent = head_len + 3;
        assert!(r.pending().is_empty());
    }
}
