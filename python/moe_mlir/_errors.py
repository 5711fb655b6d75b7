"""The exception both extensions raise (kept apart so that each can import
it while the package itself is still being imported)."""


class Error(RuntimeError):
    """A failure of the moe compiler or runtime.

    The message carries the diagnostics: for IR, MLIR's located messages
    (``<string>:3:8: error: ...``); for a bundle, the runtime's message (the
    CUDA call that failed, the tensor that does not match, ...).
    """
