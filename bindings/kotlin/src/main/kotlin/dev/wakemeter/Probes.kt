package dev.wakemeter

import com.sun.jna.Native
import dev.wakemeter.ffi.LoopProbe as FfiLoopProbe
import dev.wakemeter.model.LoopStats
import dev.wakemeter.ffi.Sampler
import dev.wakemeter.ffi.SleepProbe as FfiSleepProbe
import dev.wakemeter.model.SleepStats
import dev.wakemeter.ffi.WakemeterException
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicLong
import kotlin.time.Duration

/**
 * The probes' hot path as plain C functions of the wakemeter library.
 *
 * A generated uniffi call allocates a JNA Structure for its call status,
 * which costs tens of microseconds per call on the JVM; these functions take
 * and return only integers, so JNA's direct mapping calls them without
 * allocating (well under a microsecond). See `crates/ffi/src/fast.rs`.
 *
 * The handles are bare numbers here because JNA's direct mapping needs
 * primitives; only [LoopHandle] and [SleepHandle] call these functions, each
 * with its own kind of handle. The library checks the kind as well.
 */
internal object FastPath {
    // Return codes of the C functions, as in fast.rs.
    const val OK = 0
    const val SAMPLER_GONE = 1
    const val BAD_HANDLE = 2
    const val PANICKED = 3
    const val WRONG_KIND = 4

    init {
        // Same library, and the same override property, as the generated code.
        val name = System.getProperty("uniffi.component.wakemeter_ffi.libraryOverride") ?: "wakemeter_ffi"
        Native.register(FastPath::class.java, name)
    }

    external fun wakemeter_loop_probe_before_wait(handle: Long, timeoutNs: Long): Int
    external fun wakemeter_loop_probe_after_wait(handle: Long, events: Int): Int
    external fun wakemeter_loop_probe_release(handle: Long): Int
    external fun wakemeter_sleep_probe_begin(handle: Long, requestedNs: Long): Int
    external fun wakemeter_sleep_probe_end(handle: Long): Int
    external fun wakemeter_sleep_probe_release(handle: Long): Int

    /**
     * Turns a return code into an exception.
     *
     * @throws WakemeterException.SamplerGone when the probe's sampler is shut down or released.
     * @throws IllegalStateException for the codes that mean a bug in wakemeter (a bad or
     *   wrong-kind handle, a panic in the library); nothing was recorded.
     */
    fun check(code: Int) {
        when (code) {
            OK -> Unit
            SAMPLER_GONE -> throw WakemeterException.SamplerGone("the probe's sampler is gone (shut down or released)")
            BAD_HANDLE -> throw IllegalStateException("wakemeter bug: the probe handle is not live (0, or already released)")
            WRONG_KIND -> throw IllegalStateException("wakemeter bug: a probe handle of the other kind (loop vs sleep) was used")
            PANICKED -> throw IllegalStateException("wakemeter bug: the library panicked; nothing was recorded")
            else -> throw IllegalStateException("wakemeter bug: unknown return code $code from the library")
        }
    }
}

/**
 * Owns one raw handle: counts the calls in flight so it is released exactly
 * once, after the last of them, and refuses calls once [close] was called.
 *
 * [holders] is 1 for the owner until [close], plus one per call in flight;
 * the handle is freed by whoever brings it to 0. Only the one [close] that
 * wins [closed] drops the owner's 1, so closing again, or from several
 * threads at once, cannot drop it twice; and a call never takes a hold from
 * 0, so nothing runs on a freed handle.
 */
internal class RawHandle(private val handle: Long, private val free: (Long) -> Int) {
    private val closed = AtomicBoolean(false)
    private val holders = AtomicLong(1)

    /** Runs [block] with the handle, which stays live until [block] returns. */
    inline fun <R> use(block: (Long) -> R): R {
        hold()
        try {
            return block(handle)
        } finally {
            letGo()
        }
    }

    /** Takes a hold for one call; throws if the handle is closed. */
    fun hold() {
        while (true) {
            val n = holders.get()
            // A call that slips in between a concurrent close's flag and its
            // decrement still holds the handle, so it is safe to finish.
            check(n > 0L && !closed.get()) { "the probe is closed" }
            if (holders.compareAndSet(n, n + 1)) return
        }
    }

    /** Gives back a hold from [hold]; the last one frees the handle. */
    fun letGo() {
        if (holders.decrementAndGet() == 0L) FastPath.check(free(handle))
    }

    /** Refuses later calls and gives up the owner's hold; idempotent and thread-safe. */
    fun close() {
        if (closed.compareAndSet(false, true)) letGo()
    }
}

/** A handle to a [LoopProbe]: the only way to reach the loop functions of [FastPath]. */
internal class LoopHandle(probe: FfiLoopProbe) {
    private val raw = RawHandle(probe.rawHandle().toLong(), FastPath::wakemeter_loop_probe_release)

    fun beforeWait(timeoutNs: Long) = raw.use { FastPath.check(FastPath.wakemeter_loop_probe_before_wait(it, timeoutNs)) }

    fun afterWait(events: Int) = raw.use { FastPath.check(FastPath.wakemeter_loop_probe_after_wait(it, events)) }

    fun close() = raw.close()
}

/** A handle to a [SleepProbe]: the only way to reach the sleep functions of [FastPath]. */
internal class SleepHandle(probe: FfiSleepProbe) {
    private val raw = RawHandle(probe.rawHandle().toLong(), FastPath::wakemeter_sleep_probe_release)

    fun begin(requestedNs: Long) = raw.use { FastPath.check(FastPath.wakemeter_sleep_probe_begin(it, requestedNs)) }

    fun end() = raw.use { FastPath.check(FastPath.wakemeter_sleep_probe_end(it)) }

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
class LoopProbe(val probe: FfiLoopProbe) : AutoCloseable {
    private val handle = LoopHandle(probe)

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

    /** The probe's cumulative counters. */
    fun stats(): LoopStats = probe.stats()

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
class SleepProbe(val probe: FfiSleepProbe) : AutoCloseable {
    private val handle = SleepHandle(probe)

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

    /** The probe's cumulative counters. */
    fun stats(): SleepStats = probe.stats()

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
 * A new loop probe of this sampler on the fast path (see [LoopProbe]). The
 * generated [Sampler.loopProbe] returns the library's probe itself, whose
 * calls go through the slower generated path.
 */
fun Sampler.newLoopProbe(name: String): LoopProbe = LoopProbe(loopProbe(name))

/** A new sleep probe of this sampler on the fast path (see [SleepProbe]). */
fun Sampler.newSleepProbe(name: String): SleepProbe = SleepProbe(sleepProbe(name))
