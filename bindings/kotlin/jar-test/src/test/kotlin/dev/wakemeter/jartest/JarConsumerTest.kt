package dev.wakemeter.jartest

import com.sun.jna.NativeLibrary
import com.sun.jna.Platform
import dev.wakemeter.*
import kotlin.time.Duration.Companion.milliseconds
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/** A program with wakemeter-kotlin as its one dependency and no jna.library.path. */
class JarConsumerTest {
    @Test
    fun `the jar carries the library for this JVM and JNA loads it from there`() {
        assertNull(System.getProperty("jna.library.path"), "the point is to run without it")
        val resource = "${Platform.RESOURCE_PREFIX}/libwakemeter_ffi.so"
        val url = javaClass.classLoader.getResource(resource)
        assertNotNull(url, "$resource in the class path")
        assertEquals("jar", url!!.protocol, "$resource comes from a jar: $url")
        assertTrue(url.path.contains("wakemeter-kotlin-0.1.0.jar"), "from the wakemeter jar: $url")

        wakemeter().use { sampler ->
            sampler.newLoopProbe("consumer").use { loop ->
                repeat(3) { loop.wait(1.milliseconds) { Thread.sleep(1); 0 } }
                assertEquals(3uL, loop.stats().totalWakeups)
            }
            val snap = sampler.sampleNow()
            assertTrue(snap.threads.isNotEmpty(), "the sampler sees this JVM's threads")
        }
        // JNA extracted the library out of the jar into its temporary
        // directory (a path of the jar would mean a system copy was used).
        val file = NativeLibrary.getInstance("wakemeter_ffi").file
        assertTrue(file.name.startsWith("jna"), "extracted by JNA: $file")
    }
}
