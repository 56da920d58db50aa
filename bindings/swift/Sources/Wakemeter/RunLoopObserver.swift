// Reports a RunLoop's sleeps and wakeups through a LoopProbe, with a
// CFRunLoopObserver: CoreFoundation is there on Apple platforms and, under
// Foundation, in Linux's swift-corelibs-foundation.
#if canImport(CoreFoundation)
import CoreFoundation
import Foundation

/// Observes a run loop and reports each sleep as a wait of `probe`:
/// "before waiting" → `beforeWait`, "after waiting" → `afterWait`.
///
/// The timeout of each wait is the time to the run loop's next timer (none:
/// "until an event"), so timer wakeups count as timed out and source
/// wakeups as early. A sleep that ends at the limit date of `run(until:)`
/// or `run(mode:before:)` counts as early too: CoreFoundation does not tell
/// observers that limit. The run loop does not say how many sources fired,
/// so each wakeup counts one event.
///
/// Create it on the run loop's own thread; it stops observing when it is
/// invalidated or deallocated.
public final class RunLoopWakeupObserver {
    /// The probe the wakeups are reported through.
    public let probe: LoopProbe
    private let observer: CFRunLoopObserver

    /// Starts observing `runLoop` (default: the calling thread's) in `mode`.
    ///
    /// Throws `WakemeterError.Unsupported` on Linux for a run loop that is
    /// neither the calling thread's nor the main one: swift-corelibs-foundation
    /// does not give out the CoreFoundation run loop of other threads.
    public init(probe: LoopProbe, runLoop: RunLoop = .current, mode: RunLoop.Mode = .common) throws {
        guard let cfRunLoop = Self.cfRunLoop(runLoop) else {
            throw WakemeterError.Unsupported(
                message: "RunLoopWakeupObserver: on Linux only the calling thread's or the main run loop can be observed"
            )
        }
        self.probe = probe
        let activities = CFRunLoopActivity.beforeWaiting.rawValue | CFRunLoopActivity.afterWaiting.rawValue
        let created = CFRunLoopObserverCreateWithHandler(kCFAllocatorDefault, activities, true, 0) { _, activity in
            if activity == .beforeWaiting {
                let next = CFRunLoopGetNextTimerFireDate(cfRunLoop, CFRunLoopCopyCurrentMode(cfRunLoop))
                try? probe.beforeWait(timeoutNs: Self.timeoutNs(nextTimer: next, now: CFAbsoluteTimeGetCurrent()))
            } else if activity == .afterWaiting {
                try? probe.afterWait(events: 1)
            }
        }
        guard let created else {
            throw WakemeterError.Unsupported(message: "RunLoopWakeupObserver: CFRunLoopObserverCreateWithHandler failed")
        }
        observer = created
        CFRunLoopAddObserver(cfRunLoop, observer, Self.cfMode(mode))
    }

    /// Stops observing.
    public func invalidate() {
        CFRunLoopObserverInvalidate(observer)
    }

    deinit {
        invalidate()
    }

    /// Nanoseconds until the next timer fires (-1 without a timer).
    static func timeoutNs(nextTimer: CFAbsoluteTime, now: CFAbsoluteTime) -> Int64 {
        guard nextTimer.isFinite, nextTimer > 0 else { return -1 }
        return timeoutNanoseconds(max(nextTimer - now, 0))
    }

    #if canImport(Darwin)
    private static func cfRunLoop(_ runLoop: RunLoop) -> CFRunLoop? {
        runLoop.getCFRunLoop()
    }

    private static func cfMode(_ mode: RunLoop.Mode) -> CFRunLoopMode {
        mode == .common ? .commonModes : CFRunLoopMode(mode.rawValue as CFString)
    }
    #else
    private static func cfRunLoop(_ runLoop: RunLoop) -> CFRunLoop? {
        if runLoop === RunLoop.current { return CFRunLoopGetCurrent() }
        if runLoop === RunLoop.main { return CFRunLoopGetMain() }
        return nil
    }

    /// CoreFoundation recognizes the common modes by pointer, so `.common`
    /// must be its own constant, not an equal string.
    private static func cfMode(_ mode: RunLoop.Mode) -> CFRunLoopMode? {
        if mode == .common { return kCFRunLoopCommonModes }
        if mode == .default { return kCFRunLoopDefaultMode }
        return CFStringCreateWithCString(kCFAllocatorDefault, mode.rawValue, CFStringBuiltInEncodings.UTF8.rawValue)
    }
    #endif
}
#endif
