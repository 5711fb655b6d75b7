# RUN: %python %s | FileCheck %s
"""Every failure reaches Python as its documented exception with its whole
message: moe_mlir.Error for the compiler and the runtime (bytes that are
not UTF-8 written as \\xNN, not an empty message), TypeError for an
argument of the wrong type (a bool or a str where a flag or an int belongs,
instead of its truth value), ValueError for a value out of range (an int
past int64 or int32, instead of wrapping)."""

import os
import sys

import numpy as np

import moe_mlir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
from expect import report  # noqa: E402

# A diagnostic that quotes a symbol name holding the byte 0xff.
report("raw byte", lambda: moe_mlir.Module.parse(
    'func.func @"\\ff"(%x: i32) -> i64 {\n  return %x : i32\n}'))
# CHECK: raw byte: Error: <string>:2:3: error: type of return operand 0 ('i32') doesn't match function result type ('i64') in function @\xff

# 20,000 nested regions overflowed the parser's stack and killed the
# interpreter: the source limits of the tools refuse them first.
report("nesting", lambda: moe_mlir.Module.parse(
    "scf.execute_region {\n" * 20000))
# CHECK: nesting: Error: <string>:257:20: error: nests deeper than 256 (brackets, affine operators and aliases counted together)

# So do pass pipelines nested as deep.
report("pipeline nesting", lambda: moe_mlir.Module.parse("module {}")
       .run_pipeline("builtin.module(" * 100000))
# CHECK: pipeline nesting: Error: <pipeline>:1:3855: error: nests deeper than 256

identity = moe_mlir.CpuFunction.compile(
    'func.func @"\\ff"(%a: tensor<?x2xi32>) -> tensor<?x2xi32> {\n'
    '  return %a : tensor<?x2xi32>\n}')
print(repr(identity.name), identity)
# CHECK: '\\xff' <moe_mlir.CpuFunction @\xff(tensor<?x2xi32>) -> (tensor<?x2xi32>)>

# i32 arguments: unsigned values past int64 no longer wrap to -1.
report("uint64", lambda: identity(np.full((1, 2), 2**64 - 1, np.uint64)))
# CHECK: uint64: ValueError: argument #0 of '\xff' (tensor<?x2xi32>) holds 18446744073709551615, out of int32's range
print(identity(np.array([[2**31 - 1, -2**31]], np.int64)))
# CHECK: {{\[\[}} 2147483647 -2147483648]]

# Flags are bools, sizes ints within int64, the scaling factor a number.
report("renormalize", lambda: moe_mlir.Router("softmax", 2,
                                              renormalize="no"))
# CHECK: renormalize: TypeError: renormalize must be a bool, got str
report("correction_bias", lambda: moe_mlir.Layer(
    64, 32, 8, moe_mlir.Router("softmax", 2), correction_bias=1))
# CHECK: correction_bias: TypeError: correction_bias must be a bool, got int
report("top_k", lambda: moe_mlir.Router("softmax", 2**64))
# CHECK: top_k: ValueError: top_k must be in [1, 2**63 - 1], got 18446744073709551616
report("scale type", lambda: moe_mlir.Router(
    "softmax", 2, routed_scaling_factor="2.5"))
# CHECK: scale type: TypeError: routed_scaling_factor must be a float, got str
report("scale size", lambda: moe_mlir.Router(
    "softmax", 2, routed_scaling_factor=10**400))
# CHECK: scale size: ValueError: routed_scaling_factor must be finite and positive, got inf

source = moe_mlir.Layer.preset("qwen3-30b-a3b", reduced=True).routing_source()
never = os.path.join(os.environ.get("TMPDIR", "/tmp"), "never.moeb")
report("tokens_max bool", lambda: moe_mlir.compile_bundle(
    source, never, tokens_max=True))
# CHECK: tokens_max bool: TypeError: tokens_max must be an int, got bool
report("tokens_max 2**63", lambda: moe_mlir.compile_bundle(
    source, never, tokens_max=2**63))
# CHECK: tokens_max 2**63: ValueError: tokens_max is 9223372036854775808, outside int64's range
report("token bucket", lambda: moe_mlir.compile_bundle(
    source, never, token_buckets=[1, 2**70]))
# CHECK: token bucket: ValueError: a token bucket is 1180591620717411303424, outside int64's range
report("num_sms float", lambda: moe_mlir.compile_bundle(
    source, never, num_sms=1.5))
# CHECK: num_sms float: TypeError: num_sms must be an int, got float

# The runtime: a device ordinal is an int, and a path that is not UTF-8
# reaches the loader, whose message says which.
report("device", lambda: moe_mlir.Bundle("/nonexistent", device=True))
# CHECK: device: TypeError: device must be an int, got bool
report("device range", lambda: moe_mlir.Bundle("/nonexistent",
                                               device=2**40))
# CHECK: device range: ValueError: device 1099511627776 is no CUDA device ordinal
report("path", lambda: moe_mlir.Bundle(os.fsdecode(b"/nonexistent/\xff")))
# CHECK: path: Error: cannot open bundle /nonexistent/\xff: cannot open /nonexistent/\xff/manifest.txt: No such file or directory
