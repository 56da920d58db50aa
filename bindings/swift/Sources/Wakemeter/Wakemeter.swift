// Idiomatic Swift over the generated bindings (Generated/Wakemeter.swift).
import Foundation

/// Whole milliseconds of a time interval for the library's configuration.
/// Negative, NaN and infinite values become 0, which the library rejects
/// with `WakemeterError.InvalidConfig`, like any other bad value.
func wholeMilliseconds(_ seconds: TimeInterval) -> UInt64 {
    guard seconds.isFinite, seconds > 0 else { return 0 }
    let ms = seconds * 1000
    return ms >= Double(UInt64.max) ? UInt64.max : UInt64(ms)
}

extension Sampler {
    /// A sampler with the interval in seconds (rounded down to whole milliseconds):
    /// `try Sampler.make(interval: 0.5, history: 120)`.
    public static func make(
        interval: TimeInterval = 1,
        history: UInt32 = 300,
        thresholds: Thresholds = Thresholds()
    ) throws -> Sampler {
        let config = SamplerConfig(
            intervalMs: wholeMilliseconds(interval),
            history: history,
            thresholds: thresholds
        )
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

/// A timeout in the library's form: nanoseconds, -1 for "no timeout" (as in `poll`).
func timeoutNanoseconds(_ timeout: TimeInterval?) -> Int64 {
    guard let timeout, timeout.isFinite, timeout >= 0 else { return -1 }
    return Int64(min(timeout, 1e9) * 1e9) // at most ~31 years, far below Int64.max
}
