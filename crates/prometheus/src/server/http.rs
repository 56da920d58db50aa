//! The HTTP side of the endpoint: one client's request read and routed,
//! its answer (the cached exposition, or a short error) written without
//! blocking.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;

use crate::exporter::Exporter;

/// Longest request head read, in bytes; longer requests get `431`.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const PLAIN: &str = "text/plain; charset=utf-8";

/// A response ready to send: its head, then a body that may be shared
/// with other responses (the cached exposition).
pub(super) struct Reply {
    pub(super) head: Vec<u8>,
    pub(super) body: Option<Arc<[u8]>>,
    pub(super) sent: usize,
}

impl Reply {
    pub(super) fn new(status: &str, headers: &str, body: Option<Arc<[u8]>>, len: usize) -> Reply {
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
    pub(super) fn plain(status: &str, extra: &str, text: &str, head_only: bool) -> Reply {
        let body: Arc<[u8]> = Arc::from(text.as_bytes());
        let len = body.len();
        let headers = format!("Content-Type: {PLAIN}\r\n{extra}");
        Reply::new(status, &headers, (!head_only).then_some(body), len)
    }

    /// What is left to send.
    pub(super) fn pending(&self) -> &[u8] {
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
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) deadline: Instant,
    pub(super) request: Vec<u8>,
    pub(super) reply: Option<Reply>,
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
pub(super) fn allows_gzip(value: &str) -> bool {
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
pub(super) struct Cache {
    pub(super) source: Option<Arc<str>>,
    /// By `openmetrics as usize * 2 + gzip as usize`.
    pub(super) bodies: [Option<Arc<[u8]>>; 4],
}

impl Cache {
    /// The body for `openmetrics`/`gzip`, and whether it is gzipped (a
    /// failed compression falls back to the plain text).
    pub(super) fn body(
        &mut self,
        exporter: &Exporter,
        openmetrics: bool,
        gzip: bool,
    ) -> (Arc<[u8]>, bool) {
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
pub(super) fn answer(head: &[u8], exporter: &Exporter, cache: &mut Cache) -> Reply {
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
pub(super) fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

impl Conn {
    /// Reads what the client sent and writes what it can of the answer,
    /// without blocking; returns whether the connection is over.
    pub(super) fn advance(&mut self, exporter: &Exporter, cache: &mut Cache) -> bool {
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
    pub(super) fn close_with(mut self, status: &str) {
        if self.reply.is_none() {
            let r = Reply::plain(status, "", "", false);
            let _ = self.stream.write(&r.head);
        }
    }
}
