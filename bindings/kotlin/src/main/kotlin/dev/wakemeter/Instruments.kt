package dev.wakemeter

import com.sun.jna.Native
import dev.wakemeter.ffi.LoopProbe
import dev.wakemeter.ffi.LoopStats
import dev.wakemeter.ffi.Sampler
import dev.wakemeter.ffi.SleepProbe
import dev.wakemeter.ffi.SleepStats
import dev.wakemeter.ffi.WakemeterException
import java.util.concurrent.atomic.AtomicLong
import kotlin.time.Duration

/**
 * The probes' hot path as plain C functions of the wakemeter library.
 *
 * A generated uniffi call allocates a JNA Structure for its call status,
 * which costs tens of microseconds per call on the JVM; these functions take
 * and return only integers, so JNA's direct mapping calls them without
 * allocating (well under a microsecond). See `crates/ffi/src/fast.rs`.
 */
internal object FastPath {
    const val OK = 0
    const val SAMPLER_GONE = 1

    init {
        // Same library, and the same override property, as the generated code.
        val name = System.getProperty("uniffi.component.wakemeter_ffi.libraryOverride") ?: "wakemeter_ffi"
        Native.register(FastPath::class.java, name)
    }

    external fun wakemeter_loop_probe_before_wait(handle: Long, timeoutNs: Long): Int
    external fun wakemeter_loop_probe_after_wait(handle: Long, events: Int): Int
    external fun wakemeter_loop_probe_release(handle: Long)
    external fun wakemeter_sleep_probe_begin(handle: Long, requestedNs: Long): Int
    external fun wakemeter_sleep_probe_end(handle: Long): Int
    external fun wakemeter_sleep_probe_release(handle: Long)

    fun check(code: Int) {
        when (code) {
            OK -> Unit
            SAMPLER_GONE -> throw WakemeterException.SamplerGone("the probe's sampler is gone (shut down or released)")
            else -> throw WakemeterException.Other("wakemeter probe call failed with code $code")
        }
    }
}

/**
 * Owns one raw handle: counts calls in flight so the handle is released only
 * after the last of them, and refuses calls after [close].
 */
internal class RawHandle(private val handle: Long, private val release: (Long) -> Unit) {
    private val calls = AtomicLong(1)

    inline fun <R> use(block: (Long) -> R): R {
        while (true) {
            val c = calls.get()
            check(c != 0L) { "the probe is closed" }
            if (calls.compareAndSet(c, c + 1)) break
        }
        try {
            return block(handle)
        } finally {
            if (calls.decrementAndGet() == 0L) release(handle)
        }
    }

    fun close() {
        while (true) {
            val c = calls.get()
            if (c == 0L) return
            // Drop the initial reference once; the last call in flight releases.
            if (calls.compareAndSet(c, c - 1)) {
                if (c == 1L) release(handle)
                return
            }
        }
    }
}

/** A wait timeout in the library's form: nanoseconds, -1 for "no timeout" (as in `poll`). */
fun Duration?.toTimeoutNs(): Long = when {
    this == null || this.isInfinite() || this.isNegative() -> -1L
    else -> this.inWholeNanoseconds
}

/**
 * Instruments one event loop through a [LoopProbe], on the allocation-free
 * fast path. Call [beforeWait] right before the loop blocks and [afterWait]
 * right after, or wrap the blocking call with [wait] or [instrument].
 * Closing it releases the probe.
 *
 * One instance per loop, used by the loop's thread.
 */
class LoopInstrument(val probe: LoopProbe) : AutoCloseable {
    private val handle = RawHandle(probe.rawHandle().toLong(), FastPath::wakemeter_loop_probe_release)

    /** The loop is about to wait; `null` (or infinite) = until an event, zero = a non-blocking poll. */
    fun beforeWait(timeout: Duration?) = handle.use {
        FastPath.check(FastPath.wakemeter_loop_probe_before_wait(it, timeout.toTimeoutNs()))
    }

    /** The wait returned with [events] ready events (0: timed out or woke for nothing). */
    fun afterWait(events: Int) = handle.use {
        FastPath.check(FastPath.wakemeter_loop_probe_after_wait(it, events.coerceAtLeast(0)))
    }

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

    /** The probe's cumulative counters. */
    fun stats(): LoopStats = probe.stats()

    override fun close() {
        handle.close()
        probe.close()
    }
}

/**
 * Instruments a sleep-and-check loop through a [SleepProbe], on the
 * allocation-free fast path. Closing it releases the probe.
 */
class SleepInstrument(val probe: SleepProbe) : AutoCloseable {
    private val handle = RawHandle(probe.rawHandle().toLong(), FastPath::wakemeter_sleep_probe_release)

    /** A sleep of [requested] is about to start. */
    fun begin(requested: Duration) = handle.use {
        FastPath.check(FastPath.wakemeter_sleep_probe_begin(it, requested.inWholeNanoseconds.coerceAtLeast(0)))
    }

    /** The sleep started by [begin] returned. */
    fun end() = handle.use { FastPath.check(FastPath.wakemeter_sleep_probe_end(it)) }

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

    /** The probe's cumulative counters. */
    fun stats(): SleepStats = probe.stats()

    override fun close() {
        handle.close()
        probe.close()
    }
}

/** A new loop probe of this sampler, wrapped for Kotlin (see [LoopInstrument]). */
fun Sampler.instrumentLoop(name: String): LoopInstrument = LoopInstrument(loopProbe(name))

/** A new sleep probe of this sampler, wrapped for Kotlin (see [SleepInstrument]). */
fun Sampler.instrumentSleep(name: String): SleepInstrument = SleepInstrument(sleepProbe(name))
