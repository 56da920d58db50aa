package dev.wakemeter

import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.CyclicBarrier
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicLong
import kotlin.concurrent.thread
import kotlin.time.Duration.Companion.milliseconds
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/**
 * Closing an instrument while its thread is inside a call: the probe must be
 * released once, after the call, and every later call must be refused.
 */
class ProbeCloseTest {
    /** One kind of instrument, driven the same way by [closeRaces]. */
    private class Subject(
        val open: (dev.wakemeter.ffi.Sampler, String) -> AutoCloseable,
        val call: (AutoCloseable) -> Unit,
        val recorded: (AutoCloseable) -> ULong,
    )

    private val loops = Subject(
        open = { s, name -> s.newLoopProbe(name) },
        call = { (it as LoopProbe).beforeWait(null); it.afterWait(1) },
        recorded = { (it as LoopProbe).stats().totalWakeups },
    )

    private val sleeps = Subject(
        open = { s, name -> s.newSleepProbe(name) },
        call = { (it as SleepProbe).begin(0.milliseconds); it.end() },
        recorded = { (it as SleepProbe).stats().totalCalls },
    )

    /**
     * [rounds] times: a thread calls the instrument in a loop, two threads
     * close it at once, then a fresh probe is created while the caller may
     * still be running. The caller must stop with the "closed" exception,
     * and the fresh probe must record nothing (with a double release the
     * caller wrote into freed memory, which the fresh probe could reuse).
     */
    private fun closeRaces(subject: Subject, rounds: Int) {
        wakemeter().use { s ->
            val failures = ConcurrentLinkedQueue<Throwable>()
            for (round in 1..rounds) {
                val victim = subject.open(s, "victim-$round")
                val calls = AtomicLong()
                val stop = AtomicBoolean(false)
                val refused = AtomicBoolean(false)
                val caller = thread(name = "caller-$round") {
                    try {
                        while (!stop.get()) {
                            subject.call(victim)
                            calls.incrementAndGet()
                        }
                    } catch (e: IllegalStateException) {
                        refused.set(true)
                    } catch (t: Throwable) {
                        failures.add(t)
                    }
                }
                while (calls.get() < 20 && caller.isAlive) Thread.onSpinWait()
                val barrier = CyclicBarrier(2)
                val closers = List(2) {
                    thread(name = "closer-$round-$it") {
                        try {
                            barrier.await()
                            victim.close()
                        } catch (t: Throwable) {
                            failures.add(t)
                        }
                    }
                }
                closers.forEach { it.join() }
                val fresh = subject.open(s, "fresh-$round")
                caller.join(2_000)
                stop.set(true)
                caller.join()
                val foreign = subject.recorded(fresh)
                fresh.close()
                assertTrue(failures.isEmpty(), "round $round: $failures")
                assertTrue(refused.get(), "round $round: calls after close were not refused")
                assertEquals(0uL, foreign, "round $round: a fresh probe recorded another instrument's calls")
            }
        }
    }

    @Test
    fun `closing a loop instrument from two threads during calls releases it once`() =
        closeRaces(loops, rounds = 300)

    @Test
    fun `closing a sleep instrument from two threads during calls releases it once`() =
        closeRaces(sleeps, rounds = 200)

    @Test
    fun `double close is a no-op and calls after close are refused`() {
        wakemeter().use { s ->
            val loop = s.newLoopProbe("twice")
            loop.wait(null) { 1 }
            loop.close()
            loop.close()
            assertThrows<IllegalStateException> { loop.beforeWait(null) }
            assertThrows<IllegalStateException> { loop.afterWait(0) }
            val nap = s.newSleepProbe("twice")
            nap.close()
            nap.close()
            assertThrows<IllegalStateException> { nap.begin(1.milliseconds) }
            assertThrows<IllegalStateException> { nap.end() }
            s.newLoopProbe("after").use { fresh ->
                assertEquals(0uL, fresh.stats().totalWakeups)
            }
        }
    }
}
