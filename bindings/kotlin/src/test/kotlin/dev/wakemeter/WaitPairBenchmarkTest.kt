package dev.wakemeter

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/**
 * Cost of recording one wait (beforeWait + afterWait) from Kotlin. Prints
 * the figures; the target is 2 µs per pair on the fast path. The test only
 * asserts a loose 10 µs bound (still well below the generated calls' tens
 * of µs; BENCHMARKS.md, "From Kotlin"), so a busy machine does not fail the
 * build.
 */
class WaitPairBenchmarkTest {
    private inline fun nsPerPair(pairs: Int, body: () -> Unit): Double {
        val start = System.nanoTime()
        repeat(pairs) { body() }
        return (System.nanoTime() - start).toDouble() / pairs
    }

    @Test
    fun `LoopProbe wait pairs are all recorded, at under 10 microseconds each`() {
        wakemeter().use { sampler ->
            sampler.newLoopProbe("bench").use { loop ->
                repeat(300_000) { loop.wait(null) { 0 } } // warm up JNA and the JIT
                val fast = (1..5).minOf { nsPerPair(300_000) { loop.wait(null) { 0 } } }
                val split = (1..5).minOf {
                    nsPerPair(300_000) {
                        loop.beforeWait(null)
                        loop.afterWait(0)
                    }
                }
                // The generated uniffi methods, for comparison (much slower on the JVM).
                val generated = nsPerPair(2_000) {
                    loop.probe.beforeWait(-1)
                    loop.probe.afterWait(0u)
                }
                println(
                    "BENCH LoopProbe wait pair from Kotlin: %.0f ns (LoopProbe.wait), %.0f ns (beforeWait+afterWait), %.0f ns (generated uniffi methods)"
                        .format(fast, split, generated),
                )
                assertEquals(11uL * 300_000uL + 2_000uL, loop.stats().totalWakeups)
                assertTrue(fast < 10_000.0, "wait pair took $fast ns")
            }
        }
    }
}
