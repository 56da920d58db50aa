package dev.wakemeter.ffi

import com.sun.jna.CallbackThreadInitializer
import com.sun.jna.Native

/**
 * Makes JNA keep wakemeter's delivery thread attached to the JVM under its
 * own name ("wakemeter-cb") instead of attaching and detaching a fresh
 * anonymous `Thread-N` on every listener call.
 *
 * Lives in the generated code's package because the callback objects it
 * configures are internal to it; it only reads them.
 */
internal object CallbackThreads {
    private val installed: Unit by lazy {
        val init = CallbackThreadInitializer(true, false, "wakemeter-cb")
        Native.setCallbackThreadInitializer(uniffiCallbackInterfaceSamplerListener.`onInterval`, init)
        Native.setCallbackThreadInitializer(uniffiCallbackInterfaceSamplerListener.`onFinding`, init)
    }

    /** Idempotent; called by every entry point of the idiomatic layer. */
    fun install() = installed
}
