package dev.wakemeter

import com.sun.management.GarbageCollectionNotificationInfo
import dev.wakemeter.ffi.FfiConverterOptionalTypeSnapshot
import dev.wakemeter.ffi.FfiConverterSequenceTypeSnapshot
import dev.wakemeter.ffi.FfiConverterTypeSampler
import dev.wakemeter.ffi.Sampler
import dev.wakemeter.model.FfiConverterOptionalTypeInterval
import dev.wakemeter.model.FfiConverterSequenceTypeFinding
import dev.wakemeter.model.FfiConverterString
import dev.wakemeter.model.FfiConverterTypeLoopStats
import dev.wakemeter.model.FfiConverterTypeReport
import dev.wakemeter.model.FfiConverterTypeSamplerStats
import dev.wakemeter.model.Report
import dev.wakemeter.model.SamplerStats
import dev.wakemeter.model.defaultThresholds
import java.lang.management.ManagementFactory
import java.nio.ByteBuffer
import java.util.concurrent.atomic.AtomicLong
import javax.management.NotificationEmitter
import javax.management.NotificationListener
import javax.management.openmbean.CompositeData
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds
import kotlin.time.toJavaDuration
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/**
 * Cost of every call the Kotlin layer makes on a user's path, through the
 * generated uniffi code ("generated") and through the fast path that
 * [wakemeter]'s sampler and the instruments use ("fast"), beside a bare JNA
 * direct call that does nothing, in the same run. Prints the figures and
 * the garbage collections of a call loop; asserts only that every call
 * returned the right data (the generated and the fast call answer the same
 * for the same Rust sampler), never a timing: CI machines are noisy.
 *
 * `-Dwakemeter.bench.roundMs=300` measures longer (the figures in
 * BENCHMARKS.md); the default keeps the test suite quick.
 */
class CallCostBenchmarkTest {
    private val roundMs = System.getProperty("wakemeter.bench.roundMs")?.toLongOrNull() ?: 20L
    private val rounds = 5

    /** Keeps results alive so the JIT cannot drop the calls. */
    private var sink = 0

    private val threads = ManagementFactory.getThreadMXBean()

    /** Cost of one call: the minimum over the rounds of wall time and of this thread's CPU time. */
    private data class Cost(val wallNs: Double, val cpuNs: Double)

    /** Minimum over [rounds] rounds of ~[roundMs] each, in ns per call. */
    private fun nsPerCall(call: () -> Any?): Cost {
        fun round(limitNs: Long): Cost {
            var calls = 0L
            val cpu = threads.currentThreadCpuTime
            val start = System.nanoTime()
            var now = start
            while (now - start < limitNs) {
                repeat(16) { sink += call().hashCode() }
                calls += 16
                now = System.nanoTime()
            }
            return Cost((now - start).toDouble() / calls, (threads.currentThreadCpuTime - cpu).toDouble() / calls)
        }
        round(roundMs * 1_000_000) // warm up JNA and the JIT
        val all = (1..rounds).map { round(roundMs * 1_000_000) }
        return Cost(all.minOf { it.wallNs }, all.minOf { it.cpuNs })
    }

    /** ns per decoding of [value] by a generated converter ([write] then timed [read]s), without any native call. */
    private fun <T> decoding(value: T, write: (T, ByteBuffer) -> Unit, read: (ByteBuffer) -> T): Cost {
        val buf = ByteBuffer.allocateDirect(4 shl 20)
        write(value, buf)
        val len = buf.position()
        return nsPerCall { buf.position(0).limit(len); read(buf) }
    }

    /**
     * One call, on the generated path and on the fast path, with how to
     * compare their answers and how long the generated converter takes to
     * decode the answer (part of both paths' cost).
     */
    private class Case(
        val name: String,
        val generated: () -> Any?,
        val fast: () -> Any?,
        val decode: (() -> Cost)? = null,
        val comparable: (Any?) -> Any? = { it },
    )

    /** Collections and pause time of the collectors while [block] runs. */
    private class GcWatch : AutoCloseable {
        val count = AtomicLong()
        val totalMs = AtomicLong()
        val maxMs = AtomicLong()
        private val listener = NotificationListener { n, _ ->
            if (n.type == GarbageCollectionNotificationInfo.GARBAGE_COLLECTION_NOTIFICATION) {
                val ms = GarbageCollectionNotificationInfo.from(n.userData as CompositeData).gcInfo.duration
                count.incrementAndGet()
                totalMs.addAndGet(ms)
                maxMs.accumulateAndGet(ms, ::maxOf)
            }
        }
        private val emitters = ManagementFactory.getGarbageCollectorMXBeans().map { it as NotificationEmitter }

        init {
            emitters.forEach { it.addNotificationListener(listener, null, null) }
        }

        override fun close() = emitters.forEach { it.removeNotificationListener(listener) }
    }

    /**
     * Calls [call] for [seconds] and reports the calls made, the bytes this
     * thread allocated per call and the collections meanwhile. Collects
     * first, so that no earlier loop's garbage is counted.
     */
    private fun callLoop(seconds: Double, call: () -> Any?): String {
        System.gc()
        Thread.sleep(300)
        GcWatch().use { gc ->
            var calls = 0L
            val allocated = allocatedBytes()
            val end = System.nanoTime() + (seconds * 1e9).toLong()
            while (System.nanoTime() < end) {
                sink += call().hashCode()
                calls++
            }
            val perCall = (allocatedBytes() - allocated).toDouble() / calls
            Thread.sleep(300) // let the last notifications arrive
            return "%,d calls, %,.0f bytes allocated per call, %d GCs, %d ms paused in all, longest %d ms"
                .format(calls, perCall, gc.count.get(), gc.totalMs.get(), gc.maxMs.get())
        }
    }

    /** Bytes this thread has allocated on the Java heap so far. */
    private fun allocatedBytes(): Long = (threads as com.sun.management.ThreadMXBean).currentThreadAllocatedBytes

    @Test
    fun `every call answers the same data on both paths, and the costs are printed`() {
        wakemeter { history = 16 }.use { fast ->
            // The same Rust sampler, reached through the generated code only.
            val generated: Sampler = FfiConverterTypeSampler.lift(fast.uniffiCloneHandle())
            assertTrue(fast is FastSampler && generated !is FastSampler)
            val loop = fast.newLoopProbe("bench-loop")
            val nap = fast.newSleepProbe("bench-sleep")
            repeat(3) { loop.wait(Duration0) { 2 } }
            nap.measure(1.milliseconds) {}
            repeat(6) { fast.sampleNow() }
            val window = 10.seconds.toJavaDuration()
            val thresholds = defaultThresholds().copy(busyPollIdleRatio = 0.5)
            // What moves between two calls is set aside before comparing: a
            // report's time, and the sampler's own cost (making a report
            // counts as sampler overhead) and CPU share.
            val steadyStats = { s: Any? ->
                (s as SamplerStats).copy(totalSamplerCpuTimeNs = 0uL, samplerCpuPercent = 0.0, meanSampleCostNs = 0uL)
            }
            // How long the generated converter takes to decode each answer.
            fun <T> decoded(value: T, write: (T, ByteBuffer) -> Unit, read: (ByteBuffer) -> T) = { decoding(value, write, read) }
            val cases = listOf(
                Case("Sampler.stats()", generated::stats, fast::stats, decoded(fast.stats(), FfiConverterTypeSamplerStats::write, FfiConverterTypeSamplerStats::read), steadyStats),
                Case("Sampler.report()", generated::report, fast::report, decoded(fast.report(), FfiConverterTypeReport::write, FfiConverterTypeReport::read)) {
                    (it as Report).copy(unixTimeNs = 0uL, stats = steadyStats(it.stats) as SamplerStats)
                },
                Case("Sampler.reportJson()", generated::reportJson, fast::reportJson, decoded(fast.reportJson(), FfiConverterString::write, FfiConverterString::read)) {
                    (it as String).replace(Regex("\"(unix_time_ns|total_sampler_cpu_time_ns|sampler_cpu_percent|mean_sample_cost_ns)\":[0-9.e+-]+"), "")
                },
                Case("Sampler.findings()", generated::findings, fast::findings, decoded(fast.findings(), FfiConverterSequenceTypeFinding::write, FfiConverterSequenceTypeFinding::read)),
                Case("Sampler.findingsWith(t)", { generated.findingsWith(thresholds) }, { fast.findingsWith(thresholds) }),
                Case("Sampler.latestInterval()", generated::latestInterval, fast::latestInterval, decoded(fast.latestInterval(), FfiConverterOptionalTypeInterval::write, FfiConverterOptionalTypeInterval::read)),
                Case("Sampler.intervalOver(w)", { generated.intervalOver(window) }, { fast.intervalOver(window) }),
                Case("Sampler.latest()", generated::latest, fast::latest, decoded(fast.latest(), FfiConverterOptionalTypeSnapshot::write, FfiConverterOptionalTypeSnapshot::read)),
                Case("Sampler.snapshots() (6)", generated::snapshots, fast::snapshots, decoded(fast.snapshots(), FfiConverterSequenceTypeSnapshot::write, FfiConverterSequenceTypeSnapshot::read)),
                Case("Sampler.listenerStats()", generated::listenerStats, fast::listenerStats),
                Case("Sampler.isRunning()", generated::isRunning, fast::isRunning),
                Case("Sampler.config()", generated::config, fast::config),
                Case("Sampler.system()", generated::system, fast::system),
                Case("Sampler.thresholds()", generated::thresholds, fast::thresholds),
                Case("LoopProbe.stats()", loop.probe::stats, loop::stats, decoded(loop.stats(), FfiConverterTypeLoopStats::write, FfiConverterTypeLoopStats::read)),
                Case("SleepProbe.stats()", nap.probe::stats, nap::stats),
            )
            for (c in cases) {
                val a = c.generated()
                val b = c.fast()
                assertEquals(c.comparable(a), c.comparable(b), "${c.name}: the fast path answered differently")
            }
            assertEquals(6uL, fast.stats().totalSamples)
            assertEquals(6, fast.snapshots().size)
            assertEquals(fast.snapshots().last(), fast.latest())
            assertEquals(3uL, loop.stats().totalWakeups)
            assertEquals(6uL, loop.stats().totalEvents)
            assertEquals(1uL, nap.stats().totalCalls)
            assertTrue(fast.latestInterval()!!.loops.any { it.name == "bench-loop" })

            // The bare cost of a JNA direct call: a handle of 0 is refused at once.
            assertEquals(FastPath.BAD_HANDLE, FastPath.wakemeter_sleep_probe_end(0))
            val bare = nsPerCall { FastPath.wakemeter_sleep_probe_end(0) }
            val rows = cases.map { Row(it.name, nsPerCall(it.generated), nsPerCall(it.fast), it.decode?.invoke()) }.toMutableList()

            // sampleNow() stores a snapshot on each call: both paths add one.
            val before = fast.stats().totalSamples
            assertTrue(generated.sampleNow().threads.isNotEmpty() && fast.sampleNow().threads.isNotEmpty())
            assertEquals(before + 2uL, fast.stats().totalSamples)
            rows += Row("Sampler.sampleNow()", nsPerCall(generated::sampleNow), nsPerCall(fast::sampleNow), null)

            // Probe creation: the generated path is what newLoopProbe did before
            // (loopProbe + rawHandle). Created in batches, closed untimed.
            val forget = { fast.sampleNow() } // a closed probe is forgotten at the next snapshot
            rows += Row("newLoopProbe(name)", creation(forget) { LoopProbe(generated.loopProbe("g")) }, creation(forget) { fast.newLoopProbe("f") }, null)
            rows += Row("newSleepProbe(name)", creation(forget) { SleepProbe(generated.sleepProbe("g")) }, creation(forget) { fast.newSleepProbe("f") }, null)
            fast.newLoopProbe("named").use { assertEquals("named", it.probe.name()) }

            println("BENCH JVM call cost in ns per call, min of $rounds rounds of $roundMs ms; wall time / CPU time of the calling thread")
            println("BENCH %-26s %17s %17s %15s %9s".format("call", "generated", "fast", "decode", "ratio"))
            println("BENCH %-26s %17s %17s %15s".format("bare JNA direct call", "", bare.show(), ""))
            for (r in rows) {
                println("BENCH %-26s %17s %17s %15s %8.1fx".format(r.name, r.generated.show(), r.fast.show(), r.decode?.show() ?: "", r.generated.cpuNs / r.fast.cpuNs))
            }
            val loopSeconds = roundMs * 25 / 1000.0
            println("BENCH call loop of %.1f s, bare JNA direct call:      %s".format(loopSeconds, callLoop(loopSeconds) { FastPath.wakemeter_sleep_probe_end(0) }))
            println("BENCH call loop of %.1f s, Sampler.stats() fast:      %s".format(loopSeconds, callLoop(loopSeconds, fast::stats)))
            println("BENCH call loop of %.1f s, Sampler.stats() generated: %s".format(loopSeconds, callLoop(loopSeconds, generated::stats)))
            loop.close()
            nap.close()
            generated.close()
            assertTrue(sink != 42) // uses the sink
        }
    }

    /** One line of the printed table. */
    private class Row(val name: String, val generated: Cost, val fast: Cost, val decode: Cost?)

    private fun Cost.show() = "%,.0f / %,.0f".format(wallNs, cpuNs)

    /**
     * ns per creation of [create]'s instrument, made in batches of 500 and
     * closed between them ([forget] lets the sampler drop the closed ones).
     */
    private fun creation(forget: () -> Any, create: () -> AutoCloseable): Cost {
        var best = Cost(Double.MAX_VALUE, Double.MAX_VALUE)
        repeat(rounds + 1) {
            val cpu = threads.currentThreadCpuTime
            val start = System.nanoTime()
            val made = List(500) { create() }
            val cost = Cost((System.nanoTime() - start).toDouble() / made.size, (threads.currentThreadCpuTime - cpu).toDouble() / made.size)
            best = Cost(minOf(best.wallNs, cost.wallNs), minOf(best.cpuNs, cost.cpuNs))
            made.forEach { it.close() }
            forget()
        }
        return best
    }

    private companion object {
        val Duration0 = kotlin.time.Duration.ZERO
    }
}
