//! # wakemeter-prometheus
//!
//! Exports a [`wakemeter::Sampler`] to Prometheus (or an OpenTelemetry
//! collector scraping Prometheus): the fleet's metrics system aggregates,
//! wakemeter measures.
//!
//! ```no_run
//! use std::time::Duration;
//! use wakemeter_prometheus::{Exporter, ExporterConfig, MetricsServer};
//!
//! let sampler = wakemeter::SamplerBuilder::new().with_interval(Duration::from_secs(1)).build()?;
//! let _sampling = sampler.start()?;
//! let exporter = Exporter::new(ExporterConfig::default())?;
//! let _updates = exporter.spawn_updater(sampler.clone())?;      // on each stored snapshot
//! let server = MetricsServer::bind("127.0.0.1:9464".parse()?, exporter.clone())?;
//! println!("scrape http://{}/metrics", server.local_addr());
//! // Or mount `exporter.openmetrics()` on the host's own admin endpoint.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Why a crate and not a feature of the core: the core is built for
//! Android and iOS and into the Kotlin/Swift library, which never need
//! an exporter; a crate of its own keeps prometheus-client, sockets and
//! threads out of every build that does not ask for them, including
//! `--all-features` builds of the core.
//!
//! Cardinality is bounded: threads are grouped by name with numbers
//! collapsed (`worker-{n}`), the top N groups get a label and the rest
//! are one `other` series, and a hard cap on series drops what does not
//! fit and counts it in `wakemeter_exporter_dropped_series_total`. The
//! metric names are listed in the README ("Prometheus").
//!
//! The endpoint ([`MetricsServer`]) serves every client at once on one
//! thread, with a deadline per request ([`REQUEST_DEADLINE`]), a cap on
//! open connections ([`MAX_CONNECTIONS`]), gzip when asked, a pause
//! instead of a spin when out of descriptors, and a drop that returns
//! within [`STOP_WITHIN`] whatever its clients do ([`ServerOptions`] sets
//! other limits). Label values never carry a raw control character.
//!
//! Several processes (a pod, every process of a name): with
//! [`ExporterConfig::per_process`], one exporter follows one sampler per
//! process ([`Exporter::update_set`], [`Exporter::spawn_set_updater`]),
//! every series carries the labels `pid` and `process`, at most
//! [`ExporterConfig::max_processes`] are exposed, the series cap is for
//! all of them together, and a process left out of the set has its series
//! removed.

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
    MAX_CONNECTIONS, MAX_MAX_CONNECTIONS, MAX_REQUEST_BYTES, MAX_REQUEST_DEADLINE, MetricsServer,
    REQUEST_DEADLINE, STOP_WITHIN, ServerOptions,
};
pub use state::{
    DEFAULT_MAX_PROCESSES, DEFAULT_MAX_SERIES, DEFAULT_TOP_PROBES, DEFAULT_TOP_THREADS,
    ExporterConfig, MAX_PROCESSES, MAX_TOP_N, MIN_MAX_SERIES, ServerStats,
};
pub use text::openmetrics_to_prometheus;
