package dev.wakemeter

import com.sun.jna.Native
import com.sun.jna.Pointer
import dev.wakemeter.ffi.FfiConverterTypeWakemeterError
import dev.wakemeter.ffi.WakemeterException
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicLong

/**
 * The plain C functions of the wakemeter library that the idiomatic layer
 * calls instead of the generated ones (see `crates/ffi/src/fast.rs`).
 *
 * A generated uniffi call allocates JNA Structures for its call status and
 * its returned buffer and makes two native calls per method (clone the
 * handle, then call): tens of microseconds per call on the JVM, and garbage
 * that JNA frees only through the collector. These functions take and
 * return only integers, so JNA's direct mapping calls them without
 * allocating. Records cross in a direct buffer reused per thread, written
 * by Rust with uniffi's own serialization and read here with the generated
 * converters, so no record is described twice.
 *
 * Handles and buffer addresses are bare numbers because JNA's direct
 * mapping needs primitives (and a `Long` is the same on 32- and 64-bit
 * platforms); only [RawHandle]'s owners call these functions, each with its
 * own kind of handle. The library checks the kind as well.
 */
internal object FastPath {
    // Return codes of the C functions, as in fast.rs (negated by the record calls);
    // crates/ffi/tests/kotlin_constants.rs fails when they differ.
    const val OK = 0
    const val SAMPLER_GONE = 1
    const val BAD_HANDLE = 2
    const val PANICKED = 3
    const val WRONG_KIND = 4
    const val BAD_INPUT = 5

    /** Smallest buffer the record calls accept (`MIN_CAPACITY` in fast.rs). */
    const val MIN_CAPACITY = 64

    init {
        // Same library, and the same override property, as the generated code.
        val name = System.getProperty("uniffi.component.wakemeter_ffi.libraryOverride") ?: "wakemeter_ffi"
        Native.register(FastPath::class.java, name)
    }

    external fun wakemeter_loop_probe_before_wait(handle: Long, timeoutNs: Long): Int
    external fun wakemeter_loop_probe_after_wait(handle: Long, events: Int): Int
    external fun wakemeter_loop_probe_stats(handle: Long, buf: Long, cap: Long): Long
    external fun wakemeter_loop_probe_release(handle: Long): Int
    external fun wakemeter_sleep_probe_begin(handle: Long, requestedNs: Long): Int
    external fun wakemeter_sleep_probe_end(handle: Long): Int
    external fun wakemeter_sleep_probe_stats(handle: Long, buf: Long, cap: Long): Long
    external fun wakemeter_sleep_probe_release(handle: Long): Int
    external fun wakemeter_sampler_call(handle: Long, op: Int, buf: Long, cap: Long, inLen: Long): Long
    external fun wakemeter_sampler_release(handle: Long): Int

    /**
     * Turns a return code into an exception.
     *
     * @throws WakemeterException.SamplerGone when the probe's sampler is shut down or released.
     * @throws IllegalStateException for the codes that mean a bug in wakemeter (a bad or
     *   wrong-kind handle, bad input, a panic in the library); nothing was recorded.
     */
    fun check(code: Int) {
        when (code) {
            OK -> Unit
            SAMPLER_GONE -> throw WakemeterException.SamplerGone("the probe's sampler is gone (shut down or released)")
            BAD_HANDLE -> throw IllegalStateException("wakemeter bug: the handle is not live (0, or already released)")
            WRONG_KIND -> throw IllegalStateException("wakemeter bug: a handle of another kind (sampler, loop, sleep) was used")
            PANICKED -> throw IllegalStateException("wakemeter bug: the library panicked; nothing was recorded")
            BAD_INPUT -> throw IllegalStateException("wakemeter bug: the library could not read the call's input")
            else -> throw IllegalStateException("wakemeter bug: unknown return code $code from the library")
        }
    }

    /** A direct buffer and its native address, used by one thread at a time. */
    class Scratch(capacity: Int) {
        val buffer: ByteBuffer = ByteBuffer.allocateDirect(capacity).order(ByteOrder.BIG_ENDIAN)
        val address: Long = Pointer.nativeValue(Native.getDirectBufferPointer(buffer))
    }

    /** First size of a thread's buffer: a report or a few snapshots of a small process fit. */
    private const val INITIAL_BYTES = 16 * 1024

    /** Larger buffers are used for one call and not kept by the thread. */
    private const val MAX_KEPT_BYTES = 1024 * 1024

    // Not ThreadLocal.withInitial, which Android has only from API 26.
    private val scratch = object : ThreadLocal<Scratch>() {
        override fun initialValue() = Scratch(INITIAL_BYTES)
    }

    /** A buffer of at least [bytes] for this thread's next call. */
    fun scratchFor(bytes: Long): Scratch {
        val current = scratch.get()
        if (bytes <= current.buffer.capacity()) return current
        check(bytes < Int.MAX_VALUE - 8) { "wakemeter answer of $bytes bytes is too large for a ByteBuffer" }
        val size = maxOf(bytes.toInt(), minOf(current.buffer.capacity() * 2L, Int.MAX_VALUE - 8L).toInt())
        val grown = Scratch(size)
        if (size <= MAX_KEPT_BYTES) scratch.set(grown)
        return grown
    }

    /**
     * One record call. [call] is the C function, given the buffer's address,
     * its capacity and the length of the input [write] put at its start; it
     * returns the answer's length (or a negative code). The answer is a tag
     * byte, then the value [read] decodes (tag 0) or a [WakemeterException]
     * (tag 1), as uniffi serialized them. Too small a buffer is grown and
     * the call made again.
     *
     * [read] gets this thread's buffer, which the next call on the thread
     * reuses: it must not call wakemeter (the generated converters never do).
     */
    inline fun <R> record(
        inputBytes: Long = 0,
        write: (ByteBuffer) -> Unit = {},
        call: (address: Long, capacity: Long, inputLength: Long) -> Long,
        read: (ByteBuffer) -> R,
    ): R {
        var needed = maxOf(inputBytes, MIN_CAPACITY.toLong())
        while (true) {
            val s = scratchFor(needed)
            val buf = s.buffer
            buf.clear()
            write(buf)
            val n = call(s.address, buf.capacity().toLong(), buf.position().toLong())
            if (n < 0) this.check((-n).toInt())
            if (n > buf.capacity()) {
                needed = n
                continue
            }
            buf.position(0).limit(n.toInt())
            if (buf.get() != 0.toByte()) throw FfiConverterTypeWakemeterError.read(buf)
            val value = read(buf)
            check(!buf.hasRemaining()) { "wakemeter bug: ${buf.remaining()} bytes left after reading an answer" }
            return value
        }
    }
}

/**
 * Owns one raw handle: counts the calls in flight so it is released exactly
 * once, after the last of them, and refuses calls once [close] was called.
 *
 * [holders] is 1 for the owner until [close], plus one per call in flight;
 * the handle is freed by whoever brings it to 0. Only the one [close] that
 * wins [closed] drops the owner's 1, so closing again, or from several
 * threads at once, cannot drop it twice; and a call never takes a hold from
 * 0, so nothing runs on a freed handle.
 */
internal class RawHandle(
    private val handle: Long,
    private val what: String = "probe",
    private val free: (Long) -> Int,
) {
    private val closed = AtomicBoolean(false)
    private val holders = AtomicLong(1)

    /** Runs [block] with the handle, which stays live until [block] returns. */
    inline fun <R> use(block: (Long) -> R): R {
        hold()
        try {
            return block(handle)
        } finally {
            letGo()
        }
    }

    /** Takes a hold for one call; throws if the handle is closed. */
    fun hold() {
        while (true) {
            val n = holders.get()
            // A call that slips in between a concurrent close's flag and its
            // decrement still holds the handle, so it is safe to finish.
            check(n > 0L && !closed.get()) { "the $what is closed" }
            if (holders.compareAndSet(n, n + 1)) return
        }
    }

    /** Gives back a hold from [hold]; the last one frees the handle. */
    fun letGo() {
        if (holders.decrementAndGet() == 0L) FastPath.check(free(handle))
    }

    /** Refuses later calls and gives up the owner's hold; idempotent and thread-safe. */
    fun close() {
        if (closed.compareAndSet(false, true)) letGo()
    }
}
