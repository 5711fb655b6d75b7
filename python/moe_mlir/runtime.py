"""Bundles on CUDA devices: load one, ask for its tensors' shapes, and
enqueue it on a stream with torch tensors, DLPack tensors or raw pointers.

torch stays optional: it is used only when the caller already imported it
(for its current device and stream) or passes its tensors.
"""

import importlib.util
import os
import sys
from typing import NamedTuple

from ._errors import Error

# A build without cuda.h has no _runtime (see Bundle); one that exists but
# fails to load raises here, with the loader's reason.
if importlib.util.find_spec(__package__ + "._runtime"):
    from . import _runtime
else:
    _runtime = None

# DLPack device types (dlpack.h).
_DLPACK_CUDA = 2

_TORCH_DTYPE_NAMES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16",
                      "int32": "i32", "int64": "i64", "uint8": "u8",
                      "float8_e4m3fn": "f8e4m3"}


class TensorInfo(NamedTuple):
    """A tensor a bundle takes: its name in the manifest, "input" or
    "output", the element type (f32, bf16, f16, i32, i64, u8) and the shape
    at the token count asked for."""

    name: str
    role: str
    dtype: str
    shape: tuple


def _loaded_torch():
    """torch if the program imported it, else None (never imports it)."""
    return sys.modules.get("torch")


def _stream_handle(stream, device):
    """The CUstream of `stream`: an int handle, a torch.cuda.Stream (or
    anything with .cuda_stream), or None for torch's current stream on
    `device` when torch is loaded, else the legacy default stream (0)."""
    if stream is None:
        torch = _loaded_torch()
        if torch is None:
            return 0
        return torch.cuda.current_stream(device).cuda_stream
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "cuda_stream"):
        return stream.cuda_stream
    raise TypeError(f"stream must be an int handle, a torch.cuda.Stream or "
                    f"None, got {type(stream).__name__}")


def _describe(tensor, index, device, stream, keep_alive):
    """(pointer, dtype, shape) of caller tensor `index` on `device`.
    Capsules read from DLPack producers go into `keep_alive`."""
    what = f"tensor #{index}"
    torch = _loaded_torch()
    if torch is not None and isinstance(tensor, torch.Tensor):
        if tensor.device.type != "cuda" or tensor.device.index != device:
            raise ValueError(f"{what} is on {tensor.device}; the bundle is "
                             f"on cuda:{device}")
        dtype = _TORCH_DTYPE_NAMES.get(str(tensor.dtype).split(".")[-1])
        if dtype is None:
            raise TypeError(f"{what} has dtype {tensor.dtype}, which no "
                            "bundle takes")
        if not tensor.is_contiguous():
            raise ValueError(f"{what} is not contiguous (bundles take dense "
                             "row-major tensors; use .contiguous())")
        return tensor.data_ptr(), dtype, tuple(tensor.shape)
    if hasattr(tensor, "__dlpack__"):
        device_type, device_id = tensor.__dlpack_device__()
        if device_type != _DLPACK_CUDA or device_id != device:
            raise ValueError(f"{what} is on DLPack device ({device_type}, "
                             f"{device_id}); the bundle is on CUDA device "
                             f"{device}")
        # DLPack's stream argument: 1 is the legacy default stream, which
        # the CUDA API calls 0.
        capsule = tensor.__dlpack__(stream=stream or 1)
        keep_alive.append(capsule)
        pointer, dtype, shape, _, _, contiguous = _runtime.read_dlpack(
            capsule)
        if not contiguous:
            raise ValueError(f"{what} is not contiguous (bundles take dense "
                             "row-major tensors)")
        return pointer, dtype, shape
    if isinstance(tensor, tuple) and len(tensor) == 3:
        # Checked by the extension: int(1.5) or str(None) would hide a
        # mistake.
        return tensor
    raise TypeError(f"{what} must be a torch tensor, an object with "
                    f"__dlpack__, or a (pointer, dtype, shape) tuple; got "
                    f"{type(tensor).__name__}")


class Bundle:
    """A bundle (docs/BUNDLE.md) loaded onto one CUDA device.

    A bundle holds one plan per variant, each for the token counts up to its
    bound (``variants``). ``run`` picks the variant for its token count on
    the host, enqueues that variant's zero fills and kernels on a stream and
    returns: no host synchronisation and no device allocation, so a run at
    a given token count can be captured in a CUDA graph. The tensors must
    stay alive until the stream has run it. One bundle must not run from
    two threads at once.

    Failures of the runtime (no GPU, a bad bundle, shapes that do not match
    the manifest, a CUDA error) raise moe_mlir.Error with its message.
    """

    def __init__(self, path, device=None):
        """Loads the bundle in directory ``path`` onto CUDA device
        ``device``: torch's current device when None and torch is loaded,
        else device 0. Its kernels are launched as programmatic dependents
        of the kernel before them unless MOE_DEPENDENT_LAUNCH is 0 in the
        environment now (docs/BUNDLE.md, "Dependent launches")."""
        if _runtime is None:
            raise Error("moe_mlir.Bundle needs the runtime (the _runtime "
                        "extension), which this build lacks: CMake found no "
                        "cuda.h")
        if device is None:
            torch = _loaded_torch()
            device = torch.cuda.current_device() if torch is not None else 0
        self.path = os.fspath(path)
        self.device = device
        # As the file system's bytes: a name that is not UTF-8 comes as a
        # str with surrogates, which the extension cannot take.
        self._bundle = _runtime.Bundle(os.fsencode(self.path), device)

    @property
    def tokens_max(self):
        """The largest token count a run takes."""
        return self._bundle.tokens_max

    @property
    def variants(self):
        """The bound of each of the bundle's variants, increasing, the last
        one ``tokens_max``: variant i serves the token counts above bound
        i-1 up to bound i. A bundle of format version 1 has one."""
        return self._bundle.variants

    def variant_for(self, tokens):
        """The index in ``variants`` of the variant that ``run`` executes
        for ``tokens`` tokens: the first whose bound is at least
        ``tokens``. Raises moe_mlir.Error when ``tokens`` is outside
        [1, tokens_max]."""
        return self._bundle.variant_for(tokens)

    def tensors(self, tokens):
        """The TensorInfo of each tensor ``run`` takes, in order, with its
        shape at ``tokens`` tokens (to allocate the outputs)."""
        return [TensorInfo(*info) for info in self._bundle.tensors(tokens)]

    @property
    def exchanges(self):
        """{name: (world, rank)} of the caller tensors that are exchange
        buffers (an expert-parallel phase's, docs/BUNDLE.md): one slice of
        a buffer that every one of ``world`` ranks holds, ``rank`` being the
        rank whose slice ``run`` takes. Empty for a one-GPU layer."""
        return self._bundle.exchanges()

    def bind_peers(self, name, slices):
        """Binds the ranks' slices of exchange buffer ``name``: ``slices``
        holds, for rank d at index d, its slice as a torch CUDA tensor or a
        device address (int), each reachable from this device. Blocking:
        call it before the runs (outside a CUDA graph capture), and again
        only once the runs of the previous binding have finished. Every
        exchange buffer must be bound before ``run``, which must pass the
        bound slice of this bundle's rank."""
        names = [info.name for info in self.tensors(self.tokens_max)]
        if name not in names:
            raise Error(f"{name!r} is not a tensor of the bundle "
                        f"({', '.join(names)})")
        pointers = [slice_.data_ptr() if hasattr(slice_, "data_ptr")
                    else slice_ for slice_ in slices]
        self._bundle.bind_peers(names.index(name), pointers)

    def run(self, tokens, tensors, stream=None):
        """Enqueues the bundle for ``tokens`` tokens on ``stream``.

        ``tensors`` are the caller tensors in the order ``tensors()`` lists
        them: torch CUDA tensors (through data_ptr()), objects with
        ``__dlpack__`` (asked for that stream), or (pointer, dtype, shape)
        tuples. ``stream``: a CUstream handle (int), a torch.cuda.Stream, or
        None for torch's current stream (the legacy default stream when the
        program has not loaded torch).
        """
        handle = _stream_handle(stream, self.device)
        keep_alive = []
        described = [_describe(tensor, index, self.device, handle, keep_alive)
                     for index, tensor in enumerate(tensors)]
        self._bundle.run(tokens, described, handle)

    def close(self):
        """Frees the bundle's device memory and module. Synchronise the
        streams that ran it first."""
        self._bundle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def __repr__(self):
        state = "closed" if self._bundle.closed else f"cuda:{self.device}"
        return f"<moe_mlir.Bundle {self.path} on {state}>"
