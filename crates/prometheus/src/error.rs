//! What can go wrong when exporting.

use std::net::SocketAddr;

/// What can go wrong when exporting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration field ([`ExporterConfig`](crate::ExporterConfig), [`ServerOptions`](crate::ServerOptions)) is out of range.
    #[error("invalid exporter or server option: {field} {reason}")]
    InvalidConfig {
        /// The field.
        field: &'static str,
        /// Its allowed range.
        reason: String,
    },
    /// [`MetricsServer::bind`](crate::MetricsServer::bind) was given an address other than loopback.
    #[error(
        "{addr} is not a loopback address: metrics would be reachable from other hosts \
         (bind it explicitly to allow that)"
    )]
    NotLoopback {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error (in use, not an address of this host, …).
        #[source]
        source: std::io::Error,
    },
    /// The endpoint's event loop could not be set up (out of descriptors
    /// or memory).
    #[error("cannot set up the metrics endpoint's event loop: {0}")]
    EventLoop(#[source] std::io::Error),
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Spawn(#[source] std::io::Error),
}
