package dev.wakemeter

import dev.wakemeter.ffi.LoopProbe as FfiLoopProbe
import dev.wakemeter.ffi.Sampler
import dev.wakemeter.ffi.SleepProbe as FfiSleepProbe
import dev.wakemeter.model.FfiConverterTypeLoopStats
import dev.wakemeter.model.FfiConverterTypeSleepStats
import dev.wakemeter.model.LoopStats
import dev.wakemeter.model.SleepStats
import kotlin.time.Duration

/** A raw handle of a [LoopProbe]: the only way to reach the loop functions of [FastPath]. */
internal class LoopHandle(handle: Long) {
    private val raw = RawHandle(handle, "probe", FastPath::wakemeter_loop_probe_release)

    fun beforeWait(timeoutNs: Long) = raw.use { FastPath.check(FastPath.wakemeter_loop_probe_before_wait(it, timeoutNs)) }

    fun afterWait(events: Int) = raw.use { FastPath.check(FastPath.wakemeter_loop_probe_after_wait(it, events)) }

    fun stats(): LoopStats = raw.use { h ->
        FastPath.record(call = { a, c, _ -> FastPath.wakemeter_loop_probe_stats(h, a, c) }) { FfiConverterTypeLoopStats.read(it) }
    }

    fun close() = raw.close()
}

/** A raw handle of a [SleepProbe]: the only way to reach the sleep functions of [FastPath]. */
internal class SleepHandle(handle: Long) {
    private val raw = RawHandle(handle, "probe", FastPath::wakemeter_sleep_probe_release)

    fun begin(requestedNs: Long) = raw.use { FastPath.check(FastPath.wakemeter_sleep_probe_begin(it, requestedNs)) }

    fun end() = raw.use { FastPath.check(FastPath.wakemeter_sleep_probe_end(it)) }

    fun stats(): SleepStats = raw.use { h ->
        FastPath.record(call = { a, c, _ -> FastPath.wakemeter_sleep_probe_stats(h, a, c) }) { FfiConverterTypeSleepStats.read(it) }
    }

    fun close() = raw.close()
}

/** A wait timeout in the library's form: nanoseconds, -1 for "no timeout" (as in `poll`). */
fun Duration?.toTimeoutNs(): Long = when {
    this == null || this.isInfinite() || this.isNegative() -> -1L
    else -> this.inWholeNanoseconds
}

/**
 * A loop probe for Kotlin: the library's probe ([FfiLoopProbe]) driven
 * through the allocation-free fast path. Call [beforeWait] right before the loop blocks and [afterWait]
 * right after, or wrap the blocking call with [wait] or [instrument].
 * Closing it releases the probe (see [close]).
 *
 * One instance per loop, used by the loop's thread.
 */
class LoopProbe internal constructor(val probe: FfiLoopProbe, rawHandle: Long) : AutoCloseable {
    /** Drives [probe], a probe made by the generated [Sampler.loopProbe], on the fast path. */
    constructor(probe: FfiLoopProbe) : this(probe, probe.rawHandle().toLong())

    private val handle = LoopHandle(rawHandle)

    /**
     * The loop is about to wait; `null` (or infinite) = until an event, zero = a non-blocking poll.
     *
     * @throws IllegalStateException once this probe is closed.
     * @throws dev.wakemeter.ffi.WakemeterException.SamplerGone once the sampler is shut down or released.
     */
    fun beforeWait(timeout: Duration?) = handle.beforeWait(timeout.toTimeoutNs())

    /**
     * The wait returned with [events] ready events (0: timed out or woke for nothing).
     *
     * @throws IllegalStateException once this probe is closed.
     * @throws dev.wakemeter.ffi.WakemeterException.SamplerGone once the sampler is shut down or released.
     */
    fun afterWait(events: Int) = handle.afterWait(events.coerceAtLeast(0))

    /**
     * Records one wait: [wait] is the blocking call (poll, select, queue.poll…)
     * and returns how many events it got. An exception from [wait] is recorded
     * as a wakeup with no events and rethrown.
     */
    inline fun wait(timeout: Duration?, wait: () -> Int): Int {
        beforeWait(timeout)
        val events = try {
            wait()
        } catch (t: Throwable) {
            afterWait(0)
            throw t
        }
        afterWait(events)
        return events
    }

    /**
     * Wraps the loop's wait function so every call is recorded:
     * `val poll = loop.instrument { timeout -> selector.select(timeout.millis) }`.
     */
    fun instrument(wait: (timeout: Duration?) -> Int): (Duration?) -> Int =
        { timeout -> wait(timeout) { wait(timeout) } }

    /**
     * The probe's cumulative counters.
     *
     * @throws IllegalStateException once this probe is closed.
     * @throws dev.wakemeter.ffi.WakemeterException.SamplerGone once the sampler is shut down or released.
     */
    fun stats(): LoopStats = handle.stats()

    /**
     * Releases the probe. Idempotent, and safe from any thread, even while
     * another thread is inside a call: the probe is released once that call
     * returns, and every later call throws [IllegalStateException].
     */
    override fun close() {
        handle.close()
        probe.close()
    }
}

/**
 * A sleep probe for Kotlin: the library's probe ([FfiSleepProbe]) driven
 * through the allocation-free fast path. Closing it releases the probe (see [close]).
 */
class SleepProbe internal constructor(val probe: FfiSleepProbe, rawHandle: Long) : AutoCloseable {
    /** Drives [probe], a probe made by the generated [Sampler.sleepProbe], on the fast path. */
    constructor(probe: FfiSleepProbe) : this(probe, probe.rawHandle().toLong())

    private val handle = SleepHandle(rawHandle)

    /**
     * A sleep of [requested] is about to start.
     *
     * @throws IllegalStateException once this probe is closed.
     * @throws dev.wakemeter.ffi.WakemeterException.SamplerGone once the sampler is shut down or released.
     */
    fun begin(requested: Duration) = handle.begin(requested.inWholeNanoseconds.coerceAtLeast(0))

    /**
     * The sleep started by [begin] returned.
     *
     * @throws IllegalStateException once this probe is closed.
     * @throws dev.wakemeter.ffi.WakemeterException.SamplerGone once the sampler is shut down or released.
     */
    fun end() = handle.end()

    /** Records your own sleep call [sleep] as a sleep of [requested]. */
    inline fun <T> measure(requested: Duration, sleep: () -> T): T {
        begin(requested)
        try {
            return sleep()
        } finally {
            end()
        }
    }

    /** Sleeps the calling thread with `Thread.sleep` and records it. */
    fun sleep(duration: Duration) = measure(duration) { Thread.sleep(duration.inWholeMilliseconds, (duration.inWholeNanoseconds % 1_000_000).toInt()) }

    /**
     * The probe's cumulative counters.
     *
     * @throws IllegalStateException once this probe is closed.
     * @throws dev.wakemeter.ffi.WakemeterException.SamplerGone once the sampler is shut down or released.
     */
    fun stats(): SleepStats = handle.stats()

    /**
     * Releases the probe. Idempotent, and safe from any thread, even while
     * another thread is inside a call: the probe is released once that call
     * returns, and every later call throws [IllegalStateException].
     */
    override fun close() {
        handle.close()
        probe.close()
    }
}

/**
 * A new loop probe of this sampler on the fast path (see [LoopProbe]),
 * created through the fast path too when the sampler came from
 * [wakemeter]. The generated [Sampler.loopProbe] returns the library's
 * probe itself, whose calls go through the slower generated path.
 */
fun Sampler.newLoopProbe(name: String): LoopProbe =
    if (this is FastSampler) createLoopProbe(name) else LoopProbe(loopProbe(name))

/** A new sleep probe of this sampler on the fast path (see [SleepProbe] and [newLoopProbe]). */
fun Sampler.newSleepProbe(name: String): SleepProbe =
    if (this is FastSampler) createSleepProbe(name) else SleepProbe(sleepProbe(name))
