"""moe_mlir: the moe-mlir compiler and runtime from Python.

The compiler (the _compiler extension, built where MLIR is):
    Module          parse, verify and print moe IR; run pass pipelines
    CpuFunction     a function of tensors on the CPU path, called with numpy
    compile_bundle  a layer (Module or MLIR text) to a bundle directory
    round_to        values rounded to bf16, f16 or f32
Layers (plain Python; sources and compiling need the compiler):
    Router, Layer   a MoE layer's routing rules and sizes; Layer.preset(name)
    preset_names    the model presets
    layer_bundle    a layer's bundle, compiled once into a cache directory
The runtime (the _runtime extension, built where cuda.h is):
    Bundle          a bundle on a CUDA device, run on torch or DLPack tensors
torch (imported only by moe_mlir.torch):
    moe_mlir.torch.FusedMoE   an nn.Module running a layer's bundle

Every failure of the compiler or runtime raises moe_mlir.Error carrying its
diagnostics whole (bytes that are not UTF-8 written as \\xNN); wrong
argument types raise TypeError (a bool is no int, and no str a bool), wrong
shapes and values out of range ValueError (no int wraps).
HAS_COMPILER and HAS_RUNTIME say which extensions this build has.
"""

from ._errors import Error
from .layers import (Layer, Router, default_cache_dir, layer_bundle,
                     preset_names)
from .runtime import Bundle, TensorInfo
from . import layers as _layers
from . import runtime as _runtime_module

HAS_COMPILER = _layers._compiler is not None
HAS_RUNTIME = _runtime_module._runtime is not None

_COMPILER_NAMES = ("CpuFunction", "Module", "compile_bundle", "round_to")
if HAS_COMPILER:
    from ._compiler import CpuFunction, Module, compile_bundle, round_to

__all__ = ["Bundle", "Error", "HAS_COMPILER", "HAS_RUNTIME", "Layer",
           "Router", "TensorInfo", "default_cache_dir", "layer_bundle",
           "preset_names", *_COMPILER_NAMES]


def __getattr__(name):
    """Says why a compiler name is missing from a runtime-only build."""
    if name in _COMPILER_NAMES:
        _layers.require_compiler(f"moe_mlir.{name}")
    raise AttributeError(f"module 'moe_mlir' has no attribute {name!r}")
