# RUN: %python %s | FileCheck %s
"""moe_mlir.Module: parse, print, verify and pass pipelines, and how their
failures reach Python (moe_mlir.Error with MLIR's located diagnostics)."""

import os
import sys

import moe_mlir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
from expect import report  # noqa: E402

LAYER = """
func.func @layer(%x: tensor<?x16xf32>, %logits: tensor<?x8xf32>,
                 %w13: tensor<8x32x16xf32>, %w2: tensor<8x16x16xf32>)
    -> tensor<?x16xf32> {
  %y = moe.fused_moe %x, %logits, %w13, %w2 activation(silu_and_mul)
         {router = #moe.router<scoring = softmax, top_k = 2,
                               renormalize = true>}
       : (tensor<?x16xf32>, tensor<?x8xf32>, tensor<8x32x16xf32>,
          tensor<8x16x16xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
"""

# num_groups = 3 does not divide the 8 experts: only the verifier knows.
UNVERIFIABLE = """
func.func @router(%logits: tensor<?x8xf32>)
    -> (tensor<?x2xf32>, tensor<?x2xi32>) {
  %w, %ids = moe.gate %logits {router = #moe.router<scoring = softmax,
                               top_k = 2, num_groups = 3>}
      : (tensor<?x8xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
  return %w, %ids : tensor<?x2xf32>, tensor<?x2xi32>
}
"""


# Round trip: the printed module parses back to the same text.
module = moe_mlir.Module.parse(LAYER)
text = str(module)
assert str(moe_mlir.Module.parse(text)) == text
print(text)
# CHECK-LABEL: func.func @layer(
# CHECK: moe.fused_moe %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} activation(silu_and_mul) {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>}
# CHECK: return

print(module.to_string(generic=True))
# CHECK: "moe.fused_moe"(%{{.*}}) <{activation = {{.*}}, router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>}>

module.verify()
print("verify: valid")
# CHECK: verify: valid

# Verifier and parser errors: moe_mlir.Error (a RuntimeError) with the
# located diagnostic and the source line.
error = report("verifier", lambda: moe_mlir.Module.parse(UNVERIFIABLE,
                                                         name="router.mlir"))
assert isinstance(error, moe_mlir.Error) and isinstance(error, RuntimeError)
# CHECK: verifier: Error: router.mlir:4:14: error: 'moe.gate' op num_groups (3) must divide the expert count (8)
# CHECK-NEXT: %w, %ids = moe.gate
# CHECK-NEXT: ^

report("syntax", lambda: moe_mlir.Module.parse("func.func @f( {"))
# CHECK: syntax: Error: <string>:1:14: error: expected non-function type

report("router attribute", lambda: moe_mlir.Module.parse(
    LAYER.replace("top_k = 2", "top_k = 0")))
# CHECK: router attribute: Error: <string>:6:{{[0-9]+}}: error: top_k must be at least 1, got 0

# moe-decompose: the layer as primitive ops; the original is untouched.
decomposed = module.clone()
decomposed.run_pipeline("moe-decompose")
assert str(module) == text
print(decomposed)
# CHECK-LABEL: func.func @layer(
# CHECK-NOT: moe.fused_moe
# CHECK: %[[W:.*]], %[[IDS:.*]] = moe.gate %arg1 {router = #moe.router<scoring = softmax, top_k = 2, renormalize = true>}
# CHECK: %[[SORTED:.*]], %[[EXPERTS:.*]], %[[PADDED:.*]] = moe.route %[[IDS]] {block_m = 64 : i64, num_experts = 8 : i64}
# CHECK: %[[H:.*]] = moe.grouped_matmul %arg0, %arg2, %[[SORTED]], %[[EXPERTS]], %[[PADDED]] input(token) output(sorted) activation(silu_and_mul)
# CHECK: %[[ROWS:.*]] = moe.grouped_matmul %[[H]], %arg3, %[[SORTED]], %[[EXPERTS]], %[[PADDED]] routed_weights(%[[W]]) input(sorted) output(slot)
# CHECK: moe.combine %[[ROWS]]

# Pass options, anchored pipelines and nested pass managers, as moe-opt
# takes them.
for pipeline in ["moe-decompose{block-m=16}",
                 "builtin.module(moe-decompose{block-m=16})",
                 "moe-decompose{block-m=16},func.func(canonicalize),cse"]:
    transformed = module.clone()
    transformed.run_pipeline(pipeline)
    assert "block_m = 16" in str(transformed), pipeline
print("pipelines: options, anchored and nested ran")
# CHECK: pipelines: options, anchored and nested ran

# The whole CPU pipeline: the layer as LLVM dialect.
lowered = module.clone()
lowered.run_pipeline("moe-cpu-pipeline")
print(lowered)
# CHECK-LABEL: llvm.func @layer(
# CHECK-NOT: moe.

report("unknown pass", lambda: module.run_pipeline("no-such-pass"))
# CHECK: unknown pass: Error: invalid pass pipeline 'no-such-pass': {{.*}}error: 'no-such-pass' does not refer to a registered pass or pass pipeline

report("malformed pipeline", lambda: module.run_pipeline("moe-decompose{"))
# CHECK: malformed pipeline: Error: invalid pass pipeline 'moe-decompose{': {{.*}}error: missing closing '}' while processing pass options

# A failing pass: its diagnostics, and the module as it was.
report("failing pass", lambda: module.run_pipeline("convert-moe-to-loops"))
assert str(module) == text
print("failing pass: module unchanged")
# CHECK: failing pass: Error: pass pipeline 'convert-moe-to-loops' failed:
# CHECK-NEXT: <string>:5:8: error: convert-moe-to-loops: run moe-decompose first
# CHECK: failing pass: module unchanged

report("not text", lambda: moe_mlir.Module.parse(42))
# CHECK: not text: TypeError:
