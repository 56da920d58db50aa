//! `--listen`: the Prometheus / OpenMetrics endpoint of `watch` (feature
//! `prometheus`; without it `--listen` is refused).

#[cfg(feature = "prometheus")]
use std::error::Error;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
#[cfg(feature = "prometheus")]
use std::sync::{Arc, Mutex};

#[cfg(feature = "prometheus")]
use wakemeter::Sampler;
#[cfg(feature = "prometheus")]
use wakemeter_prometheus::{Exporter, ExporterConfig, MetricsServer, Updater};

#[cfg(feature = "prometheus")]
use crate::print;

#[cfg(not(feature = "prometheus"))]
pub use off::serve;

/// A bound endpoint, serving nothing but `# EOF` until it follows a sampler.
#[cfg(feature = "prometheus")]
pub struct Endpoint {
    exporter: Exporter,
    _server: MetricsServer,
}

#[cfg(feature = "prometheus")]
impl Endpoint {
    /// Updates the exposition on each snapshot `sampler` stores, until
    /// the returned guard is dropped.
    pub fn follow(&self, sampler: &Sampler) -> Result<Updater, Box<dyn Error>> {
        Ok(self.exporter.spawn_updater(sampler.clone())?)
    }

    /// Per-process exposition: updates it every sampling period from
    /// the samplers in `set` (one per watched process; the watcher keeps
    /// it current), until the returned guard is dropped. A process taken
    /// out of the set has its series removed at the next update.
    pub fn follow_set(&self, set: &Arc<Mutex<Vec<Sampler>>>) -> Result<Updater, Box<dyn Error>> {
        let set = set.clone();
        Ok(self
            .exporter
            .spawn_set_updater(crate::session::SAMPLE_EVERY, move || {
                set.lock().map(|s| s.clone()).unwrap_or_default()
            })?)
    }
}

/// `PORT`, `:PORT`, `HOST:PORT`, `[V6]:PORT` → one socket address.
fn parse(addr: &str) -> Result<SocketAddr, String> {
    let bad = || {
        format!("--listen {addr:?}: expected PORT, HOST:PORT or [IPv6]:PORT, e.g. 127.0.0.1:9464")
    };
    let port_only = addr.strip_prefix(':').unwrap_or(addr);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from((IpAddr::V4(Ipv4Addr::LOCALHOST), port)));
    }
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(a);
    }
    // A host name (localhost): the first address it resolves to.
    let mut found = addr.to_socket_addrs().map_err(|_| bad())?;
    found.next().ok_or_else(bad)
}

/// Binds the endpoint: loopback only unless `allow_non_loopback`. With
/// `per_process` (several processes watched), every series is labelled by
/// `pid` and `process`, at most `max_processes` of them.
#[cfg(feature = "prometheus")]
pub fn serve(
    addr: &str,
    allow_non_loopback: bool,
    per_process: Option<usize>,
) -> Result<Endpoint, Box<dyn Error>> {
    let addr = parse(addr)?;
    let config = match per_process {
        Some(max) => ExporterConfig::default()
            .with_per_process(true)
            .with_max_processes(max),
        None => ExporterConfig::default(),
    };
    let exporter = Exporter::new(config)?;
    let server = if allow_non_loopback {
        MetricsServer::bind_any_address(addr, exporter.clone())
    } else {
        MetricsServer::bind(addr, exporter.clone())
    };
    let server = server.map_err(|e| match e {
        wakemeter_prometheus::Error::NotLoopback { addr } => format!(
            "--listen {addr}: not a loopback address; the metrics would be reachable from \
             other hosts. Add --allow-non-loopback to mean it"
        ),
        other => other.to_string(),
    })?;
    print::note(&format!(
        "wakemeter: serving metrics at http://{}/metrics",
        server.local_addr()
    ));
    Ok(Endpoint {
        exporter,
        _server: server,
    })
}

/// The build without the endpoint: `--listen` is parsed as usual, then
/// refused.
#[cfg(not(feature = "prometheus"))]
mod off {
    use std::error::Error;
    use std::sync::{Arc, Mutex};

    use wakemeter::Sampler;

    /// No endpoint is ever bound in this build.
    pub enum Endpoint {}

    /// Stands for the exporter's update guard.
    pub enum Updater {}

    impl Endpoint {
        pub fn follow(&self, _: &Sampler) -> Result<Updater, Box<dyn Error>> {
            match *self {}
        }

        pub fn follow_set(&self, _: &Arc<Mutex<Vec<Sampler>>>) -> Result<Updater, Box<dyn Error>> {
            match *self {}
        }
    }

    /// Refuses `--listen` (after checking the address as the full build does).
    pub fn serve(
        addr: &str,
        _allow_non_loopback: bool,
        _per_process: Option<usize>,
    ) -> Result<Endpoint, Box<dyn Error>> {
        super::parse(addr)?;
        Err("--listen: this build has no metrics endpoint (feature `prometheus` off)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(parse("9464").unwrap().to_string(), "127.0.0.1:9464");
        assert_eq!(parse(":9464").unwrap().to_string(), "127.0.0.1:9464");
        assert_eq!(parse("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert_eq!(parse("0.0.0.0:80").unwrap().to_string(), "0.0.0.0:80");
        assert!(parse("nonsense:port").is_err());
        assert!(parse("70000").is_err());
    }
}
