#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod encode;
mod exporter;
mod groups;
mod names;
mod server;
mod text;
mod totals;

use std::net::SocketAddr;

pub use encode::{HISTOGRAM_HIGH_POW2, HISTOGRAM_LOW_POW2};
pub use exporter::{
    DEFAULT_MAX_PROCESSES, DEFAULT_MAX_SERIES, DEFAULT_TOP_PROBES, DEFAULT_TOP_THREADS, Exporter,
    ExporterConfig, MAX_PROCESSES, MAX_TOP_N, MIN_MAX_SERIES, Updater,
};
pub use groups::EVICT_AFTER_UPDATES;
pub use names::{OTHER, collapse};
pub use server::{
    MAX_CONNECTIONS, MAX_MAX_CONNECTIONS, MAX_REQUEST_BYTES, MAX_REQUEST_DEADLINE, MetricsServer,
    REQUEST_DEADLINE, STOP_WITHIN, ServerOptions, ServerStats,
};
pub use text::openmetrics_to_prometheus;

/// What can go wrong when exporting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration field ([`ExporterConfig`], [`ServerOptions`]) is out of range.
    #[error("invalid exporter or server option: {field} {reason}")]
    InvalidConfig {
        /// The field.
        field: &'static str,
        /// Its allowed range.
        reason: String,
    },
    /// [`MetricsServer::bind`] was given an address other than loopback.
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
