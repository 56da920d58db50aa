package dev.wakemeter

import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.CyclicBarrier
import java.util.concurrent.atomic.AtomicInteger
import kotlin.concurrent.thread
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/** The reference counting of [RawHandle], with a fake release function instead of the library's. */
class RawHandleTest {
    private class Frees {
        val count = AtomicInteger()
        val whileHeld = AtomicInteger()
        fun handle() = RawHandle(42L) { h ->
            assertEquals(42L, h)
            count.incrementAndGet()
            FastPath.OK
        }
    }

    @Test
    fun `closing twice during a call frees once, after the call`() {
        val frees = Frees()
        val h = frees.handle()
        h.use {
            h.close()
            h.close()
            assertEquals(0, frees.count.get(), "freed while a call still used it")
            assertThrows<IllegalStateException> { h.use { } }
        }
        assertEquals(1, frees.count.get())
        assertThrows<IllegalStateException> { h.use { } }
        h.close()
        assertEquals(1, frees.count.get())
    }

    @Test
    fun `concurrent calls and closes free exactly once and never run on a freed handle`() {
        repeat(500) { round ->
            val frees = Frees()
            val h = frees.handle()
            val failures = ConcurrentLinkedQueue<Throwable>()
            val barrier = CyclicBarrier(4)
            val threads = List(4) { i ->
                thread {
                    try {
                        barrier.await()
                        if (i < 2) {
                            h.close()
                        } else {
                            repeat(200) {
                                try {
                                    h.use { if (frees.count.get() != 0) frees.whileHeld.incrementAndGet() }
                                } catch (_: IllegalStateException) {
                                    // closed: refused, as it must be
                                }
                            }
                        }
                    } catch (t: Throwable) {
                        failures.add(t)
                    }
                }
            }
            threads.forEach { it.join() }
            assertTrue(failures.isEmpty(), "round $round: $failures")
            assertEquals(1, frees.count.get(), "round $round: frees")
            assertEquals(0, frees.whileHeld.get(), "round $round: a call ran on a freed handle")
        }
    }

    @Test
    fun `the library refuses a handle of the other kind and every code has an exception`() {
        wakemeter().use { s ->
            s.loopProbe("loop").use { loop ->
                val h = loop.rawHandle().toLong()
                assertEquals(FastPath.WRONG_KIND, FastPath.wakemeter_sleep_probe_begin(h, 0))
                assertEquals(FastPath.WRONG_KIND, FastPath.wakemeter_sleep_probe_release(h))
                assertEquals(FastPath.BAD_HANDLE, FastPath.wakemeter_loop_probe_after_wait(0, 0))
                assertEquals(0uL, loop.stats().totalUnmatchedCalls)
                assertEquals(FastPath.OK, FastPath.wakemeter_loop_probe_release(h))
            }
        }
        FastPath.check(FastPath.OK)
        assertThrows<dev.wakemeter.ffi.WakemeterException.SamplerGone> { FastPath.check(FastPath.SAMPLER_GONE) }
        for (code in listOf(FastPath.BAD_HANDLE, FastPath.WRONG_KIND, FastPath.PANICKED, 99)) {
            val e = assertThrows<IllegalStateException> { FastPath.check(code) }
            assertTrue(e.message!!.startsWith("wakemeter bug"), e.message)
        }
    }
}
