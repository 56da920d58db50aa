// Helpers of the XCTest tests. The tests mirror the Kotlin JVM tests
// (bindings/kotlin/src/test) against the real Rust library; run them with
// scripts/swift-test.sh (Linux) or, on a Mac, after
// `cargo build -p wakemeter-ffi --release`:
//   swift test -Xlinker -Ltarget/release
import Foundation
import XCTest
@testable import Wakemeter

/// Thresholds that judge a loop after a fraction of a second instead of 10 s.
let quick: Thresholds = {
    var t = defaultThresholds()
    t.window = 0.4
    t.minWindow = 0.1
    return t
}()

/// The default configuration with some fields changed.
func config(_ change: (inout SamplerConfig) -> Void) -> SamplerConfig {
    var c = defaultSamplerConfig()
    change(&c)
    return c
}

/// A value shared between threads, behind a lock.
///
/// `@unchecked Sendable` is safe: `value` is private and only read or
/// written with `lock` held (`NSLock` itself is thread-safe).
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` on the value with the lock held.
    func with<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    var current: Value { with { $0 } }
}

/// A listener that records what it receives, on which thread, and can throw.
final class Recorder: SamplerListener {
    struct Received {
        var intervals: [Interval] = []
        var findings: [Finding] = []
        var threadNames: Set<String> = []
    }

    private let received = Locked(Received())
    private let fail: @Sendable (Int) -> Error?

    /// `fail(n)` is called with the number of the interval (1, 2, ...); the
    /// listener throws what it returns.
    init(fail: @escaping @Sendable (Int) -> Error? = { _ in nil }) {
        self.fail = fail
    }

    var intervals: [Interval] { received.current.intervals }
    var findings: [Finding] { received.current.findings }
    var threadNames: Set<String> { received.current.threadNames }

    func onInterval(interval: Interval) throws {
        let n = received.with {
            $0.intervals.append(interval)
            $0.threadNames.insert(currentThreadName())
            return $0.intervals.count
        }
        if let error = fail(n) {
            throw error
        }
    }

    func onFinding(finding: Finding) throws {
        received.with { $0.findings.append(finding) }
    }
}

/// Polls `condition` until it holds or `timeout` (seconds) passes.
func eventually(_ timeout: TimeInterval = 120, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while try !condition() {
        if Date() > deadline { return false }
        Thread.sleep(forTimeInterval: 0.005)
    }
    return true
}

/// The first value of `stream` that matches, or nil after `seconds`.
func first<T: Sendable>(
    _ stream: AsyncStream<T>,
    within seconds: TimeInterval,
    where match: @escaping @Sendable (T) -> Bool = { _ in true }
) async -> T? {
    await collect(stream, count: 1, within: seconds, where: match).first
}

/// The first `count` values of `stream` that match; fewer if `seconds` pass first.
func collect<T: Sendable>(
    _ stream: AsyncStream<T>,
    count: Int,
    within seconds: TimeInterval,
    where match: @escaping @Sendable (T) -> Bool = { _ in true }
) async -> [T] {
    let consumer = Task { () -> [T] in
        var got: [T] = []
        for await value in stream where match(value) {
            got.append(value)
            if got.count == count { break }
        }
        return got
    }
    let watchdog = Task {
        try? await Task.sleep(nanoseconds: UInt64(seconds * 1e9))
        consumer.cancel()
    }
    defer { watchdog.cancel() }
    return await consumer.value
}

/// Calls `iteration` over and over for `seconds`, on a thread of its own
/// (as an app's loop runs), and waits for it.
func runLoop(for seconds: TimeInterval, _ iteration: @escaping @Sendable () throws -> Void) throws {
    let failure = Locked<Error?>(nil)
    let done = DispatchSemaphore(value: 0)
    let thread = Thread {
        let end = Date().addingTimeInterval(seconds)
        do {
            while Date() < end { try iteration() }
        } catch {
            failure.with { $0 = error }
        }
        done.signal()
    }
    thread.start()
    done.wait()
    if let error = failure.current { throw error }
}

/// Spins `probe` on a thread of its own (non-blocking polls that find
/// nothing, as fast as possible) until the returned function is called,
/// which waits for the thread to end.
func startSpinning(_ probe: LoopProbe) -> @Sendable () -> Void {
    let spinning = Locked(true)
    let done = DispatchSemaphore(value: 0)
    Thread {
        while spinning.current { _ = try? probe.wait(timeout: 0) { 0 } }
        done.signal()
    }.start()
    return {
        spinning.with { $0 = false }
        done.wait()
    }
}

/// Asserts that `body` throws the `WakemeterError` case `expected` matches,
/// and returns its message.
@discardableResult
func assertThrows<T>(
    _ expected: (WakemeterError) -> Bool,
    _ body: @autoclosure () throws -> T,
    file: StaticString = #filePath,
    line: UInt = #line
) -> String {
    do {
        _ = try body()
        XCTFail("no error thrown", file: file, line: line)
    } catch let error as WakemeterError {
        XCTAssertTrue(expected(error), "unexpected error \(error)", file: file, line: line)
        return error.localizedDescription
    } catch {
        XCTFail("not a WakemeterError: \(error)", file: file, line: line)
    }
    return ""
}

// Matchers of the WakemeterError cases, for assertThrows.
func isInvalidConfig(_ e: WakemeterError) -> Bool { if case .InvalidConfig = e { true } else { false } }
func isClosed(_ e: WakemeterError) -> Bool { if case .Closed = e { true } else { false } }
func isSamplerGone(_ e: WakemeterError) -> Bool { if case .SamplerGone = e { true } else { false } }
func isAlreadyRunning(_ e: WakemeterError) -> Bool { if case .AlreadyRunning = e { true } else { false } }
func isNoSuchProcess(_ e: WakemeterError) -> Bool { if case .NoSuchProcess = e { true } else { false } }
func isProbeNameTooLong(_ e: WakemeterError) -> Bool { if case .ProbeNameTooLong = e { true } else { false } }

/// The OS thread id of the calling thread (Linux: /proc/thread-self is
/// "<pid>/task/<tid>"); nil where there is no /proc.
func currentTid() -> UInt64? {
    guard let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self") else {
        return nil
    }
    return link.split(separator: "/").last.flatMap { UInt64($0) }
}

/// The OS name of the calling thread (Linux; empty where there is no /proc).
func currentThreadName() -> String {
    ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "")
        .trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Names of this process's threads (Linux; empty where there is no /proc).
func processThreadNames() -> [String] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.compactMap { tid in
        (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// Polls `condition` until it holds or `timeout` (seconds) passes, without
/// blocking the task's thread (for async tests).
func waitUntil(_ timeout: TimeInterval = 120, _ condition: () throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while try !condition() {
        if Date() > deadline { return false }
        try? await Task.sleep(nanoseconds: 5_000_000)
    }
    return true
}
