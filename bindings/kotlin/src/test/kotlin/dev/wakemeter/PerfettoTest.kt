package dev.wakemeter

import dev.wakemeter.ffi.WakemeterException
import java.io.File
import java.nio.file.Files
import kotlin.time.Duration.Companion.milliseconds
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

class PerfettoTest {
    @Test
    fun `tracing writes one interval per sample to a complete file`() {
        val file = Files.createTempDirectory("wakemeter-perfetto").resolve("app.perfetto-trace").toFile()
        // No background sampling (not started): the test's samples are the only ones.
        wakemeter { interval = 50.milliseconds }.use { s ->
            s.sampleNow()
            val status = s.perfettoTrace(file).use { t ->
                repeat(3) { n ->
                    s.sampleNow()
                    // The trace's writer thread, woken by each sample, takes what
                    // was stored since it last ran as one interval: on a busy
                    // machine two quick samples can become one. Wait until it has
                    // taken this sample (a hang guard of a minute).
                    val deadline = System.nanoTime() + 60_000_000_000L
                    while (t.status().intervals < (n + 1).toULong() && System.nanoTime() < deadline) {
                        Thread.sleep(1)
                    }
                }
                t.finish()
            }
            assertEquals(3uL, status.intervals)
            assertNull(status.ended)
            assertEquals(file.path, status.path)
            assertEquals(file.length().toULong(), status.bytesWritten)
            // Every record of a trace file is a Trace.packet (field 1, length-delimited).
            assertEquals(0x0a, file.readBytes()[0].toInt())
        }
    }

    @Test
    fun `tracing a block writes the samples it takes and finishes the file`() {
        val file = Files.createTempDirectory("wakemeter-perfetto").resolve("block.perfetto-trace").toFile()
        wakemeter { interval = 50.milliseconds }.use { s ->
            s.sampleNow()
            var taken = 0
            val status = s.tracing(file) { sampler ->
                repeat(2) {
                    sampler.sampleNow()
                    taken++
                }
            }
            assertEquals(2, taken)
            // Finishing writes what the writer thread had not taken yet: the
            // block's two samples, as one interval or two.
            assertTrue(status.intervals in 1uL..2uL, "${status.intervals} intervals")
            assertNull(status.ended)
            assertEquals(file.path, status.path)
            assertEquals(file.length().toULong(), status.bytesWritten)
            assertEquals(0x0a, file.readBytes()[0].toInt())
        }
    }

    @Test
    fun `an unwritable path is a typed error`() {
        wakemeter().use { s ->
            val e = assertThrows<WakemeterException.Unwritable> {
                s.perfettoTrace(File("/nonexistent-dir/app.perfetto-trace"))
            }
            assertTrue(e.message!!.contains("nonexistent-dir"), e.message)
        }
    }
}
