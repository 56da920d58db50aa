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
        wakemeter { interval = 50.milliseconds }.use { s ->
            s.sampleNow()
            val status = s.tracing(file) {
                repeat(3) {
                    Thread.sleep(5)
                    s.sampleNow()
                }
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
    fun `an unwritable path is a typed error`() {
        wakemeter().use { s ->
            val e = assertThrows<WakemeterException.Unwritable> {
                s.perfettoTrace(File("/nonexistent-dir/app.perfetto-trace"))
            }
            assertTrue(e.message!!.contains("nonexistent-dir"), e.message)
        }
    }
}
