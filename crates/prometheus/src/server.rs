//! A small HTTP endpoint for the exposition: `GET /metrics`, one
//! connection at a time, on a thread of its own. It never touches the
//! sampler: a scrape copies a pointer to the text of the latest update.
//!
//! Content negotiation as Prometheus expects: OpenMetrics 1.0 when the
//! `Accept` header asks for `application/openmetrics-text` (the
//! Prometheus server does), the text format 0.0.4 otherwise.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{Error, Exporter};

/// Longest request head read, in bytes; longer requests get 431.
const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// How long a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The HTTP endpoint; serves until dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `exporter` on `addr`, which must be a loopback address
    /// (127.0.0.0/8 or ::1): metrics say a lot about a host, and a
    /// sidecar's scraper runs beside it. Port 0 picks a free port
    /// ([`MetricsServer::local_addr`] tells which).
    ///
    /// # Errors
    /// [`Error::NotLoopback`] for any other address (see
    /// [`MetricsServer::bind_any_address`]); [`Error::Bind`] when the
    /// address cannot be bound (in use, not on this host, no permission);
    /// [`Error::Spawn`] when the thread cannot be started.
    pub fn bind(addr: SocketAddr, exporter: Exporter) -> Result<MetricsServer, Error> {
        if !addr.ip().is_loopback() {
            return Err(Error::NotLoopback { addr });
        }
        Self::bind_any_address(addr, exporter)
    }

    /// As [`MetricsServer::bind`], for any address: the caller has decided
    /// to expose the metrics beyond this host.
    ///
    /// # Errors
    /// As [`MetricsServer::bind`], without [`Error::NotLoopback`].
    pub fn bind_any_address(addr: SocketAddr, exporter: Exporter) -> Result<MetricsServer, Error> {
        let listener = TcpListener::bind(addr).map_err(|source| Error::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| Error::Bind { addr, source })?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("wakemeter-http".to_string())
            .spawn(move || {
                for conn in listener.incoming() {
                    if flag.load(Ordering::Acquire) {
                        break;
                    }
                    // A failed accept (a client that reset at once, a
                    // descriptor shortage) costs that client only.
                    if let Ok(stream) = conn {
                        let _ = serve(stream, &exporter);
                    }
                }
            })
            .map_err(Error::Spawn)?;
        Ok(MetricsServer {
            addr: local,
            stop,
            handle: Some(handle),
        })
    }

    /// The address served (with the port chosen when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the blocking accept with a connection of our own.
        let wake = match self.addr {
            SocketAddr::V4(a) if a.ip().is_unspecified() => {
                SocketAddr::from((Ipv4Addr::LOCALHOST, a.port()))
            }
            SocketAddr::V6(a) if a.ip().is_unspecified() => {
                SocketAddr::from((Ipv6Addr::LOCALHOST, a.port()))
            }
            a => a,
        };
        if TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok()
            && let Some(h) = self.handle.take()
        {
            let _ = h.join();
        }
        // Otherwise the thread stays blocked in accept until the next
        // connection, and then ends; joining it here could hang.
    }
}

/// The head of a request, or `None` if it is too long or malformed.
fn read_head(stream: &mut TcpStream) -> io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(end);
            return Ok(String::from_utf8(buf).ok());
        }
        if buf.len() > MAX_REQUEST_BYTES {
            return Ok(None);
        }
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    ctype: &str,
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if !head_only {
        stream.write_all(body)?;
    }
    stream.flush()
}

fn serve(mut stream: TcpStream, exporter: &Exporter) -> io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let plain = "text/plain; charset=utf-8";
    let Some(head) = read_head(&mut stream)? else {
        return respond(
            &mut stream,
            "400 Bad Request",
            plain,
            b"bad request\n",
            false,
        );
    };
    let mut lines = head.split("\r\n");
    let request = lines.next().unwrap_or_default();
    let mut parts = request.split(' ');
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            plain,
            b"GET or HEAD only\n",
            false,
        );
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return respond(
            &mut stream,
            "404 Not Found",
            plain,
            b"metrics are at /metrics\n",
            head_only,
        );
    }
    let openmetrics = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("accept") && v.contains("application/openmetrics-text")
        })
    });
    if openmetrics {
        let body = exporter.openmetrics();
        respond(
            &mut stream,
            "200 OK",
            OPENMETRICS,
            body.as_bytes(),
            head_only,
        )
    } else {
        let body = exporter.prometheus_text();
        respond(
            &mut stream,
            "200 OK",
            PROMETHEUS_TEXT,
            body.as_bytes(),
            head_only,
        )
    }
}
