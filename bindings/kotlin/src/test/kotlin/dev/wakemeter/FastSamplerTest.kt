package dev.wakemeter

import dev.wakemeter.ffi.FfiConverterTypeSampler
import dev.wakemeter.ffi.WakemeterException
import java.util.concurrent.ConcurrentLinkedQueue
import kotlin.concurrent.thread
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/** The sampler's fast path: what the generated path would answer, in every case the buffer handling meets. */
class FastSamplerTest {
    @Test
    fun `answers larger than the thread's buffer, kept or not, arrive whole`() {
        // ~25 JVM threads: 60 snapshots pass the first 16 KiB, 1500 pass the 1 MiB a thread keeps.
        for (count in listOf(60, 1500)) {
            wakemeter { history = count }.use { s ->
                repeat(count) { s.sampleNow() }
                val generated = FfiConverterTypeSampler.lift(s.uniffiCloneHandle())
                val fast = s.snapshots()
                assertEquals(count, fast.size)
                assertEquals(generated.snapshots(), fast)
                assertEquals(fast.last(), s.latest())
                generated.close()
            }
        }
    }

    @Test
    fun `a shut down sampler answers Closed, a closed one IllegalState`() {
        val s = wakemeter()
        s.shutdown()
        assertThrows<WakemeterException.Closed> { s.stats() }
        assertThrows<WakemeterException.Closed> { s.report() }
        assertThrows<WakemeterException.Closed> { s.newLoopProbe("late") }
        s.close()
        s.close() // idempotent
        val e = assertThrows<IllegalStateException> { s.stats() }
        assertTrue(e.message!!.contains("sampler is closed"), e.message)
        assertThrows<IllegalStateException> { s.newSleepProbe("late") }
    }

    @Test
    fun `threads calling at once each get their own answers`() {
        wakemeter { history = 50 }.use { s ->
            repeat(20) { s.sampleNow() }
            val failures = ConcurrentLinkedQueue<Throwable>()
            val workers = List(4) { i ->
                thread(name = "caller-$i") {
                    try {
                        s.newLoopProbe("loop-$i").use { loop ->
                            repeat(300) { n ->
                                loop.wait(null) { 1 }
                                assertEquals((n + 1).toULong(), loop.stats().totalWakeups)
                                assertTrue(s.stats().totalSamples >= 20uL)
                                assertTrue(s.snapshots().size >= 20)
                                assertTrue(s.report().stats.totalSamples >= 20uL)
                            }
                        }
                    } catch (t: Throwable) {
                        failures.add(t)
                    }
                }
            }
            workers.forEach { it.join() }
            assertTrue(failures.isEmpty(), "$failures")
        }
    }
}
