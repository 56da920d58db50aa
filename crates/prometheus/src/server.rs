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
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::error::Error;
use crate::exporter::Exporter;
use crate::state::ServerStats;

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
/// Longest request head read, in bytes; longer requests get `431`.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// First and longest pause of accepting after a failed accept.
const ACCEPT_PAUSE_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const PLAIN: &str = "text/plain; charset=utf-8";

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
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let open = wakemeter_procfs::process::open_fd_count().ok()?;
    let open = usize::try_from(open).unwrap_or(usize::MAX);
    let limit = usize::try_from(r.rlim_cur).unwrap_or(usize::MAX);
    Some(limit.saturating_sub(open))
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

/// A response ready to send: its head, then a body that may be shared
/// with other responses (the cached exposition).
struct Reply {
    head: Vec<u8>,
    body: Option<Arc<[u8]>>,
    sent: usize,
}

impl Reply {
    fn new(status: &str, headers: &str, body: Option<Arc<[u8]>>, len: usize) -> Reply {
        let head = format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Length: {len}\r\nConnection: close\r\n\r\n"
        );
        Reply {
            head: head.into_bytes(),
            body,
            sent: 0,
        }
    }

    /// A short plain-text answer (errors).
    fn plain(status: &str, extra: &str, text: &str, head_only: bool) -> Reply {
        let body: Arc<[u8]> = Arc::from(text.as_bytes());
        let len = body.len();
        let headers = format!("Content-Type: {PLAIN}\r\n{extra}");
        Reply::new(status, &headers, (!head_only).then_some(body), len)
    }

    /// What is left to send.
    fn pending(&self) -> &[u8] {
        match self.head.get(self.sent..) {
            Some(rest) if !rest.is_empty() => rest,
            _ => self.body.as_deref().map_or(&[], |b| {
                b.get(self.sent.saturating_sub(self.head.len())..)
                    .unwrap_or_default()
            }),
        }
    }
}

/// One client: its request as read so far, then its answer.
struct Conn {
    stream: TcpStream,
    deadline: Instant,
    request: Vec<u8>,
    reply: Option<Reply>,
}

/// What a request head asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET`/`HEAD /metrics`.
    Metrics {
        head_only: bool,
        openmetrics: bool,
        gzip: bool,
    },
    /// Another path.
    NotFound { head_only: bool },
    /// Another method.
    MethodNotAllowed,
    /// Not an HTTP request head.
    BadRequest,
}

/// Routes a request head (the bytes before the blank line). Never panics,
/// whatever the bytes.
pub(crate) fn route(head: &[u8]) -> Route {
    let Ok(head) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let mut lines = head.split("\r\n");
    let mut parts = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Route::BadRequest;
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Route::MethodNotAllowed,
    };
    if target.split('?').next() != Some("/metrics") {
        return Route::NotFound { head_only };
    }
    let (mut openmetrics, mut gzip) = (false, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Route::BadRequest;
        };
        let name = name.trim();
        if name.eq_ignore_ascii_case("accept") {
            openmetrics |= value.contains("application/openmetrics-text");
        } else if name.eq_ignore_ascii_case("accept-encoding") {
            gzip |= allows_gzip(value);
        }
    }
    Route::Metrics {
        head_only,
        openmetrics,
        gzip,
    }
}

/// Whether an `Accept-Encoding` value allows gzip (`gzip` or `*`, with a
/// `q` other than 0).
fn allows_gzip(value: &str) -> bool {
    value.split(',').any(|item| {
        let mut params = item.split(';');
        let coding = params.next().unwrap_or_default().trim();
        let refused = params.any(|p| {
            p.trim()
                .strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f64>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
    })
}

/// The bodies of the latest exposition in each format and encoding,
/// made once per update rather than once per scrape.
#[derive(Default)]
struct Cache {
    source: Option<Arc<str>>,
    /// By `openmetrics as usize * 2 + gzip as usize`.
    bodies: [Option<Arc<[u8]>>; 4],
}

impl Cache {
    /// The body for `openmetrics`/`gzip`, and whether it is gzipped (a
    /// failed compression falls back to the plain text).
    fn body(&mut self, exporter: &Exporter, openmetrics: bool, gzip: bool) -> (Arc<[u8]>, bool) {
        let om = exporter.openmetrics();
        if !self.source.as_ref().is_some_and(|s| Arc::ptr_eq(s, &om)) {
            self.bodies = Default::default();
            self.source = Some(om.clone());
        }
        let plain_slot = usize::from(openmetrics) * 2;
        let plain = match self.bodies.get(plain_slot).cloned().flatten() {
            Some(b) => b,
            None => {
                let b: Arc<[u8]> = if openmetrics {
                    Arc::from(om.as_bytes())
                } else {
                    Arc::from(crate::text::openmetrics_to_prometheus(&om).into_bytes())
                };
                if let Some(slot) = self.bodies.get_mut(plain_slot) {
                    *slot = Some(b.clone());
                }
                b
            }
        };
        if !gzip {
            return (plain, false);
        }
        if let Some(b) = self.bodies.get(plain_slot + 1).cloned().flatten() {
            return (b, true);
        }
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        match enc.write_all(&plain).and_then(|()| enc.finish()) {
            Ok(z) => {
                let z: Arc<[u8]> = Arc::from(z);
                if let Some(slot) = self.bodies.get_mut(plain_slot + 1) {
                    *slot = Some(z.clone());
                }
                (z, true)
            }
            Err(_) => (plain, false),
        }
    }
}

/// The answer to a complete request head.
fn answer(head: &[u8], exporter: &Exporter, cache: &mut Cache) -> Reply {
    match route(head) {
        Route::BadRequest => Reply::plain("400 Bad Request", "", "bad request\n", false),
        Route::MethodNotAllowed => Reply::plain(
            "405 Method Not Allowed",
            "Allow: GET, HEAD\r\n",
            "GET or HEAD only\n",
            false,
        ),
        Route::NotFound { head_only } => {
            Reply::plain("404 Not Found", "", "metrics are at /metrics\n", head_only)
        }
        Route::Metrics {
            head_only,
            openmetrics,
            gzip,
        } => {
            let (body, gzipped) = cache.body(exporter, openmetrics, gzip);
            let ctype = if openmetrics {
                OPENMETRICS
            } else {
                PROMETHEUS_TEXT
            };
            let encoding = if gzipped {
                "Content-Encoding: gzip\r\n"
            } else {
                ""
            };
            let headers = format!("Content-Type: {ctype}\r\n{encoding}Vary: Accept-Encoding\r\n");
            let len = body.len();
            Reply::new("200 OK", &headers, (!head_only).then_some(body), len)
        }
    }
}

/// Where the request head ends (the index of its blank line), if read.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

impl Conn {
    /// Reads what the client sent and writes what it can of the answer,
    /// without blocking; returns whether the connection is over.
    fn advance(&mut self, exporter: &Exporter, cache: &mut Cache) -> bool {
        if self.reply.is_none() {
            let mut chunk = [0u8; 4096];
            loop {
                match self.stream.read(&mut chunk) {
                    // Closed before a whole request: nothing to answer.
                    Ok(0) => return true,
                    Ok(n) => {
                        // Only the unsearched tail (and 3 bytes before it)
                        // can hold the blank line.
                        let from = self.request.len().saturating_sub(3);
                        self.request
                            .extend_from_slice(chunk.get(..n).unwrap_or_default());
                        let tail = self.request.get(from..).unwrap_or_default();
                        let end = head_end(tail).map(|end| from + end);
                        // The head with its blank line, or what was read
                        // without one: over the limit either way, also
                        // when the blank line came in the same read.
                        let head_len = end.map_or(self.request.len(), |end| end + 4);
                        if let Some(end) = end.filter(|_| head_len <= MAX_REQUEST_BYTES) {
                            let head = self.request.get(..end).unwrap_or_default();
                            self.reply = Some(answer(head, exporter, cache));
                            break;
                        }
                        if head_len > MAX_REQUEST_BYTES {
                            self.reply = Some(Reply::plain(
                                "431 Request Header Fields Too Large",
                                "",
                                "request head over 8 KiB\n",
                                false,
                            ));
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return true,
                }
            }
        }
        let Some(reply) = self.reply.as_mut() else {
            return true;
        };
        loop {
            let pending = reply.pending();
            if pending.is_empty() {
                let _ = self.stream.shutdown(Shutdown::Write);
                return true;
            }
            match self.stream.write(pending) {
                Ok(0) => return true,
                Ok(n) => reply.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
    }

    /// Closes the connection with a short answer if none was started
    /// (best effort: one non-blocking write).
    fn close_with(mut self, status: &str) {
        if self.reply.is_none() {
            let r = Reply::plain(status, "", "", false);
            let _ = self.stream.write(&r.head);
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
