// A Perfetto trace of the sampler's process (ui.perfetto.dev, Android Studio).
package dev.wakemeter

import dev.wakemeter.ffi.PerfettoTrace
import dev.wakemeter.ffi.PerfettoTraceStatus
import dev.wakemeter.ffi.Sampler
import java.io.File

/** Default size cap of a trace file: 256 MiB (an hour at 1 Hz of 256 busy threads is ~35 MB). */
const val DEFAULT_PERFETTO_MAX_BYTES: Long = 256L * 1024 * 1024

/**
 * Starts writing a Perfetto trace of this sampler's process to [file]
 * (created or truncated now, at most [maxBytes]), one interval per sample
 * (samples stored before its writer thread ran again are taken as one).
 * Close the returned trace (`use {}`) or call [PerfettoTrace.finish] to
 * write the last samples. Samples are written in batches (64 KiB or 5 s),
 * and the file is a complete trace after every batch: a process killed
 * without finishing loses at most the last 5 s.
 *
 * @throws dev.wakemeter.ffi.WakemeterException.Unwritable when [file] cannot be created.
 */
fun Sampler.perfettoTrace(file: File, maxBytes: Long = DEFAULT_PERFETTO_MAX_BYTES): PerfettoTrace =
    startPerfettoTrace(file.path, maxBytes.coerceAtLeast(0).toULong())

/** Runs [block] while a Perfetto trace is written to [file]; returns what the file holds. */
inline fun Sampler.tracing(
    file: File,
    maxBytes: Long = DEFAULT_PERFETTO_MAX_BYTES,
    block: (Sampler) -> Unit,
): PerfettoTraceStatus = perfettoTrace(file, maxBytes).use { t ->
    block(this)
    t.finish()
}
