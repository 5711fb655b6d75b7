#!/usr/bin/env python3
"""GPU test of FP8 (e4m3) experts: every fp8-experts bundle of bundles.json
(moe.fused_experts with f8E4M3FN weights and their tensor, channel or
128 x 128 block scales) runs on the GPU on fresh random inputs, output
poisoned first, and must match the float64 reference of the same layer on
the same quantized operands (moe_mlir.testing.fp8: the activations
quantized per token or per 128-column group, as moe.quantize defines, or
with "activations": "static_tensor" by two static scales that the plain C++
reference calibrates on a fresh draw of 16 other tokens, as checkpoints'
input_scale are made, so that the tested tokens now and then exceed them
and saturate) by moe_mlir.testing.fp8.check: within 5e-3 in norm and
element by element of its magnitude once the intermediate's lawful flips
are decoded. The first GEMM reads bit-identical operands, but a last-bit
difference of the bf16 intermediate (fp32 summation order, the tensor
cores' fp8 sums, exp and erf) can flip its e4m3 code (6 to 12 % of that
element) or, with dynamic scales, its group's scale; such flips move the
output by up to 1 % in norm, a whole group's at small T, and no flat
tolerance both holds them and sees a bug of a few %. check() finds which
the GPU took, each a value moe.quantize could have made of the element had
its fp32 value erred by 2^-9 of its terms' norm, and holds the rest to the
output's own roundings. The plain C++ reference's output (fp32, its own
order) must pass the same check, which ties the float64 reference to it.
Ids are random with about one slot in 8 out of range. Prints per case the
raw error, how many codes and scales were ambiguous and decoded (and how
many values used more than half the margin), the error left and how much
of its allowance it used, and how far the layer is from the bf16 layer on
the dequantized weights (the quantization of the activations). Exits
non-zero on any mismatch."""

import argparse
import sys
import time

import torch

from moe_mlir import Bundle
from moe_mlir.testing import fp8
from moe_mlir.testing.bundles import bundle_path, load_specs
from moe_mlir.testing.reference import Reference
from moe_mlir.testing.tensors import poisoned, relative_errors, uniform

from layer_test import given_routing

# Tokens of the draw static activation scales are calibrated on.
CALIBRATION_TOKENS = 16


def block_view(weights, rows, columns):
    """[E, N, K] zero-padded to whole blocks, as [E, N/rows, rows, K/cols,
    cols]."""
    experts, n, k = weights.shape
    padded = torch.zeros(experts, -(-n // rows) * rows, -(-k // columns) *
                         columns)
    padded[:, :n, :k] = weights
    return padded.view(experts, padded.shape[1] // rows, rows,
                       padded.shape[2] // columns, columns)


def expanded(scales, scaling, block, n, k):
    """The scale of each element of [E, N, K] weights."""
    if scaling == "block":
        return scales.repeat_interleave(block, 1).repeat_interleave(
            block, 2)[:, :n, :k]
    if scaling == "channel":
        return scales[:, :, None]
    return scales[:, None, None]


def quantize_weights(reference, weights, scaling, block):
    """e4m3 codes of float `weights` [E, N, K] and their fp32 scales
    (amax / 448 per expert, output channel or block x block block)."""
    _, n, k = weights.shape
    if scaling == "block":
        amax = block_view(weights.abs(), block, block).amax(dim=(2, 4))
    elif scaling == "channel":
        amax = weights.abs().amax(dim=2)
    else:
        amax = weights.abs().amax(dim=(1, 2))
    scales = (amax.clamp(min=1e-10) / 448.0).contiguous()
    codes = reference.to_e4m3(weights / expanded(scales, scaling, block, n, k))
    return codes, scales


def dequantized(values, scales, scaling, block, expert):
    """An expert's weights, its e4m3 ``values`` [E, N, K] times their
    ``scales``, exactly (float64 [N, K])."""
    n, k = values.shape[1:]
    return (values[expert].double() * expanded(
        scales[expert:expert + 1].double(), scaling, block, n, k)[0])


def check(bundle, spec, reference, tokens, generator, device):
    """One run on random routing; returns (the GPU's fp8.Check, the plain
    C++ reference's, the distance of the reference to the bf16 layer), the
    float64 reference computed on ``device``."""
    hidden_size, intermediate = spec["hidden"], spec["intermediate"]
    experts, scaling, block = spec["experts"], spec["scaling"], spec["block"]
    hidden = uniform(generator, tokens, hidden_size).to(torch.bfloat16)
    w13 = uniform(generator, experts, 2 * intermediate, hidden_size,
                  scale=hidden_size ** -0.5)
    w2 = uniform(generator, experts, hidden_size, intermediate,
                 scale=intermediate ** -0.5)
    w13_codes, w13_scales = quantize_weights(reference, w13, scaling, block)
    w2_codes, w2_scales = quantize_weights(reference, w2, scaling, block)
    ids, weights = given_routing(generator, tokens, spec["slots"], experts)
    input_scales = None
    if spec.get("activations") == "static_tensor":
        calibration = uniform(generator, CALIBRATION_TOKENS, hidden_size)
        calibration_ids, _ = given_routing(generator, CALIBRATION_TOKENS,
                                           spec["slots"], experts)
        input_scales = reference.calibrate_fp8(
            scaling, block, spec["activation"], "bf16", calibration,
            calibration_ids, w13_codes, w13_scales)
    output = poisoned((tokens, hidden_size), torch.bfloat16)
    codes = [codes.cuda().view(torch.float8_e4m3fn)
             for codes in (w13_codes, w2_codes)]
    statics = ([] if input_scales is None
               else [scale.reshape(1).cuda() for scale in input_scales])
    bundle.run(tokens, [hidden.cuda(), ids.cuda(), weights.cuda(), codes[0],
                        codes[1], w13_scales.cuda(), w2_scales.cuda(),
                        *statics, output])
    torch.cuda.synchronize()
    cpp = reference.fused_experts_fp8(
        scaling, block, spec["activation"], "bf16", hidden, ids, weights,
        w13_codes, w13_scales, w2_codes, w2_scales, input_scales)
    values = [reference.from_e4m3(codes).to(device)
              for codes in (w13_codes, w2_codes)]
    scales = [scales.to(device) for scales in (w13_scales, w2_scales)]

    def w2_of(expert):
        return dequantized(values[1], scales[1], scaling, block, expert)

    activated, bf16 = fp8.experts_reference(
        hidden.to(device), ids.to(device), weights.to(device), experts,
        lambda expert: dequantized(values[0], scales[0], scaling, block,
                                   expert),
        w2_of, block if scaling == "block" else None,
        (None, None) if input_scales is None else input_scales.split(1),
        spec["activation"])
    gpu = fp8.check(output.to(device), activated, w2_of)
    cpp = fp8.check(cpp.to(device), activated, w2_of)
    return gpu, cpp, relative_errors(cpp.reference, bf16)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default="build-runtime")
    parser.add_argument("--bundles", default="out/gpu-bundles")
    parser.add_argument("--tokens",
                        help="comma-separated token counts (default: the "
                             "bundle's \"tokens\", else 1,7,64,1000)")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--only", default="",
                        help="comma-separated bundle names (default: all)")
    parser.add_argument("--reference-device", default="cuda",
                        help="where the float64 reference runs (cpu keeps "
                             "its kernels out of a sanitizer's way)")
    args = parser.parse_args()
    print(f"fp8_test: seed {args.seed}", flush=True)
    generator = torch.Generator().manual_seed(args.seed)
    reference = Reference(args.build)
    failed = 0
    for spec in load_specs(args.bundles):
        if spec["kind"] != "fp8-experts" or (
                args.only and spec["name"] not in args.only.split(",")):
            continue
        bundle = Bundle(bundle_path(args.bundles, spec))
        token_counts = args.tokens or spec.get("tokens", "1,7,64,1000")
        for tokens in map(int, token_counts.split(",")):
            gpu, cpp, to_bf16 = check(bundle, spec, reference, tokens,
                                      generator, args.reference_device)
            passed = gpu.passed and cpp.passed
            print(f"{spec['name']:20} T={tokens:<5} "
                  f"{'PASS' if passed else 'FAIL'} GPU: {gpu.summary()}; "
                  f"C++ reference: {cpp.summary()}; bf16 layer on the "
                  f"dequantized weights {to_bf16:.2e}", flush=True)
            failed += not passed
        bundle.close()
    print("fp8_test: " + ("all passed" if not failed
                          else f"{failed} case(s) failed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
