package dev.wakemeter

import dev.wakemeter.model.CpuTimeSource
import dev.wakemeter.model.Interval
import dev.wakemeter.ffi.ListenerException
import dev.wakemeter.ffi.Sampler
import dev.wakemeter.model.SamplerConfig
import dev.wakemeter.model.Target
import dev.wakemeter.model.defaultSamplerConfig
import dev.wakemeter.ffi.SamplerListener
import dev.wakemeter.ffi.WakemeterException
import dev.wakemeter.ffi.wakemeterVersion
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.CountDownLatch
import java.util.concurrent.CyclicBarrier
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import kotlin.concurrent.thread
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds
import kotlinx.coroutines.flow.take
import kotlinx.coroutines.flow.toList
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/** Linux TID of the calling thread, to find it in snapshots. */
private fun currentTid(): ULong =
    java.io.File("/proc/thread-self").canonicalFile.name.toULong()

class SamplerTest {
    @Test
    fun `default config is the library's one set of defaults`() {
        val c = defaultSamplerConfig()
        assertEquals(java.time.Duration.ofSeconds(1), c.interval)
        assertEquals(300u, c.history)
        assertEquals(Target.SelfProcess, c.target)
        assertEquals(10u, c.switchSplitEvery)
        assertEquals("wakemeter", c.threadName)
        assertEquals(64u, c.reportThreads)
        assertEquals(32uL shl 20, c.historyBudgetBytes)
        assertEquals(c, SamplerSettings().toConfig())
        assertTrue(wakemeterVersion().isNotEmpty())
    }

    @Test
    fun `builder DSL configures the sampler`() {
        wakemeter { interval = 250.milliseconds; history = 42; threadName = "wm-test" }.use { s ->
            assertEquals(java.time.Duration.ofMillis(250), s.config().interval)
            assertEquals(42u, s.config().history)
            assertEquals(250.milliseconds, s.interval)
            assertTrue(s.system().cpuCount >= 1u)
            assertTrue(s.system().totalMemoryBytes > 0uL)
            assertEquals("linux", s.system().os)
        }
    }

    @Test
    fun `sample now sees the calling thread`() {
        wakemeter().use { s ->
            val snap = s.sampleNow()
            assertEquals(0uL, snap.seq)
            val me = snap.threads.firstOrNull { it.tid == currentTid() }
            assertNotNull(me, "calling thread in the snapshot")
            assertEquals(CpuTimeSource.THREAD_CLOCK, me!!.cpuTimeSource)
            assertTrue(me.totalCpuTimeNs > 0uL)
            assertTrue(snap.process.rssBytes > 0uL)
            assertEquals(snap.threads.size.toUInt(), snap.process.threadCount)
            assertNull(snap.kernel)
            assertTrue(snap.warnings.isEmpty())
        }
    }

    @Test
    fun `history, intervals, stats and reports`() {
        wakemeter { history = 3 }.use { s ->
            assertNull(s.latest())
            assertNull(s.latestInterval())
            assertNull(s.intervalOver(1.seconds))
            repeat(5) {
                s.sampleNow()
                Thread.sleep(5)
            }
            assertEquals(4uL, s.latest()!!.seq)
            assertEquals(listOf(2uL, 3uL, 4uL), s.snapshots().map { it.seq })
            val last = s.latestInterval()!!
            assertEquals(3uL, last.fromSeq)
            assertEquals(4uL, last.toSeq)
            assertTrue(last.durationNs >= 5_000_000uL)
            assertTrue(last.threads.isNotEmpty())
            val whole = s.intervalOver(60.seconds)!!
            assertEquals(2uL, whole.fromSeq)
            val stats = s.stats()
            assertEquals(5uL, stats.totalSamples)
            assertEquals(3u, stats.historyLen)
            assertFalse(stats.running)
            assertNull(stats.lastError)
            val report = s.report()
            assertEquals(2uL, report.interval!!.fromSeq)
            assertEquals(5uL, report.stats.totalSamples)
            assertTrue(report.findings.isEmpty())
            // A versioned report says what measured what, with which settings.
            assertEquals(2u, report.schemaVersion)
            // Every thread is in a group by name; this process has fewer
            // than reportThreads, so none is folded out of the list.
            assertEquals(report.interval!!.process.threadCount, report.threadGroups.sumOf { it.threads })
            assertEquals(0u, report.threadsFolded)
            assertEquals(wakemeterVersion(), report.libraryVersion)
            assertEquals(ProcessHandle.current().pid().toUInt(), report.target.pid)
            assertEquals(java.io.File("/proc/self/comm").readText().trim(), report.target.name)
            val started = ProcessHandle.current().info().startInstant().get()
            val reportedStart = java.time.Instant.ofEpochSecond(0, report.target.startTimeUnixNs!!.toLong())
            assertTrue(java.time.Duration.between(started, reportedStart).abs() < java.time.Duration.ofSeconds(1), "$started vs $reportedStart")
            assertEquals(s.config(), report.config)
            val json = s.reportJson()
            assertTrue(json.startsWith("{"))
            for (key in listOf("\"schema_version\"", "\"unix_time_ns\"", "\"system\"", "\"stats\"", "\"interval\"", "\"findings\"", "\"cpu_percent\"")) {
                assertTrue(json.contains(key), "report JSON has $key")
            }
        }
    }

    @Test
    fun `background sampling starts, refuses a second start, stops and resumes`() {
        wakemeter { interval = 20.milliseconds }.use { s ->
            assertFalse(s.isRunning())
            s.start()
            assertTrue(s.isRunning())
            assertThrows<WakemeterException.AlreadyRunning> { s.start() }
            // Waits for the samples it checks (a loaded machine runs the
            // sampler's thread late), for at most two minutes.
            awaitSamples(s, 3uL)
            assertTrue(s.stats().running)
            s.stop()
            s.stop() // idempotent
            assertFalse(s.isRunning())
            val taken = s.stats().totalSamples
            assertTrue(taken >= 3uL, "took $taken samples")
            s.sampling { awaitSamples(s, taken + 1uL) }
            assertTrue(s.stats().totalSamples > taken)
            assertFalse(s.isRunning())
        }
    }

    @Test
    fun `listener is called from the wakemeter thread`() {
        wakemeter { interval = 20.milliseconds }.use { s ->
            val seen = ConcurrentLinkedQueue<Pair<String, Interval>>()
            val got = CountDownLatch(3)
            val id = s.addListener(object : SamplerListenerAdapter() {
                override fun onInterval(interval: Interval) {
                    seen.add(Thread.currentThread().name to interval)
                    got.countDown()
                }
            })
            s.start()
            assertTrue(got.await(120, TimeUnit.SECONDS), "three intervals delivered")
            s.stop()
            assertTrue(seen.all { it.first == "wakemeter-cb" }, "threads: ${seen.map { it.first }.toSet()}")
            val seqs = seen.map { it.second.toSeq }
            assertEquals(seqs.sorted().distinct(), seqs, "each interval once, in order")
            assertTrue(seen.all { it.second.durationNs > 0uL })
            assertTrue(s.removeListener(id))
            assertFalse(s.removeListener(id))
            val ls = s.listenerStats()
            assertEquals(0u, ls.listeners)
            assertTrue(ls.intervalsDelivered >= 3uL)
            assertEquals(0uL, ls.listenerErrors)
        }
    }

    @Test
    fun `a throwing listener is counted and sampling goes on`() {
        wakemeter { interval = 20.milliseconds }.use { s ->
            val calls = AtomicInteger()
            val healthy = CountDownLatch(4)
            s.addListener(object : SamplerListenerAdapter() {
                override fun onInterval(interval: Interval) {
                    if (calls.incrementAndGet() % 2 == 0) {
                        throw ListenerException.Failed("typed failure")
                    }
                    throw IllegalStateException("boom from Kotlin")
                }
            })
            s.addListener(object : SamplerListenerAdapter() {
                override fun onInterval(interval: Interval) = healthy.countDown()
            })
            s.start()
            assertTrue(healthy.await(120, TimeUnit.SECONDS), "the other listener kept receiving")
            s.stop()
            val ls = s.listenerStats()
            assertTrue(ls.listenerErrors >= 3uL, "errors counted: ${ls.listenerErrors}")
            val last = ls.lastListenerError!!
            assertTrue(last.contains("boom from Kotlin") || last.contains("typed failure"), last)
            assertNull(s.stats().lastError)
            assertTrue(s.stats().totalSamples >= 4uL)
        }
    }

    @Test
    fun `a listener throwing an Error is counted too`() {
        wakemeter { interval = 20.milliseconds }.use { s ->
            val thrown = AtomicInteger()
            val healthy = CountDownLatch(4)
            s.listen(onInterval = {
                thrown.incrementAndGet()
                throw AssertionError("assertion failed in a listener")
            }).use {
                s.listen(onInterval = { healthy.countDown() }).use {
                    s.start()
                    assertTrue(healthy.await(120, TimeUnit.SECONDS), "the other listener kept receiving")
                    s.stop()
                }
            }
            val ls = s.listenerStats()
            assertTrue(thrown.get() >= 1)
            assertEquals(thrown.get().toULong(), ls.listenerErrors, "every throw is counted")
            assertTrue(ls.lastListenerError!!.contains("assertion failed in a listener"), ls.lastListenerError)
            assertTrue(s.stats().totalSamples >= 4uL)
        }
    }

    @Test
    fun `a listener object throwing errors is counted, whatever it throws`() {
        wakemeter { interval = 20.milliseconds }.use { s ->
            val thrown = AtomicInteger()
            val healthy = CountDownLatch(4)
            val failing = object : SamplerListenerAdapter() {
                override fun onInterval(interval: Interval) {
                    when (thrown.incrementAndGet() % 3) {
                        0 -> throw StackOverflowError("thrown by a listener")
                        1 -> throw AssertionError("thrown by a listener")
                        else -> throw IllegalStateException("thrown by a listener")
                    }
                }
            }
            s.listen(failing).use {
                s.listen(onInterval = { healthy.countDown() }).use {
                    s.start()
                    assertTrue(healthy.await(120, TimeUnit.SECONDS), "the other listener kept receiving")
                    s.stop()
                }
            }
            val ls = s.listenerStats()
            assertTrue(thrown.get() >= 3, "each kind thrown at least once: ${thrown.get()}")
            assertEquals(thrown.get().toULong(), ls.listenerErrors, "every throw is counted")
            assertTrue(ls.lastListenerError!!.contains("thrown by a listener"), ls.lastListenerError)
        }
    }

    @Test
    fun `interval flow delivers background intervals`() = runBlocking {
        wakemeter { interval = 20.milliseconds }.use { s ->
            s.start()
            val got = withTimeout(120.seconds) { s.intervalFlow().take(3).toList() }
            s.stop()
            assertEquals(3, got.size)
            assertTrue(got.zipWithNext().all { (a, b) -> a.toSeq < b.toSeq })
            assertEquals(0u, s.listenerStats().listeners, "cancelling the flow removes its listener")
        }
    }

    @Test
    fun `many JVM threads use one sampler at once`() {
        wakemeter { interval = 5.milliseconds; history = 50 }.use { s ->
            s.start()
            val n = 8
            val barrier = CyclicBarrier(n)
            val failures = ConcurrentLinkedQueue<Throwable>()
            val threads = (0 until n).map { i ->
                thread(name = "jvm-$i") {
                    try {
                        barrier.await()
                        repeat(40) { k ->
                            when ((i + k) % 5) {
                                0 -> assertTrue(s.sampleNow().threads.isNotEmpty())
                                1 -> s.latestInterval()
                                2 -> s.stats()
                                3 -> s.reportJson()
                                else -> {
                                    val id = s.addListener(object : SamplerListenerAdapter() {
                                        override fun onInterval(interval: Interval) {}
                                    })
                                    s.removeListener(id)
                                }
                            }
                        }
                    } catch (t: Throwable) {
                        failures.add(t)
                    }
                }
            }
            threads.forEach { it.join() }
            s.stop()
            assertTrue(failures.isEmpty(), "failures: $failures")
            val seqs = s.snapshots().map { it.seq }
            assertEquals(seqs.sorted().distinct(), seqs)
        }
    }

    @Test
    fun `bad configuration raises typed exceptions`() {
        fun field(configure: SamplerSettings.() -> Unit): String {
            val e = assertThrows<WakemeterException.InvalidConfig> { wakemeter(configure).close() }
            return e.message!!
        }
        assertTrue(field { interval = 0.milliseconds }.contains("interval must be greater than zero"))
        assertTrue(field { interval = (-5).seconds }.contains("interval"))
        assertTrue(field { history = 0 }.contains("history"))
        assertTrue(field { history = 10_000_000 }.contains("history must be at most"))
        assertTrue(field { history = -1 }.contains("history"))
        assertTrue(field { switchSplitEvery = 0 }.contains("switch_split_every"))
        assertTrue(field { historyBudgetBytes = 1024 }.contains("history_budget_bytes"))
        assertTrue(field { historyBudgetBytes = -1 }.contains("history_budget_bytes"))
        assertTrue(field { threadName = "a-name-longer-than-15" }.contains("thread_name"))
        assertTrue(field { threadName = "" }.contains("thread_name"))
        assertThrows<WakemeterException.NoSuchProcess> { wakemeter { pid = Int.MAX_VALUE }.close() }
    }

    @Test
    fun `a shut down sampler refuses every call with Closed`() {
        val s = wakemeter { interval = 10.milliseconds }
        s.addListener(object : SamplerListenerAdapter() {
            override fun onInterval(interval: Interval) {}
        })
        s.start()
        s.shutdown()
        s.shutdown() // idempotent
        assertTrue(s.isShutDown())
        assertFalse(s.isRunning())
        assertEquals(0u, s.listenerStats().listeners)
        assertThrows<WakemeterException.Closed> { s.start() }
        assertThrows<WakemeterException.Closed> { s.stop() }
        assertThrows<WakemeterException.Closed> { s.sampleNow() }
        assertThrows<WakemeterException.Closed> { s.latest() }
        assertThrows<WakemeterException.Closed> { s.snapshots() }
        assertThrows<WakemeterException.Closed> { s.latestInterval() }
        assertThrows<WakemeterException.Closed> { s.intervalOver(1.milliseconds) }
        assertThrows<WakemeterException.Closed> { s.stats() }
        assertThrows<WakemeterException.Closed> { s.report() }
        assertThrows<WakemeterException.Closed> { s.reportJson() }
        val e = assertThrows<WakemeterException.Closed> {
            s.addListener(object : SamplerListenerAdapter() {
                override fun onInterval(interval: Interval) {}
            })
        }
        assertEquals("the sampler is shut down", e.message)
        s.close()
        // A released object is refused on the Kotlin side before reaching Rust.
        assertThrows<IllegalStateException> { s.sampleNow() }
    }

    @Test
    fun `stopping from inside a listener does not deadlock`() {
        wakemeter { interval = 10.milliseconds }.use { s ->
            val stopped = CountDownLatch(1)
            s.addListener(object : SamplerListenerAdapter() {
                override fun onInterval(interval: Interval) {
                    s.stop()
                    stopped.countDown()
                }
            })
            s.start()
            assertTrue(stopped.await(120, TimeUnit.SECONDS))
            Thread.sleep(50)
            assertFalse(s.isRunning())
        }
    }

    /** Waits until [s] has taken [n] samples, for at most two minutes. */
    private fun awaitSamples(s: Sampler, n: ULong) {
        val bound = kotlin.time.TimeSource.Monotonic.markNow() + 120.seconds
        while (s.stats().totalSamples < n && bound.hasNotPassedNow()) Thread.sleep(5)
    }
}
