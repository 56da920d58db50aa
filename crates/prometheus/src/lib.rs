#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod encode;
mod error;
mod exporter;
mod groups;
mod names;
mod server;
mod state;
mod text;
mod totals;

pub use encode::{HISTOGRAM_HIGH_POW2, HISTOGRAM_LOW_POW2};
pub use error::Error;
pub use exporter::{Exporter, Updater};
pub use groups::EVICT_AFTER_UPDATES;
pub use names::{OTHER, collapse};
pub use server::{
    CONNECTION_SHARE_DIVISOR, MAX_CONNECTIONS, MAX_MAX_CONNECTIONS, MAX_REQUEST_BYTES,
    MAX_REQUEST_DEADLINE, MetricsServer, REQUEST_DEADLINE, RESERVED_DESCRIPTORS, STOP_WITHIN,
    ServerOptions,
};
pub use state::{
    DEFAULT_MAX_PROCESSES, DEFAULT_MAX_SERIES, DEFAULT_TOP_PROBES, DEFAULT_TOP_THREADS,
    ExporterConfig, MAX_PROCESSES, MAX_TOP_N, MIN_MAX_SERIES, ServerStats,
};
pub use text::openmetrics_to_prometheus;
