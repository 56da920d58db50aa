// Idiomatic Kotlin over the generated bindings: the records in
// dev.wakemeter.model (the core's own), the objects in dev.wakemeter.ffi.
package dev.wakemeter

import dev.wakemeter.ffi.CallbackThreads
import dev.wakemeter.model.Finding
import dev.wakemeter.model.Interval
import dev.wakemeter.ffi.ListenerException
import dev.wakemeter.ffi.Sampler
import dev.wakemeter.model.SamplerConfig
import dev.wakemeter.ffi.SamplerListener
import dev.wakemeter.model.Thresholds
import dev.wakemeter.model.Target
import dev.wakemeter.model.defaultSamplerConfig
import kotlin.time.Duration
import kotlin.time.toJavaDuration
import kotlin.time.toKotlinDuration
import kotlinx.coroutines.channels.BufferOverflow
import kotlinx.coroutines.channels.awaitClose
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.buffer
import kotlinx.coroutines.flow.callbackFlow

/**
 * Settings of a [Sampler], set inside the [wakemeter] builder block. They
 * start from the library's defaults ([defaultSamplerConfig], the one place
 * defaults live). Out-of-range values are not checked here: the library
 * rejects them with a typed [dev.wakemeter.ffi.WakemeterException.InvalidConfig].
 */
class SamplerSettings {
    private val defaults = defaultSamplerConfig()

    /** Time between background samples; at least 1 ms. */
    var interval: Duration = defaults.interval.toKotlinDuration()

    /** Snapshots kept in history (1 to 100000), within [historyBudgetBytes]. */
    var history: Int = defaults.history.toInt()

    /**
     * Byte budget of the history, in bytes (64 KiB to 1 GiB; default 32 MiB):
     * the oldest snapshots are dropped when it is reached, before [history] is
     * (counted in `stats().totalHistoryDroppedForBytes`).
     */
    var historyBudgetBytes: Long = defaults.historyBudgetBytes.toLong()

    /** Process to observe; `null` observes this process. */
    var pid: Int? = (defaults.target as? Target.Pid)?.v1?.toInt()

    /** Read voluntary/involuntary switch counts every Nth sample (1 = every sample). */
    var switchSplitEvery: Int = defaults.switchSplitEvery.toInt()

    /** Name of the background sampling thread (1 to 15 bytes). */
    var threadName: String = defaults.threadName

    /** Thresholds of the findings engine; change fields with `copy(window = …)`. */
    var thresholds: Thresholds = defaults.thresholds

    /** Threads a report lists one by one; the rest are counted in its groups by name. */
    var reportThreads: Int = defaults.reportThreads.toInt()

    /** The library's configuration record for these settings. */
    fun toConfig(): SamplerConfig = defaults.copy(
        // A negative interval becomes zero, which the library reports as
        // InvalidConfig like any other bad value.
        interval = interval.coerceAtLeast(Duration.ZERO).toJavaDuration(),
        history = history.toUInt(),
        // A negative budget becomes zero, which the library rejects.
        historyBudgetBytes = historyBudgetBytes.coerceAtLeast(0).toULong(),
        target = pid?.let { Target.Pid(it.toUInt()) } ?: Target.SelfProcess,
        switchSplitEvery = switchSplitEvery.toUInt(),
        threadName = threadName,
        thresholds = thresholds,
        reportThreads = reportThreads.coerceAtLeast(0).toUInt(),
    )
}

/**
 * Builds a sampler: `wakemeter { interval = 1.seconds; history = 300 }`.
 * The sampler is [AutoCloseable]; `use { }` stops it and releases it.
 *
 * Its methods that return data (`stats()`, `report()`, `findings()`,
 * intervals, snapshots…) and [newLoopProbe]/[newSleepProbe] go through the
 * JVM fast path (a few microseconds each, no JNA structure per call); a
 * sampler made with the generated constructor `Sampler(config)` works the
 * same but at the generated calls' cost.
 *
 * @throws dev.wakemeter.ffi.WakemeterException.InvalidConfig for out-of-range settings.
 */
fun wakemeter(configure: SamplerSettings.() -> Unit = {}): Sampler {
    CallbackThreads.install()
    return FastSampler(SamplerSettings().apply(configure).toConfig())
}

/** The configured sampling period as a Kotlin [Duration]. */
val Sampler.interval: Duration get() = config().interval.toKotlinDuration()

/** The interval over the last [window] of history (see [Sampler.intervalOver]). */
fun Sampler.intervalOver(window: Duration): Interval? =
    intervalOver(window.coerceAtLeast(Duration.ZERO).toJavaDuration())

/** Runs [block] with background sampling started, and stops it afterwards. */
inline fun <R> Sampler.sampling(block: (Sampler) -> R): R {
    start()
    try {
        return block(this)
    } finally {
        stop()
    }
}

/**
 * A [SamplerListener] with empty methods: override only what you need.
 * Methods run on wakemeter's delivery thread. Register it with
 * [Sampler.listen]: then whatever it throws, [Error]s included, is counted
 * in [Sampler.listenerStats] and does not stop sampling. (The generated
 * [Sampler.addListener] counts [Exception]s only; see [Sampler.listen].)
 */
open class SamplerListenerAdapter : SamplerListener {
    override fun onInterval(interval: Interval) {}
    override fun onFinding(finding: Finding) {}
}

/**
 * Registers [listener]; closing the returned handle unregisters it.
 *
 * Everything the listener throws is counted in [Sampler.listenerStats]
 * (with its stack trace as the message) and does not stop sampling,
 * [Error]s such as [AssertionError] or [StackOverflowError] included. The
 * generated [Sampler.addListener] counts only [Exception]s: the generated
 * callback code lets an [Error] through to JNA, which logs it and returns
 * to the library as if the call had succeeded.
 */
fun Sampler.listen(listener: SamplerListener): AutoCloseable {
    CallbackThreads.install()
    val id = addListener(CountingEveryThrowable(listener))
    return AutoCloseable { removeListenerQuietly(id) }
}

/** Registers callbacks for intervals and findings, as [listen] with a listener. */
fun Sampler.listen(
    onInterval: (Interval) -> Unit = {},
    onFinding: (Finding) -> Unit = {},
): AutoCloseable = listen(object : SamplerListener {
    override fun onInterval(interval: Interval) = onInterval(interval)
    override fun onFinding(finding: Finding) = onFinding(finding)
})

/**
 * Passes every call to [listener] and turns any [Error] it throws into a
 * [ListenerException.Unexpected], which the generated code hands to the
 * library (as it does on its own for other exceptions) so it is counted.
 */
private class CountingEveryThrowable(private val listener: SamplerListener) : SamplerListener {
    override fun onInterval(interval: Interval) = relay { listener.onInterval(interval) }

    override fun onFinding(finding: Finding) = relay { listener.onFinding(finding) }

    private inline fun relay(call: () -> Unit) {
        try {
            call()
        } catch (e: Exception) {
            throw e // the generated code reports these itself
        } catch (e: Throwable) {
            // The same text the generated code sends for an exception.
            val reason = try {
                e.stackTraceToString()
            } catch (_: Throwable) {
                e.javaClass.name
            }
            throw ListenerException.Unexpected(reason)
        }
    }
}

/**
 * The intervals of background sampling, one per tick, as a cold [Flow]:
 * collecting registers a listener, cancelling removes it. Start sampling
 * ([Sampler.start]) for values to arrive. A slow collector loses the oldest
 * intervals rather than delaying the sampler.
 */
fun Sampler.intervalFlow(capacity: Int = 64): Flow<Interval> = callbackFlow {
    val registration = listen(onInterval = { trySend(it) })
    awaitClose { registration.close() }
}.buffer(capacity, BufferOverflow.DROP_OLDEST)

/**
 * Findings as they appear during background sampling (each one once, and
 * again only if it becomes more severe), as a cold [Flow].
 */
fun Sampler.findingFlow(capacity: Int = 64): Flow<Finding> = callbackFlow {
    val registration = listen(onFinding = { trySend(it) })
    awaitClose { registration.close() }
}.buffer(capacity, BufferOverflow.DROP_OLDEST)

/** Removes a listener; the sampler may already be released when a flow is cancelled. */
internal fun Sampler.removeListenerQuietly(id: ULong) {
    try {
        removeListener(id)
    } catch (_: IllegalStateException) {
        // Already released: its listeners went with it.
    }
}
