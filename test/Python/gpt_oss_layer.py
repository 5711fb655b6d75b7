# RUN: %python %s | FileCheck %s
"""gpt-oss's MoE layer (the gpt-oss-20b preset, reduced) through moe_mlir's
CPU path against gpt-oss's own computation written here in numpy on its
checkpoint layout: the router's linear with bias, its top-4 of the logits
and a softmax over those four; experts' gate_up_proj [E, H, 2I] with the
gate at even and the up at odd columns, gate_up_proj_bias [E, 2I]
interleaved alike, down_proj [E, I, H], down_proj_bias [E, H]; the clamped
SwiGLU (alpha 1.702, limit 7), in float64. moe's operands come from those
by the load-time conversion of DESIGN.md, section 8: w13 = the gate columns
then the up columns, transposed to [E, 2I, H] (the bias likewise), w2 =
down_proj transposed to [E, H, I]. The biases span +-2 limit so that both
clamps act. f32: max |error| / max |reference| within 1e-5."""

import numpy as np

import moe_mlir

layer = moe_mlir.Layer.preset("gpt-oss-20b", reduced=True)
print(layer.swiglu, layer.expert_biases, layer.router.params())
# CHECK: (1.702, 7.0) True scoring = softmax, top_k = 4, num_groups = 1, topk_groups = 1, renormalize = true, routed_scaling_factor = 1.0, num_shared_experts = 0
source = layer.source("f32")
print("clamped_swiglu" in source, "biases(%w13_bias, %w2_bias)" in source)
# CHECK-NEXT: True True

experts, hidden, inter, top_k = (layer.num_experts, layer.hidden_size,
                                 layer.intermediate_size, layer.router.top_k)
alpha, limit = layer.swiglu
tokens = 13
rng = np.random.default_rng(5)
f32 = np.float32
x = rng.uniform(-1, 1, (tokens, hidden)).astype(f32)
router_weight = rng.uniform(-1, 1, (experts, hidden)) / np.sqrt(hidden)
router_bias = rng.uniform(-0.5, 0.5, experts)
gate_up = (rng.uniform(-1, 1, (experts, hidden, 2 * inter))
           / np.sqrt(hidden)).astype(f32)
gate_up_bias = rng.uniform(-2 * limit, 2 * limit, (experts, 2 * inter))
gate_up_bias = gate_up_bias.astype(f32)
down = (rng.uniform(-1, 1, (experts, inter, hidden))
        / np.sqrt(inter)).astype(f32)
down_bias = rng.uniform(-1, 1, (experts, hidden)).astype(f32)
# The router's linear is the model's, outside the layer: moe takes logits.
logits = (x @ router_weight.T + router_bias).astype(f32)


def gpt_oss_mlp():
    """gpt-oss's experts after its router, per token, in float64."""
    output = np.zeros((tokens, hidden))
    for t in range(tokens):
        chosen = np.argsort(-logits[t].astype(np.float64), kind="stable")
        chosen = chosen[:top_k]
        weights = np.exp(logits[t, chosen] - logits[t, chosen].max())
        weights /= weights.sum()
        for e, weight in zip(chosen, weights):
            h = x[t] @ gate_up[e].astype(np.float64) + gate_up_bias[e]
            gate = np.minimum(h[::2], limit)
            up = np.clip(h[1::2], -limit, limit)
            glu = gate / (1 + np.exp(-alpha * gate))
            y = ((up + 1) * glu) @ down[e].astype(np.float64) + down_bias[e]
            output[t] += weight * y
    return output


def to_moe(gate_up, gate_up_bias, down):
    """gpt-oss's expert weights in moe's layout: (w13, w13_bias, w2)."""
    gate_then_up = np.concatenate([gate_up[..., ::2], gate_up[..., 1::2]], -1)
    bias = np.concatenate([gate_up_bias[:, ::2], gate_up_bias[:, 1::2]], -1)
    return (np.ascontiguousarray(gate_then_up.transpose(0, 2, 1)), bias,
            np.ascontiguousarray(down.transpose(0, 2, 1)))


w13, w13_bias, w2 = to_moe(gate_up, gate_up_bias, down)
function = moe_mlir.CpuFunction.compile(source)
output = function(x, logits, w13, w2, w13_bias, down_bias)
expected = gpt_oss_mlp()
error = np.abs(output - expected).max() / np.abs(expected).max()
clamped = (np.abs(gate_up_bias) > limit).mean()
print(f"relative error within 1e-5: {error <= 1e-5}; biases beyond the "
      f"limit: {clamped > 0.3}")
# CHECK-NEXT: relative error within 1e-5: True; biases beyond the limit: True
