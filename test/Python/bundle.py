# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %t | FileCheck %s
"""compile_bundle and layer_bundle write bundles (manifest and PTX at
least); the runtime's Python side reports what it cannot do here (no GPU)
as moe_mlir.Error, and reads DLPack capsules."""

import os
import sys
import warnings

import numpy as np

import moe_mlir
from moe_mlir import _runtime, runtime

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
from expect import report  # noqa: E402

work = sys.argv[1]


def print_manifest(path):
    with open(os.path.join(path, "manifest.txt")) as file:
        for line in file:
            if line.split()[0] in ("moe-bundle", "target", "tokens-max",
                                   "tensor"):
                print(line.rstrip())
    with open(os.path.join(path, "kernels.ptx")) as file:
        assert ".target sm_90a" in file.read()


# A preset's routing from MLIR text, and its layer from a Module, which
# compile_bundle leaves as it was.
qwen3 = moe_mlir.Layer.preset("qwen3-30b-a3b", reduced=True)
routing = moe_mlir.compile_bundle(qwen3.routing_source("bf16"),
                                  os.path.join(work, "routing.moeb"),
                                  tokens_max=512)
print_manifest(routing)
# CHECK: moe-bundle 3
# CHECK: target sm_90a
# CHECK: tokens-max 512
# CHECK: tensor arg0 input f32 T 128
# CHECK: tensor arg1 input bf16 T 8 64
# CHECK: tensor result0 output f32 T 8
# CHECK: tensor result1 output i32 T 8
# CHECK: tensor result5 output bf16 T 64

module = moe_mlir.Module.parse(qwen3.source("f16"))
text = str(module)
layer = moe_mlir.compile_bundle(module, os.path.join(work, "layer.moeb"),
                                tokens_max=64, block_m=16)
assert str(module) == text
print_manifest(layer)
# CHECK: tokens-max 64
# CHECK: tensor arg0 input f16 T 64
# CHECK: tensor arg1 input f32 T 128
# CHECK: tensor arg2 input f16 128 48 64
# CHECK: tensor arg3 input f16 128 64 24
# CHECK: tensor result0 output f16 T 64

# moe-tile's heuristic fallback is a UserWarning naming each GEMM shape once;
# a tuned database with entries for both shapes silences it.
def compile_warnings(**options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        moe_mlir.compile_bundle(text, os.path.join(work, "warned.moeb"),
                                tokens_max=64, block_m=16, **options)
    return [line.split("warning: ")[1].split(" near")[0]
            for message in caught for line in str(message.message).splitlines()
            if "warning: " in line]


print(compile_warnings())
# CHECK: ["moe-tile: no tuned config for E=128 N=48 K=64 f16 block_m=16 on 'NVIDIA H100 80GB HBM3'", "moe-tile: no tuned config for E=128 N=64 K=24 f16 block_m=16 on 'NVIDIA H100 80GB HBM3'"]
print(compile_warnings(config_db=os.path.join(os.path.dirname(__file__),
                                              "Inputs", "qwen3-reduced-f16.json")))
# CHECK: []
print(len(compile_warnings(device="NVIDIA H200")))
# CHECK: 2
report("config_db", lambda: moe_mlir.compile_bundle(
    text, os.path.join(work, "never.moeb"), config_db="/nonexistent.json"))
# CHECK: config_db: Error: {{.*}}cannot read config database '/nonexistent.json'

report("tokens_max", lambda: moe_mlir.compile_bundle(
    text, os.path.join(work, "never.moeb"), tokens_max=0))
# CHECK: tokens_max: ValueError: tokens_max must be in [1, 2147483647], got 0
report("tokens_max i32", lambda: moe_mlir.compile_bundle(
    text, os.path.join(work, "never.moeb"), tokens_max=2**62))
# CHECK: tokens_max i32: ValueError: tokens_max must be in [1, 2147483647], got 4611686018427387904
report("block_m i32", lambda: moe_mlir.compile_bundle(
    text, os.path.join(work, "never.moeb"), block_m=2**62))
# CHECK: block_m i32: ValueError: block_m must be in [0, 2147483647], got 4611686018427387904
report("num_sms", lambda: moe_mlir.compile_bundle(
    text, os.path.join(work, "never.moeb"), num_sms=0))
# CHECK: num_sms: ValueError: num_sms must be in [1, 1024], got 0
report("compile failure", lambda: moe_mlir.compile_bundle(
    text, os.path.join(work, "never.moeb"), block_m=3))
# CHECK: compile failure: Error: {{.*}}'moe.grouped_matmul' op has no GPU lowering for block_m 3
# A target the kernels cannot be built for is an Error before anything is
# compiled, not a crash of the interpreter (an empty chip crashed
# #nvvm.target's verifier, PTX ISA 6.0 aborted instruction selection).
report("chip", lambda: moe_mlir.compile_bundle(
    text, os.path.join(work, "never.moeb"), chip=""))
# CHECK: chip: Error: unknown chip '' (the kernels are for sm_90a)
report("features", lambda: moe_mlir.compile_bundle(
    text, os.path.join(work, "never.moeb"), features="+ptx60"))
# CHECK: features: Error: unsupported features '+ptx60': expected +ptxNN, a PTX ISA from 8.0 (+ptx80)
report("toolkit", lambda: moe_mlir.compile_bundle(
    text, os.path.join(work, "never.moeb"), toolkit="/nonexistent}"))
# CHECK: toolkit: Error: the CUDA toolkit '/nonexistent}' is not a directory
assert not os.path.exists(os.path.join(work, "never.moeb"))

# layer_bundle: compiled once into the cache, found there the next time,
# and keyed by everything that shapes the bundle.
cache = os.path.join(work, "cache")
deepseek = moe_mlir.Layer.preset("deepseek-v3", reduced=True)
first = moe_mlir.layer_bundle(deepseek, "bf16", cache_dir=cache,
                              tokens_max=256)
stamp = os.stat(os.path.join(first, "manifest.txt")).st_mtime_ns
again = moe_mlir.layer_bundle(deepseek, "bf16", cache_dir=cache,
                              tokens_max=256)
assert again == first
assert os.stat(os.path.join(first, "manifest.txt")).st_mtime_ns == stamp
other = moe_mlir.layer_bundle(deepseek, "bf16", cache_dir=cache,
                              tokens_max=128)
assert other != first
fewer_sms = moe_mlir.layer_bundle(deepseek, "bf16", cache_dir=cache,
                                  tokens_max=256, num_sms=114)
assert fewer_sms not in (first, other)
print(sorted(os.listdir(first)))
print(sorted(name.rsplit("-", 1)[0] for name in os.listdir(cache)))
# CHECK: ['kernels.cubin', 'kernels.ptx', 'layer.json', 'layer.mlir', 'manifest.txt']
# CHECK: ['layer-e257-h224-i64-bf16', 'layer-e257-h224-i64-bf16', 'layer-e257-h224-i64-bf16']
with open(os.path.join(first, "layer.mlir")) as file:
    assert file.read() == deepseek.source("bf16")

# A layer the compiler rejects: the error names the layer, no partial
# bundle stays behind.
bad = moe_mlir.Layer(64, 32, 6, moe_mlir.Router("softmax", 2, num_groups=4,
                                                topk_groups=2))
report("bad layer", lambda: moe_mlir.layer_bundle(bad, "f32",
                                                  cache_dir=cache))
assert len(os.listdir(cache)) == 3
# CHECK: bad layer: Error: cannot compile the layer (E=6+0, H=64, I=32, f32) to a bundle: <string>:{{.*}}num_groups (4) must divide the expert count (6)
report("layer dtype", lambda: moe_mlir.layer_bundle(deepseek, "f64"))
# CHECK: layer dtype: ValueError: unknown layer dtype 'f64' (bf16, f16, f32)
report("router", lambda: moe_mlir.Router("tanh", 2))
# CHECK: router: ValueError: scoring must be 'softmax' or 'sigmoid', got 'tanh'
report("preset", lambda: moe_mlir.Layer.preset("gpt-5"))
# CHECK: preset: ValueError: unknown preset 'gpt-5' (mixtral-8x7b, qwen3-30b-a3b, deepseek-v3, kimi-k2, gpt-oss-20b, gpt-oss-120b)
# Sizes the kernels' i32 indices cannot hold, refused before any IR is made
# from them (2I would overflow).
huge = moe_mlir.Layer(64, 2**62, 8, moe_mlir.Router("softmax", 2))
report("huge layer", lambda: huge.source("bf16"))
# CHECK: huge layer: ValueError: intermediate size must be in [1, 2147483647], got 4611686018427387904
report("huge tokens_max", lambda: moe_mlir.layer_bundle(
    deepseek, "bf16", cache_dir=cache, tokens_max=2**40))
# CHECK: huge tokens_max: ValueError: tokens_max must be in [1, 2147483647], got 1099511627776

# The runtime: without a GPU (or with one), a missing bundle is an Error;
# opening a real one works where a GPU is, and says why not elsewhere.
assert moe_mlir.HAS_RUNTIME
report("missing bundle", lambda: moe_mlir.Bundle(os.path.join(work, "none")))
# CHECK: missing bundle: Error: cannot open bundle {{.*}}none: {{.+}}
try:
    with moe_mlir.Bundle(routing) as bundle:
        assert bundle.tensors(5)[0] == moe_mlir.TensorInfo(
            "arg0", "input", "f32", (5, 128))
except moe_mlir.Error as error:
    assert "CUDA driver not available" in str(error), error

# DLPack capsules (numpy's, on the CPU): pointer, dtype, shape, device and
# layout as the producer states them.
array = np.arange(24, dtype=np.float32).reshape(4, 6)
pointer, dtype, shape, device_type, device_id, contiguous = (
    _runtime.read_dlpack(array.__dlpack__()))
assert pointer == array.ctypes.data
print(dtype, shape, device_type, device_id, contiguous)
# CHECK: f32 (4, 6) 1 0 True
view = array[1:, ::2]
pointer, dtype, shape, _, _, contiguous = _runtime.read_dlpack(
    view.__dlpack__())
assert pointer == view.ctypes.data
print(dtype, shape, contiguous)
# CHECK: f32 (3, 3) False
for numpy_dtype in (np.float16, np.int32, np.int64, np.uint8):
    print(_runtime.read_dlpack(np.zeros(2, numpy_dtype).__dlpack__())[1])
# CHECK: f16
# CHECK-NEXT: i32
# CHECK-NEXT: i64
# CHECK-NEXT: u8
report("dlpack dtype", lambda: _runtime.read_dlpack(
    np.zeros(2, np.float64).__dlpack__()))
# CHECK: dlpack dtype: TypeError: DLPack element type (code 2, 64 bits, 1 lanes) is none of f32, bf16, f16, i32, i64, u8
report("dlpack capsule", lambda: _runtime.read_dlpack(object()))
# CHECK: dlpack capsule: TypeError:
report("host tensor", lambda: runtime._describe(array, 0, 0, 0, []))
# CHECK: host tensor: ValueError: tensor #0 is on DLPack device (1, 0); the bundle is on CUDA device 0
report("tensor kind", lambda: runtime._describe([1.0], 0, 0, 0, []))
# CHECK: tensor kind: TypeError: tensor #0 must be a torch tensor, an object with __dlpack__, or a (pointer, dtype, shape) tuple; got list
