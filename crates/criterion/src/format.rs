//! Value formatters: CPU time in ns/µs/ms/s of CPU, counts per iteration.

use criterion::Throughput;
use criterion::measurement::ValueFormatter;

/// Formats CPU time (values in nanoseconds of CPU) as `ns cpu`, `µs cpu`,
/// `ms cpu` or `s cpu`, and throughputs per CPU-second (`Kelem/cpu-s`).
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuTimeFormatter;

impl ValueFormatter for CpuTimeFormatter {
    fn scale_values(&self, ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if ns < 1e3 {
            (1.0, "ns cpu")
        } else if ns < 1e6 {
            (1e-3, "µs cpu")
        } else if ns < 1e9 {
            (1e-6, "ms cpu")
        } else {
            (1e-9, "s cpu")
        };
        for v in values {
            *v *= factor;
        }
        unit
    }

    fn scale_throughputs(
        &self,
        typical_ns: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let (per_iter, unit) = units_of(throughput);
        // per CPU-second = units per iteration / (ns per iteration) * 1e9
        let typical = per_iter * 1e9 / typical_ns.max(f64::MIN_POSITIVE);
        let (div, prefix) = if typical < 1e3 {
            (1.0, 0)
        } else if typical < 1e6 {
            (1e3, 1)
        } else if typical < 1e9 {
            (1e6, 2)
        } else {
            (1e9, 3)
        };
        for v in values {
            *v = per_iter * 1e9 / v.max(f64::MIN_POSITIVE) / div;
        }
        match (unit, prefix) {
            (Unit::Elements, 0) => "elem/cpu-s",
            (Unit::Elements, 1) => "Kelem/cpu-s",
            (Unit::Elements, 2) => "Melem/cpu-s",
            (Unit::Elements, _) => "Gelem/cpu-s",
            (Unit::Bytes, 0) => "B/cpu-s",
            (Unit::Bytes, 1) => "KB/cpu-s",
            (Unit::Bytes, 2) => "MB/cpu-s",
            (Unit::Bytes, _) => "GB/cpu-s",
            (Unit::Bits, 0) => "b/cpu-s",
            (Unit::Bits, 1) => "Kb/cpu-s",
            (Unit::Bits, 2) => "Mb/cpu-s",
            (Unit::Bits, _) => "Gb/cpu-s",
        }
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// What a throughput counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Elements,
    Bytes,
    Bits,
}

/// Units per iteration of a throughput (at least 1, to never divide by 0).
fn units_of(t: &Throughput) -> (f64, Unit) {
    let (n, u) = match *t {
        Throughput::Bits(n) => (n, Unit::Bits),
        Throughput::Bytes(n) | Throughput::BytesDecimal(n) => (n, Unit::Bytes),
        Throughput::Elements(n) | Throughput::ElementsAndBytes { elements: n, .. } => {
            (n, Unit::Elements)
        }
    };
    (n.max(1) as f64, u)
}

/// Formats event counts (switches, wakeups, page faults, ...) per iteration:
/// `switches/iter` (never rescaled, so an exact count reads exactly), and per
/// throughput unit (`switches/elem`, `switches/byte`) when the benchmark
/// declares a throughput.
///
/// A count of zero is reported to criterion as a tiny positive value
/// ([`crate::ZERO_FLOOR`] per sample) and prints as `0.0000`.
#[derive(Debug, Clone, Copy)]
pub struct CountFormatter {
    per_iter: &'static str,
    per_elem: &'static str,
    per_byte: &'static str,
    per_bit: &'static str,
    machine: &'static str,
}

impl CountFormatter {
    /// Context switches.
    pub const SWITCHES: CountFormatter = CountFormatter::new_static(
        "switches/iter",
        "switches/elem",
        "switches/byte",
        "switches/bit",
        "switches",
    );
    /// Wakeups.
    pub const WAKEUPS: CountFormatter = CountFormatter::new_static(
        "wakeups/iter",
        "wakeups/elem",
        "wakeups/byte",
        "wakeups/bit",
        "wakeups",
    );
    /// Idle wakeups (a loop woke and found nothing).
    pub const IDLE_WAKEUPS: CountFormatter = CountFormatter::new_static(
        "idle wakeups/iter",
        "idle wakeups/elem",
        "idle wakeups/byte",
        "idle wakeups/bit",
        "idle wakeups",
    );
    /// Generic events (a perf counter).
    pub const EVENTS: CountFormatter = CountFormatter::new_static(
        "events/iter",
        "events/elem",
        "events/byte",
        "events/bit",
        "events",
    );

    /// A formatter with the given unit strings: per iteration, per element,
    /// per byte, per bit, and the bare unit for machine-readable output.
    pub const fn new_static(
        per_iter: &'static str,
        per_elem: &'static str,
        per_byte: &'static str,
        per_bit: &'static str,
        machine: &'static str,
    ) -> CountFormatter {
        CountFormatter {
            per_iter,
            per_elem,
            per_byte,
            per_bit,
            machine,
        }
    }

    /// The unit of a per-iteration value, e.g. `switches/iter`.
    pub fn unit(&self) -> &'static str {
        self.per_iter
    }
}

impl ValueFormatter for CountFormatter {
    fn scale_values(&self, _typical: f64, _values: &mut [f64]) -> &'static str {
        // Counts keep their unit and are never rescaled: 1.0000 switches/iter
        // must read as exactly one.
        self.per_iter
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let (n, unit) = units_of(throughput);
        for v in values {
            *v /= n;
        }
        match unit {
            Unit::Elements => self.per_elem,
            Unit::Bytes => self.per_byte,
            Unit::Bits => self.per_bit,
        }
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        self.machine
    }
}
