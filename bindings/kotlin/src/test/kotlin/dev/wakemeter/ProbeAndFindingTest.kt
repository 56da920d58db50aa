package dev.wakemeter

import dev.wakemeter.model.Finding
import dev.wakemeter.model.FindingKind
import dev.wakemeter.model.LoopKind
import dev.wakemeter.model.Severity
import dev.wakemeter.model.Subject
import dev.wakemeter.model.Thresholds
import dev.wakemeter.ffi.WakemeterException
import dev.wakemeter.model.defaultSamplerConfig
import dev.wakemeter.model.defaultThresholds
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit
import kotlin.time.Duration
import kotlin.time.Duration.Companion.microseconds
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds
import kotlin.time.TimeSource
import kotlinx.coroutines.flow.first
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/** Thresholds that judge a loop after a fraction of a second instead of 10 s. */
private val quick = defaultThresholds().copy(window = java.time.Duration.ofMillis(400), minWindow = java.time.Duration.ofMillis(100))

class ProbeAndFindingTest {
    @Test
    fun `defaults in Kotlin are the core's defaults`() {
        assertEquals(defaultThresholds(), defaultSamplerConfig().thresholds)
        assertEquals(defaultSamplerConfig(), SamplerSettings().toConfig())
    }

    @Test
    fun `loop instrument records waits, events, timeouts and the thread`() {
        wakemeter().use { s ->
            s.newLoopProbe("queue").use { loop ->
                val queue = LinkedBlockingQueue<Int>()
                val poll = loop.instrument { timeout ->
                    if (queue.poll(timeout!!.inWholeMicroseconds, TimeUnit.MICROSECONDS) != null) 1 else 0
                }
                queue.add(1)
                assertEquals(1, poll(10.milliseconds)) // an event, early
                assertEquals(0, poll(1.milliseconds)) // times out
                assertEquals(0, loop.wait(Duration.ZERO) { 0 }) // non-blocking poll
                assertThrows<IllegalStateException> { loop.wait(null) { error("poll failed") } }
                val st = loop.stats()
                assertEquals("queue", st.name)
                assertEquals(4uL, st.totalWakeups)
                assertEquals(3uL, st.totalIdleWakeups)
                assertEquals(1uL, st.totalEvents)
                assertEquals(1uL, st.totalEarlyWakeups)
                assertEquals(2uL, st.totalTimedOutWakeups)
                assertEquals(1uL, st.totalZeroTimeoutWaits)
                assertTrue(st.totalWaitNs >= 1_000_000uL)
                assertNotNull(st.tid)
                assertEquals(0uL, st.totalUnmatchedCalls)
                // The app's own probe: not a runtime's worker.
                assertEquals(LoopKind.APPLICATION, st.kind)
                val snap = s.sampleNow()
                assertEquals(listOf(loop.probe.id()), snap.loops.map { it.id })
                assertEquals(listOf(LoopKind.APPLICATION), snap.loops.map { it.kind })
                assertEquals("queue", loop.probe.name())
            }
            // A closed probe is forgotten after one more snapshot.
            s.sampleNow()
            assertTrue(s.sampleNow().loops.isEmpty())
        }
    }

    @Test
    fun `generated probe methods work too`() {
        wakemeter().use { s ->
            s.loopProbe("raw").use { p ->
                p.beforeWait(-1)
                p.afterWait(2u)
                p.afterWait(0u) // out of order: counted, ignored
                assertEquals(1uL, p.stats().totalWakeups)
                assertEquals(1uL, p.stats().totalUnmatchedCalls)
            }
            s.sleepProbe("raw-sleep").use { p ->
                p.sleep(200_000uL)
                p.begin(100_000uL)
                Thread.sleep(1)
                p.end()
                p.end() // without begin: counted, ignored
                val st = p.stats()
                assertEquals(2uL, st.totalCalls)
                assertEquals(300_000uL, st.totalRequestedNs)
                assertTrue(st.totalActualNs >= 1_200_000uL)
                assertEquals(1uL, st.totalUnmatchedCalls)
                assertEquals("raw-sleep", p.name())
                assertEquals(listOf(p.id()), s.sampleNow().sleeps.map { it.id })
            }
        }
    }

    @Test
    fun `sleep instrument measures sleeps and their oversleep`() {
        wakemeter().use { s ->
            s.newSleepProbe("nap").use { nap ->
                repeat(3) { nap.sleep(500.microseconds) }
                nap.measure(1.milliseconds) { Thread.sleep(1) }
                val st = nap.stats()
                assertEquals(4uL, st.totalCalls)
                assertEquals(2_500_000uL, st.totalRequestedNs)
                assertTrue(st.totalActualNs >= st.totalRequestedNs)
                assertTrue(st.totalOversleepNs > 0uL)
            }
        }
    }

    @Test
    fun `probes of a shut down sampler raise SamplerGone, closed ones IllegalState`() {
        val s = wakemeter()
        val loop = s.newLoopProbe("l")
        val nap = s.newSleepProbe("s")
        val raw = s.loopProbe("raw")
        s.shutdown()
        assertThrows<WakemeterException.SamplerGone> { loop.beforeWait(null) }
        assertThrows<WakemeterException.SamplerGone> { loop.stats() }
        assertThrows<WakemeterException.SamplerGone> { nap.begin(1.milliseconds) }
        assertThrows<WakemeterException.SamplerGone> { raw.afterWait(0u) }
        assertThrows<WakemeterException.Closed> { s.loopProbe("again") }
        assertThrows<WakemeterException.Closed> { s.newSleepProbe("again") }
        loop.close()
        loop.close() // idempotent
        assertThrows<IllegalStateException> { loop.afterWait(0) }
        nap.close()
        raw.close()
        s.close()
    }

    @Test
    fun `probe names past 64 bytes are refused with their own typed error`() {
        wakemeter().use { s ->
            val e = assertThrows<WakemeterException.ProbeNameTooLong> { s.newLoopProbe("x".repeat(65)) }
            assertTrue(e.message!!.contains("65 bytes"), e.message)
            s.newLoopProbe("y".repeat(64)).use { loop ->
                loop.wait(null) { 1 }
                s.sampleNow()
                assertTrue(s.stats().historyBytes > 0uL)
            }
        }
    }

    @Test
    fun `thresholds are validated with typed errors`() {
        val e = assertThrows<WakemeterException.InvalidConfig> {
            wakemeter { thresholds = defaultThresholds().copy(busyPollIdleRatio = 1.5) }
        }
        assertTrue(e.message!!.contains("busy_poll_idle_ratio"), e.message)
        wakemeter().use { s ->
            assertThrows<WakemeterException.InvalidConfig> { s.findingsWith(defaultThresholds().copy(window = java.time.Duration.ZERO)) }
            assertEquals(defaultThresholds(), s.thresholds())
        }
    }

    /**
     * Runs [iteration] on another thread until [done] (checked every 50 ms),
     * for at most two minutes: a loaded machine takes longer, never fails.
     */
    private fun runUntil(done: () -> Boolean, iteration: () -> Unit) {
        val stop = java.util.concurrent.atomic.AtomicBoolean(false)
        val t = Thread { while (!stop.get()) iteration() }
        t.start()
        val bound = TimeSource.Monotonic.markNow() + 120.seconds
        try {
            while (!done() && bound.hasNotPassedNow()) Thread.sleep(50)
        } finally {
            stop.set(true)
            t.join()
        }
    }

    /** Runs [iteration] on its own thread for [duration] while [s] samples in the background. */
    private fun runLoop(s: dev.wakemeter.ffi.Sampler, duration: Duration, iteration: () -> Unit) {
        val end = TimeSource.Monotonic.markNow() + duration
        val t = Thread {
            while (end.hasNotPassedNow()) iteration()
        }
        t.start()
        t.join()
    }

    @Test
    fun `an idle instrumented loop produces no findings, a spinning one does`() {
        wakemeter { interval = 50.milliseconds; thresholds = quick }.use { s ->
            val idle = s.newLoopProbe("idle")
            val spin = s.newLoopProbe("spin")
            s.sampling {
                // Idle: blocks 100 ms per wait, like a loop with nothing to do.
                runLoop(s, 700.milliseconds) { idle.wait(100.milliseconds) { Thread.sleep(100); 0 } }
                val calm = s.findings()
                assertTrue(
                    calm.none { it.subject is Subject.Loop },
                    "an idle loop is not a finding: $calm",
                )
                // Spinning: non-blocking polls that find nothing, as fast as
                // possible, until the sampler has seen enough of it.
                runUntil({ s.findings().any { it.kind == FindingKind.BUSY_POLLER } }) {
                    spin.wait(Duration.ZERO) { 0 }
                }
            }
            val found = s.findings()
            val busy = found.singleOrNull { it.kind == FindingKind.BUSY_POLLER }
            assertNotNull(busy, "a spinning loop is a busy poller: $found")
            assertEquals("spin", (busy!!.subject as Subject.Loop).name)
            assertTrue(busy.severity >= Severity.WARNING)
            assertTrue(busy.summary.isNotBlank() && busy.advice.isNotBlank())
            assertTrue(busy.evidence.any { it.name.contains("wakeups") }, "${busy.evidence}")
            assertTrue(found.none { (it.subject as? Subject.Loop)?.name == "idle" })
            val report = s.report()
            assertTrue(report.findings.any { it.kind == FindingKind.BUSY_POLLER })
            assertTrue(s.reportJson().contains("\"busy_poller\""))
            idle.close()
            spin.close()
        }
    }

    @Test
    fun `finding flow announces a busy poller once`() = runBlocking {
        wakemeter { interval = 50.milliseconds; thresholds = quick }.use { s ->
            s.newLoopProbe("spin").use { spin ->
                s.start()
                val found = java.util.concurrent.atomic.AtomicBoolean(false)
                val spinner = Thread { runUntil({ found.get() }) { spin.wait(Duration.ZERO) { 0 } } }
                spinner.start()
                val first: Finding = try {
                    withTimeout(120.seconds) {
                        s.findingFlow().first { it.kind == FindingKind.BUSY_POLLER }
                    }
                } finally {
                    found.set(true)
                    spinner.join()
                }
                s.stop()
                assertEquals("spin", (first.subject as Subject.Loop).name)
                assertTrue(s.listenerStats().findingsDelivered >= 1uL)
                assertTrue(s.latestInterval()!!.loops.any { it.name == "spin" && it.wakeupsPerSec > 1000.0 })
                assertNull(s.stats().lastError)
                assertFalse(s.isRunning())
            }
        }
    }
}
