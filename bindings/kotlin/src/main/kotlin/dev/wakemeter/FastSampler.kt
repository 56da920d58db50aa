package dev.wakemeter

import dev.wakemeter.ffi.FfiConverterOptionalTypeSnapshot
import dev.wakemeter.ffi.FfiConverterSequenceTypeSnapshot
import dev.wakemeter.ffi.FfiConverterTypeListenerStats
import dev.wakemeter.ffi.FfiConverterTypeLoopProbe
import dev.wakemeter.ffi.FfiConverterTypeSleepProbe
import dev.wakemeter.ffi.ListenerStats
import dev.wakemeter.ffi.Sampler
import dev.wakemeter.ffi.UniffiLib
import dev.wakemeter.model.FfiConverterBoolean
import dev.wakemeter.model.FfiConverterDuration
import dev.wakemeter.model.FfiConverterOptionalTypeInterval
import dev.wakemeter.model.FfiConverterSequenceTypeFinding
import dev.wakemeter.model.FfiConverterString
import dev.wakemeter.model.FfiConverterTypeReport
import dev.wakemeter.model.FfiConverterTypeSamplerConfig
import dev.wakemeter.model.FfiConverterTypeSamplerStats
import dev.wakemeter.model.FfiConverterTypeSnapshot
import dev.wakemeter.model.FfiConverterTypeSystemInfo
import dev.wakemeter.model.FfiConverterTypeThresholds
import dev.wakemeter.model.Finding
import dev.wakemeter.model.Interval
import dev.wakemeter.model.Report
import dev.wakemeter.model.SamplerConfig
import dev.wakemeter.model.SamplerStats
import dev.wakemeter.model.Snapshot
import dev.wakemeter.model.SystemInfo
import dev.wakemeter.model.Thresholds
import java.nio.ByteBuffer

/**
 * The [Sampler] that [wakemeter] builds: the generated class, with every
 * method that returns data answered through [FastPath] (one direct call,
 * no JNA structure) instead of the generated call. Callers see a plain
 * [Sampler]; methods not overridden here (`start`, `stop`, `shutdown`,
 * listeners) are the generated ones, called rarely.
 *
 * It holds a raw handle of the library's sampler besides the generated
 * object's own; [destroy] (`close()`, `use {}`) releases both, the raw one
 * after the last call in flight, and the cleaner releases it if the sampler
 * is dropped unclosed, as the generated code does for its handle.
 */
internal class FastSampler(config: SamplerConfig) : Sampler(config) {
    private val raw = RawHandle(rawHandle().toLong(), "sampler", FastPath::wakemeter_sampler_release)

    // A separate class so that the cleaner's action does not keep this sampler reachable.
    private class Release(private val raw: RawHandle) : Runnable {
        override fun run() = raw.close()
    }

    private val release = UniffiLib.CLEANER.register(this, Release(raw))

    /** Operation [op] of `wakemeter_sampler_call` (numbers as in fast/sampler_calls.rs). */
    private inline fun <R> call(
        op: Int,
        inputBytes: Long = 0,
        write: (ByteBuffer) -> Unit = {},
        read: (ByteBuffer) -> R,
    ): R = raw.use { h ->
        FastPath.record(inputBytes, write, { a, c, n -> FastPath.wakemeter_sampler_call(h, op, a, c, n) }, read)
    }

    override fun stats(): SamplerStats = call(STATS) { FfiConverterTypeSamplerStats.read(it) }

    override fun report(): Report = call(REPORT) { FfiConverterTypeReport.read(it) }

    override fun reportJson(): String = call(REPORT_JSON) { FfiConverterString.read(it) }

    override fun findings(): List<Finding> = call(FINDINGS) { FfiConverterSequenceTypeFinding.read(it) }

    override fun findingsWith(thresholds: Thresholds): List<Finding> = call(
        FINDINGS_WITH,
        FfiConverterTypeThresholds.allocationSize(thresholds).toLong(),
        { FfiConverterTypeThresholds.write(thresholds, it) },
    ) { FfiConverterSequenceTypeFinding.read(it) }

    override fun latestInterval(): Interval? = call(LATEST_INTERVAL) { FfiConverterOptionalTypeInterval.read(it) }

    override fun intervalOver(window: java.time.Duration): Interval? = call(
        INTERVAL_OVER,
        FfiConverterDuration.allocationSize(window).toLong(),
        { FfiConverterDuration.write(window, it) },
    ) { FfiConverterOptionalTypeInterval.read(it) }

    override fun sampleNow(): Snapshot = call(SAMPLE_NOW) { FfiConverterTypeSnapshot.read(it) }

    override fun latest(): Snapshot? = call(LATEST) { FfiConverterOptionalTypeSnapshot.read(it) }

    override fun snapshots(): List<Snapshot> = call(SNAPSHOTS) { FfiConverterSequenceTypeSnapshot.read(it) }

    override fun listenerStats(): ListenerStats = call(LISTENER_STATS) { FfiConverterTypeListenerStats.read(it) }

    override fun isRunning(): Boolean = call(IS_RUNNING) { FfiConverterBoolean.read(it) }

    override fun config(): SamplerConfig = call(CONFIG) { FfiConverterTypeSamplerConfig.read(it) }

    override fun system(): SystemInfo = call(SYSTEM) { FfiConverterTypeSystemInfo.read(it) }

    override fun thresholds(): Thresholds = call(THRESHOLDS) { FfiConverterTypeThresholds.read(it) }

    /** A new loop probe, created and driven on the fast path (see [newLoopProbe]). */
    fun createLoopProbe(name: String): LoopProbe = call(
        LOOP_PROBE,
        FfiConverterString.allocationSize(name).toLong(),
        { FfiConverterString.write(name, it) },
    ) { LoopProbe(FfiConverterTypeLoopProbe.read(it), it.getLong()) }

    /** A new sleep probe, created and driven on the fast path (see [newSleepProbe]). */
    fun createSleepProbe(name: String): SleepProbe = call(
        SLEEP_PROBE,
        FfiConverterString.allocationSize(name).toLong(),
        { FfiConverterString.write(name, it) },
    ) { SleepProbe(FfiConverterTypeSleepProbe.read(it), it.getLong()) }

    /** Releases the raw handle (after any call in flight), then the generated object's handle. */
    override fun destroy() {
        release.clean()
        super.destroy()
    }

    private companion object {
        // Operation numbers of wakemeter_sampler_call: SAMPLER_* in crates/ffi/src/fast/sampler_calls.rs
        // (crates/ffi/tests/kotlin_constants.rs fails when they differ).
        const val STATS = 1
        const val REPORT = 2
        const val REPORT_JSON = 3
        const val FINDINGS = 4
        const val FINDINGS_WITH = 5
        const val LATEST_INTERVAL = 6
        const val INTERVAL_OVER = 7
        const val SAMPLE_NOW = 8
        const val LATEST = 9
        const val SNAPSHOTS = 10
        const val LISTENER_STATS = 11
        const val IS_RUNNING = 12
        const val CONFIG = 13
        const val SYSTEM = 14
        const val THRESHOLDS = 15
        const val LOOP_PROBE = 16
        const val SLEEP_PROBE = 17
    }
}
