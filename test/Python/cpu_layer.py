# RUN: %python %s | FileCheck %s
"""moe_mlir.CpuFunction on small fused layers (f32, f16, bf16) against an
independent numpy implementation of the layer's semantics (DESIGN.md,
section 2), the router's ids exactly, and the errors of wrong arrays.

Tolerance: max |output - reference| <= TOLERANCE[dtype] * max |reference|,
the reference computed in float64 from the inputs as rounded to the layer's
dtype. The compiled layer stores its intermediates in its dtype, so bf16
and f16 differ from the float64 reference by a few of their units in the
last place; f32 only by float32 summation order.
"""

import os
import sys

import numpy as np

import moe_mlir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
from expect import report  # noqa: E402

TOLERANCE = {"f32": 1e-5, "f16": 4e-3, "bf16": 2e-2}


def round_to_bf16(values):
    """`values` rounded to bfloat16 (nearest, ties to even), as float32,
    written here apart from the package's round_to."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def round_to(values, dtype):
    values = np.asarray(values, np.float32)
    if dtype == "bf16":
        return round_to_bf16(values)
    if dtype == "f16":
        return values.astype(np.float16).astype(np.float32)
    return values


def reference_gate(logits, bias, router):
    """(weights, ids) of each token: scores in float64, selection by scores
    + bias within the best groups, ties to the lower index."""
    tokens, experts = logits.shape
    logits = logits.astype(np.float64)
    if router.scoring == "softmax":
        scores = np.exp(logits - logits.max(axis=1, keepdims=True))
        scores /= scores.sum(axis=1, keepdims=True)
    else:
        scores = 1 / (1 + np.exp(-logits))
    selection = scores + bias if bias is not None else scores.copy()
    if router.num_groups > 1:
        grouped = selection.reshape(tokens, router.num_groups, -1)
        group_scores = np.sort(grouped, axis=2)[:, :, -2:].sum(axis=2)
        # A stable sort of the negated scores puts ties in index order.
        kept = np.argsort(-group_scores, axis=1,
                          kind="stable")[:, :router.topk_groups]
        eligible = np.zeros_like(group_scores, dtype=bool)
        np.put_along_axis(eligible, kept, True, axis=1)
        selection[~np.repeat(eligible, experts // router.num_groups,
                             axis=1)] = -np.inf
    ids = np.argsort(-selection, axis=1, kind="stable")[:, :router.top_k]
    weights = np.take_along_axis(scores, ids, axis=1)
    if router.renormalize:
        weights /= weights.sum(axis=1, keepdims=True) + 1e-20
    weights *= router.routed_scaling_factor
    shared = np.arange(experts, experts + router.num_shared_experts)
    ids = np.concatenate([ids, np.tile(shared, (tokens, 1))], axis=1)
    weights = np.concatenate(
        [weights, np.ones((tokens, router.num_shared_experts))], axis=1)
    return weights, ids


def reference_layer(x, logits, w13, w2, bias, router):
    """y[t] = sum over t's slots of weight * w2[e] @ (silu(g) * u), where
    (g, u) = the halves of w13[e] @ x[t]; float64 throughout."""
    x, w13, w2 = (array.astype(np.float64) for array in (x, w13, w2))
    weights, ids = reference_gate(logits, bias, router)
    intermediate = w2.shape[2]
    y = np.zeros((x.shape[0], w2.shape[1]))
    for token in range(x.shape[0]):
        for weight, expert in zip(weights[token], ids[token]):
            h = w13[expert] @ x[token]
            gate, up = h[:intermediate], h[intermediate:]
            y[token] += weight * (w2[expert] @ (gate / (1 + np.exp(-gate))
                                               * up))
    return y


def make_inputs(layer, tokens, dtype, rng):
    """Random inputs of unit scale (weights scaled by 1/sqrt(fan-in)) as
    float64, and the same rounded to what the layer sees."""
    hidden, intermediate = layer.hidden_size, layer.intermediate_size
    logits = rng.uniform(-2, 2, (tokens, layer.num_experts))
    # Ties: one token with all logits equal, one with duplicate maxima.
    logits[0] = 0.5
    logits[1, 5] = logits[1, 2] = logits[1].max() + 1
    inputs = [rng.uniform(-1, 1, (tokens, hidden)), logits,
              rng.uniform(-1, 1, layer.w13_shape) / np.sqrt(hidden),
              rng.uniform(-1, 1, layer.w2_shape) / np.sqrt(intermediate)]
    if layer.correction_bias:
        inputs.append(rng.uniform(-0.1, 0.1, layer.num_experts))
    # Logits and bias are f32 in every layer.
    seen = [round_to(array, "f32" if index in (1, 4) else dtype)
            for index, array in enumerate(inputs)]
    return inputs, seen


def check_layer(name, layer, dtype, tokens, rng):
    function = moe_mlir.CpuFunction.compile(layer.source(dtype))
    inputs, seen = make_inputs(layer, tokens, dtype, rng)
    # float64 arrays go in as they are: the function rounds them.
    output = function(*inputs)
    assert output.dtype == (np.float16 if dtype == "f16" else np.float32)
    assert output.shape == (tokens, layer.hidden_size)
    bias = seen[4] if layer.correction_bias else None
    expected = reference_layer(*seen[:4], bias, layer.router)
    error = np.abs(output - expected).max() / np.abs(expected).max()
    assert error <= TOLERANCE[dtype], f"{name}: relative error {error:.3g}"
    # The rounding is what the function does to float64 arrays.
    assert np.array_equal(function(*seen), output), name

    router = moe_mlir.CpuFunction.compile(layer.router_source())
    weights, ids = router(*([seen[1], bias] if bias is not None
                            else [seen[1]]))
    expected_weights, expected_ids = reference_gate(seen[1], bias,
                                                    layer.router)
    assert ids.dtype == np.int32 and np.array_equal(ids, expected_ids), name
    assert np.allclose(weights, expected_weights, rtol=1e-5, atol=1e-7)
    print(f"{name}: {dtype} T={tokens} within {TOLERANCE[dtype]:g}, "
          f"ids exact")


rng = np.random.default_rng(7)

# round_to agrees with the bit-level rounding above, ties to even included.
samples = np.concatenate([rng.standard_normal(1000).astype(np.float32),
                          [1.00390625, 1.01171875, -0.0, 3.0e38]])
assert np.array_equal(moe_mlir.round_to(samples, "bf16"),
                      round_to_bf16(samples))
with np.errstate(over="ignore"):  # 3e38 becomes inf in f16, as it should
    assert np.array_equal(moe_mlir.round_to(samples, "f16"),
                          samples.astype(np.float16).astype(np.float32))
print("round_to: bf16 and f16 agree with numpy")
# CHECK: round_to: bf16 and f16 agree with numpy

softmax = moe_mlir.Layer(16, 8, 8, moe_mlir.Router("softmax", 2,
                                                   renormalize=True))
check_layer("softmax top-2", softmax, "f32", 7, rng)
check_layer("softmax top-2", softmax, "f16", 7, rng)
# CHECK: softmax top-2: f32 T=7 within 1e-05, ids exact
# CHECK: softmax top-2: f16 T=7 within 0.004, ids exact

grouped = moe_mlir.Layer(
    32, 16, 16,
    moe_mlir.Router("sigmoid", 3, num_groups=4, topk_groups=2,
                    renormalize=True, routed_scaling_factor=2.5,
                    num_shared_experts=1),
    correction_bias=True)
check_layer("sigmoid grouped top-3 + shared", grouped, "bf16", 9, rng)
check_layer("sigmoid grouped top-3 + shared", grouped, "f32", 9, rng)
# CHECK: sigmoid grouped top-3 + shared: bf16 T=9 within 0.02, ids exact
# CHECK: sigmoid grouped top-3 + shared: f32 T=9 within 1e-05, ids exact

# A preset, reduced, runs as well.
preset = moe_mlir.Layer.preset("qwen3-30b-a3b", reduced=True)
check_layer("qwen3-30b-a3b reduced", preset, "bf16", 3, rng)
# CHECK: qwen3-30b-a3b reduced: bf16 T=3 within 0.02, ids exact

# Wrong arrays: TypeError for the kind of array, ValueError for its shape.
layer = moe_mlir.CpuFunction.compile(softmax.source("bf16"))
print(layer)
# CHECK: <moe_mlir.CpuFunction @layer(tensor<?x16xbf16>, tensor<?x8xf32>, tensor<8x16x16xbf16>, tensor<8x16x8xbf16>) -> (tensor<?x16xbf16>)>
print(layer.arguments, layer.results)
# CHECK: [('bf16', (None, 16)), ('f32', (None, 8)), ('bf16', (8, 16, 16)), ('bf16', (8, 16, 8))] [('bf16', (None, 16))]
inputs, _ = make_inputs(softmax, 4, "bf16", rng)
x, logits, w13, w2 = inputs
report("hidden size", lambda: layer(x[:, :15], logits, w13, w2))
# CHECK: hidden size: ValueError: argument #0 of 'layer' (tensor<?x16xbf16>): dimension 1 must be 16, got shape (4, 15)
report("token counts", lambda: layer(x, logits[:3], w13, w2))
# CHECK: token counts: ValueError: argument #1 of 'layer' (tensor<?x8xf32>): dimension 0 is the token count, 4 in the arguments before, got shape (3, 8)
report("rank", lambda: layer(x[0], logits, w13, w2))
# CHECK: rank: ValueError: argument #0 of 'layer' (tensor<?x16xbf16>) needs rank 2, got shape (16,)
report("integer array", lambda: layer(x, logits.astype(np.int32), w13, w2))
# CHECK: integer array: TypeError: argument #1 of 'layer' (tensor<?x8xf32>) needs a floating-point array, got dtype int32
report("argument count", lambda: layer(x, logits, w13))
# CHECK: argument count: TypeError: 'layer' takes 4 arrays, got 3
report("not an array", lambda: layer(x, logits, w13, object()))
# CHECK: not an array: TypeError: argument #3 of 'layer' (tensor<8x16x8xbf16>) needs a floating-point array, got dtype object

# A dynamic T of 0 is empty work: no tokens in, none out (the runtime
# instead refuses T outside [1, tokens_max], and static sizes of 0 do not
# verify).
empty = layer(x[:0], logits[:0], w13, w2)
print("no tokens:", empty[0].shape if isinstance(empty, list) else empty.shape)
# CHECK: no tokens: (0, 16)

# i32 arguments and results: moe.route on expert ids.
route = moe_mlir.CpuFunction.compile("""
func.func @route(%ids: tensor<?x2xi32>)
    -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>) {
  %sorted, %experts, %padded = moe.route %ids {num_experts = 4, block_m = 16}
      : (tensor<?x2xi32>) -> (tensor<?xi32>, tensor<?xi32>, tensor<i32>)
  return %sorted, %experts, %padded : tensor<?xi32>, tensor<?xi32>, tensor<i32>
}
""")
sorted_ids, expert_ids, padded = route(np.array([[3, 0], [0, 1]]))
assert padded.shape == () and padded.dtype == np.int32
print("route:", sorted_ids[:int(padded)].tolist(),
      expert_ids[:int(padded) // 16].tolist())
# CHECK: route: [1, 2, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4] [0, 1, 3]
report("float ids", lambda: route(np.zeros((2, 2))))
# CHECK: float ids: TypeError: argument #0 of 'route' (tensor<?x2xi32>) needs an integer array, got dtype float64
report("int32 range", lambda: route(np.array([[2**40, 0]])))
# CHECK: int32 range: ValueError: argument #0 of 'route' (tensor<?x2xi32>) holds 1099511627776, out of int32's range

report("entry", lambda: moe_mlir.CpuFunction.compile(softmax.source("f32"),
                                                     entry="nope"))
# CHECK: entry: ValueError: the module has no function 'nope'
