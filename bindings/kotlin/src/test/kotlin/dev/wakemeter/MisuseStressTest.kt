package dev.wakemeter

import dev.wakemeter.ffi.ListenerException
import dev.wakemeter.ffi.WakemeterException
import dev.wakemeter.model.Interval
import java.io.File
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.CountDownLatch
import java.util.concurrent.CyclicBarrier
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicLong
import kotlin.concurrent.thread
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds
import kotlin.time.TimeSource
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/**
 * Misuse under stress, as a careless host does it: closes racing calls from
 * eight threads, every call after close, listeners that throw, and samplers
 * dropped unclosed while the collector runs and their probes are in use.
 * What the library promises: every call returns or throws the documented
 * exception (the "closed" [IllegalStateException] or a
 * [WakemeterException]); nothing crashes, hangs or leaks. Waits are bounded
 * by conditions with generous limits, never by wall-clock deadlines.
 */
class MisuseStressTest {
    private val bound = 120.seconds

    /** Runs [call]; a refusal the API documents is fine, anything else is recorded. */
    private inline fun tolerate(failures: MutableCollection<Throwable>, call: () -> Unit) {
        try {
            call()
        } catch (_: IllegalStateException) {
            // Closed handle: documented refusal.
        } catch (_: WakemeterException) {
            // Closed, SamplerGone...: typed refusal.
        } catch (t: Throwable) {
            failures.add(t)
        }
    }

    @Test
    fun `eight threads racing calls and closes on one sampler never crash or hang`() {
        repeat(40) { round ->
            val s = wakemeter { interval = 1.milliseconds; history = 64 }
            s.start()
            val failures = ConcurrentLinkedQueue<Throwable>()
            val barrier = CyclicBarrier(8)
            val threads = List(8) { n ->
                thread(name = "misuse-$round-$n") {
                    barrier.await()
                    for (i in 0 until 60) {
                        when ((i + n) % 9) {
                            0 -> tolerate(failures) { s.stats() }
                            1 -> tolerate(failures) { s.report() }
                            2 -> tolerate(failures) { s.sampleNow() }
                            3 -> tolerate(failures) { s.findings() }
                            4 -> tolerate(failures) { s.latestInterval() }
                            5 -> tolerate(failures) {
                                s.newLoopProbe("p$n").use { p -> p.wait(null) { 1 } }
                            }
                            6 -> tolerate(failures) {
                                s.newSleepProbe("s$n").use { p -> p.measure(Duration.ZERO) {} }
                            }
                            7 -> tolerate(failures) { s.reportJson() }
                            // Every thread closes it at some point, mid-calls of the others.
                            else -> if (i > 20) tolerate(failures) { s.close() }
                        }
                    }
                }
            }
            threads.forEach { it.join(bound.inWholeMilliseconds) }
            assertTrue(threads.none { it.isAlive }, "round $round: a thread hung")
            s.close() // closed already: a no-op
            assertTrue(failures.isEmpty(), "round $round: $failures")
        }
    }

    @Test
    fun `every call after close is refused with the documented exception`() {
        val s = wakemeter()
        val loop = s.newLoopProbe("loop")
        val nap = s.newSleepProbe("nap")
        s.close()
        val failures = ConcurrentLinkedQueue<Throwable>()
        var refused = 0
        val calls: List<() -> Any?> = listOf(
            { s.stats() }, { s.report() }, { s.reportJson() }, { s.findings() },
            { s.sampleNow() }, { s.latest() }, { s.snapshots() }, { s.latestInterval() },
            { s.intervalOver(1.seconds) }, { s.listenerStats() }, { s.isRunning() },
            { s.config() }, { s.start() }, { s.stop() }, { s.newLoopProbe("after") },
            { s.newSleepProbe("after") },
        )
        for (call in calls) {
            try {
                call()
                failures.add(AssertionError("a call on a closed sampler succeeded"))
            } catch (_: IllegalStateException) {
                refused++
            } catch (t: Throwable) {
                failures.add(t)
            }
        }
        assertTrue(failures.isEmpty(), "$failures")
        assertEquals(calls.size, refused)
        // Probes outlive their sampler: they record (nobody reads them) or
        // refuse with SamplerGone, never crash; closing them still works.
        tolerate(failures) { loop.wait(null) { 1 } }
        tolerate(failures) { nap.measure(Duration.ZERO) {} }
        tolerate(failures) { loop.stats() }
        loop.close()
        nap.close()
        loop.close()
        assertTrue(failures.isEmpty(), "$failures")
    }

    @Test
    fun `throwing listeners, closed while they throw, leave sampling and shutdown intact`() {
        repeat(10) { round ->
            val s = wakemeter { interval = 2.milliseconds }
            val healthy = CountDownLatch(20)
            val thrown = AtomicLong()
            s.listen(object : SamplerListenerAdapter() {
                override fun onInterval(interval: Interval) {
                    when (thrown.incrementAndGet() % 3) {
                        0L -> throw ListenerException.Failed("typed")
                        1L -> throw IllegalArgumentException("untyped")
                        else -> throw StackOverflowError("an Error")
                    }
                }
            })
            s.listen(onInterval = { healthy.countDown() })
            s.start()
            assertTrue(healthy.await(bound.inWholeSeconds, TimeUnit.SECONDS), "round $round: delivery stopped")
            // Close while the throwing listener is being called.
            val closer = thread(name = "closer-$round") { s.close() }
            closer.join(bound.inWholeMilliseconds)
            assertTrue(!closer.isAlive, "round $round: close hung on a throwing listener")
            assertTrue(thrown.get() >= 20, "round $round: ${thrown.get()} throws")
        }
    }

    private fun openDescriptors(): Int = File("/proc/self/fd").list()?.size ?: 0

    @Test
    fun `samplers dropped unclosed while their probes are in use are collected without harm`() {
        val before = openDescriptors()
        val failures = ConcurrentLinkedQueue<Throwable>()
        val stop = AtomicBoolean(false)
        // A thread that keeps the collector busy the whole time.
        val collector = thread(name = "gc") {
            while (!stop.get()) {
                System.gc()
                Thread.sleep(5)
            }
        }
        val users = List(4) { n ->
            thread(name = "user-$n") {
                repeat(100) { i ->
                    // The sampler is unreachable once this expression ends;
                    // only its probe is kept, and used while the GC runs.
                    val probe = wakemeter { interval = 1.milliseconds }.newLoopProbe("orphan-$n-$i")
                    repeat(50) { tolerate(failures) { probe.wait(null) { 1 } } }
                    tolerate(failures) { probe.stats() }
                    if (i % 2 == 0) probe.close() // the others are dropped unclosed too
                }
            }
        }
        users.forEach { it.join(bound.inWholeMilliseconds) }
        assertTrue(users.none { it.isAlive }, "a user thread hung")
        // The cleaner releases what was dropped: the descriptors come back.
        val mark = TimeSource.Monotonic.markNow()
        while (openDescriptors() > before + 16 && mark.elapsedNow() < bound) Thread.sleep(50)
        stop.set(true)
        collector.join()
        assertTrue(failures.isEmpty(), "$failures")
        assertTrue(
            openDescriptors() <= before + 16,
            "descriptors: ${openDescriptors()} now, $before before (400 samplers dropped)",
        )
    }
}
