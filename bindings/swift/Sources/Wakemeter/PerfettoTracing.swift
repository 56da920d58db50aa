// A Perfetto trace of the sampler's process (ui.perfetto.dev, Instruments
// does not read it; Android Studio and Perfetto's UI do).
import Foundation

/// Default size cap of a trace file: 256 MiB (an hour at 1 Hz of 256 busy threads is ~35 MB).
public let defaultPerfettoMaxBytes: UInt64 = 256 * 1024 * 1024

extension Sampler {
    /// Starts writing a Perfetto trace of this sampler's process to `url`
    /// (created or truncated now, at most `maxBytes`), one interval per
    /// sample (samples stored before its writer thread ran again are taken
    /// as one). Call `finish()` (or release the trace) to write the last
    /// samples. Samples are written in batches (64 KiB or 5 s), and the file
    /// is a complete trace after every batch: a process killed without
    /// finishing loses at most the last 5 s.
    ///
    /// - Throws: `WakemeterError.Unwritable` when the file cannot be created.
    public func perfettoTrace(to url: URL, maxBytes: UInt64 = defaultPerfettoMaxBytes) throws -> PerfettoTrace {
        try startPerfettoTrace(path: url.path, maxBytes: maxBytes)
    }

    /// Runs `body` while a Perfetto trace is written to `url`; returns what the file holds.
    public func tracing(
        to url: URL,
        maxBytes: UInt64 = defaultPerfettoMaxBytes,
        _ body: () throws -> Void
    ) throws -> PerfettoTraceStatus {
        let trace = try perfettoTrace(to: url, maxBytes: maxBytes)
        defer { _ = trace.finish() }
        try body()
        return trace.finish()
    }
}
