# RUN: %python %s | FileCheck %s
"""An array argument too large to copy is numpy's MemoryError, not
"RuntimeError: Internal error: pybind11::error_already_set" (pybind11's
ensure() dropped numpy's error); also in the sanitizer build, whose ASan
allocator fails an allocation this large as malloc does
(allocator_may_return_null, cmake/SanitizerOptions.cpp)."""

import os
import sys

import numpy as np

import moe_mlir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
from expect import report  # noqa: E402

identity = moe_mlir.CpuFunction.compile(
    "func.func @f(%a: tensor<?x2xi32>) -> tensor<?x2xi32> {\n"
    "  return %a : tensor<?x2xi32>\n}")
huge = np.broadcast_to(np.zeros(2, np.int64), (2**40, 2))
report("huge", lambda: identity(huge))
# CHECK: huge: MemoryError
