// Idiomatic Swift over the generated bindings: the records of the core
// (Generated/WakemeterModel.swift) and the objects (Generated/Wakemeter.swift).
import Foundation

extension Sampler {
    /// A sampler that starts from the library's defaults (`defaultSamplerConfig()`,
    /// the one place defaults live) and changes only what is given:
    /// `try Sampler.make(interval: 0.5, history: 120)`. The interval is in
    /// seconds; a negative, NaN or too-short one is rejected by the library
    /// with `WakemeterError.InvalidConfig`, like any other bad value.
    ///
    /// Prefer it to `Sampler(config:)` for values you did not write
    /// yourself: uniffi's generated code stops the process (`fatalError`)
    /// on a negative, NaN or infinite duration before the library can
    /// reject it, and `make` turns such a value into `InvalidConfig`.
    public static func make(
        interval: TimeInterval? = nil,
        history: UInt32? = nil,
        thresholds: Thresholds? = nil
    ) throws -> Sampler {
        var config = defaultSamplerConfig()
        if let interval { config.interval = interval.isFinite && interval > 0 ? interval : 0 }
        if let history { config.history = history }
        if let thresholds {
            try checkFinite(thresholds, in: "thresholds")
            config.thresholds = thresholds
        }
        return try Sampler(config: config)
    }

    /// Findings as they appear during background sampling (each one once,
    /// and again only when it becomes more severe). Ending the stream's
    /// iteration removes its listener. Start sampling for values to arrive.
    public func findingStream(bufferingNewest limit: Int = 64) -> AsyncStream<Finding> {
        AsyncStream(bufferingPolicy: .bufferingNewest(limit)) { continuation in
            let listener = ClosureListener(onFinding: { continuation.yield($0) })
            register(listener, finishing: continuation)
        }
    }

    /// The intervals of background sampling, one per tick.
    public func intervalStream(bufferingNewest limit: Int = 64) -> AsyncStream<Interval> {
        AsyncStream(bufferingPolicy: .bufferingNewest(limit)) { continuation in
            let listener = ClosureListener(onInterval: { continuation.yield($0) })
            register(listener, finishing: continuation)
        }
    }

    private func register<T>(_ listener: ClosureListener, finishing continuation: AsyncStream<T>.Continuation) {
        guard let id = try? addListener(listener: listener) else {
            continuation.finish() // the sampler is shut down
            return
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.removeListener(id: id)
        }
    }
}

/// A `SamplerListener` that forwards to closures; called on wakemeter's thread.
final class ClosureListener: SamplerListener {
    private let interval: @Sendable (Interval) -> Void
    private let finding: @Sendable (Finding) -> Void

    init(
        onInterval: @escaping @Sendable (Interval) -> Void = { _ in },
        onFinding: @escaping @Sendable (Finding) -> Void = { _ in }
    ) {
        interval = onInterval
        finding = onFinding
    }

    func onInterval(interval: Interval) throws {
        self.interval(interval)
    }

    func onFinding(finding: Finding) throws {
        self.finding(finding)
    }
}

extension LoopProbe {
    /// Records one wait of the loop: `wait` is the blocking call and returns
    /// how many events it got. `timeout`: `nil` waits until an event, zero is
    /// a non-blocking poll. A thrown error counts as a wakeup with no events.
    public func wait(timeout: TimeInterval?, _ wait: () throws -> Int) throws -> Int {
        try beforeWait(timeoutNs: timeoutNanoseconds(timeout))
        let events: Int
        do {
            events = try wait()
        } catch {
            try afterWait(events: 0)
            throw error
        }
        try afterWait(events: UInt32(clamping: events))
        return events
    }
}

/// Throws `InvalidConfig` for a number field of `record` that is negative
/// or not finite. Every number of `Thresholds` must be finite and not
/// negative (the library checks the finer rules), and a duration that is
/// not would stop the process in uniffi's generated converter instead.
/// Reflection rather than a list of fields, so a field added to the Rust
/// record is covered without a change here.
func checkFinite(_ record: Any, in name: String) throws {
    for child in Mirror(reflecting: record).children {
        guard let label = child.label, let value = child.value as? Double else { continue }
        if !value.isFinite || value < 0 {
            let field = label.reduce(into: "") { out, c in
                out += c.isUppercase ? "_" + c.lowercased() : String(c)
            }
            throw WakemeterError.InvalidConfig(message: "\(name).\(field) must be finite and not negative (got \(value))")
        }
    }
}

/// A timeout in the library's form: nanoseconds, -1 for "no timeout" (as in `poll`).
func timeoutNanoseconds(_ timeout: TimeInterval?) -> Int64 {
    guard let timeout, timeout.isFinite, timeout >= 0 else { return -1 }
    return Int64(min(timeout, 1e9) * 1e9) // at most ~31 years, far below Int64.max
}
