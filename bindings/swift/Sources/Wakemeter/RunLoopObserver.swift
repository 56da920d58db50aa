// Reports a RunLoop's sleeps and wakeups through a LoopProbe.
#if canImport(Darwin)
import CoreFoundation
import Foundation

/// Observes a run loop and reports each sleep as a wait of `probe`:
/// `beforeWaiting` → `beforeWait`, `afterWaiting` → `afterWait`.
///
/// The timeout of each wait is the time to the run loop's next timer (none:
/// "until an event"), so timer wakeups count as timed out and source
/// wakeups as early. The run loop does not say how many sources fired, so
/// each wakeup counts one event.
///
/// Create it on the run loop's own thread; it stops observing when it is
/// invalidated or deallocated.
public final class RunLoopWakeupObserver {
    /// The probe the wakeups are reported through.
    public let probe: LoopProbe
    private let observer: CFRunLoopObserver

    /// Starts observing `runLoop` (default: the current thread's) in `mode`.
    public init(probe: LoopProbe, runLoop: RunLoop = .current, mode: CFRunLoopMode = .commonModes) {
        self.probe = probe
        let cfRunLoop = runLoop.getCFRunLoop()
        let activities = CFRunLoopActivity.beforeWaiting.rawValue | CFRunLoopActivity.afterWaiting.rawValue
        observer = CFRunLoopObserverCreateWithHandler(kCFAllocatorDefault, activities, true, 0) { _, activity in
            if activity == .beforeWaiting {
                let next = CFRunLoopGetNextTimerFireDate(cfRunLoop, CFRunLoopCopyCurrentMode(cfRunLoop))
                try? probe.beforeWait(timeoutNs: Self.timeoutNs(nextTimer: next, now: CFAbsoluteTimeGetCurrent()))
            } else if activity == .afterWaiting {
                try? probe.afterWait(events: 1)
            }
        }
        CFRunLoopAddObserver(cfRunLoop, observer, mode)
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
}
#endif
