#!/usr/bin/env python3
"""GPU test of whole layers: every layer bundle of bundles.json (router,
route, both grouped matmuls, combine) runs on the GPU and must match the
plain C++ reference of moe.fused_moe (intermediates rounded to the layer's
element type, as the op stores them) on fresh random inputs, output poisoned
first: max |error| over max |reference| within 1e-5 (f32), 4e-3 (f16) or
2e-2 (bf16). Every experts bundle (moe.fused_experts: the layer given its
routing) must match the reference of moe.fused_experts the same way on
random ids of which about one slot in 8 is out of range (-1, E, or the
int32 extremes) and about one token in 8 names an expert twice, with the
workspaces of the previous run left in place (stale rows must not leak
into slots that get none). gpt-oss's bundles ("expert_biases", "swiglu")
take the experts' biases after the other operands, the first's spanning
+-2 limit so that the clamped SwiGLU's clamps act; a bundle's own "tokens"
are its default. Full-size layers ("full": run only when --only names them)
are checked against a float64 torch reference on the GPU instead (routing
from the C++ reference's moe.gate, which the GPU gate matches bit for bit),
their weights drawn on the GPU. Exits non-zero on any mismatch."""

import argparse
import sys
import time

import torch

from moe_mlir import Bundle
from moe_mlir.testing.bundles import bundle_path, load_specs
from moe_mlir.testing.gemm import gated
from moe_mlir.testing.reference import Reference
from moe_mlir.testing.tensors import poisoned, relative_errors, uniform
from moe_mlir.torch import TORCH_DTYPES

TOLERANCE = {"f32": 1e-5, "f16": 4e-3, "bf16": 2e-2}


def expert_weights(generator, spec, dtype):
    """w13 [E, 2I, H] and w2 [E, H, I], scaled by 1/sqrt(fan-in), on the
    generator's device."""
    stored = spec["router"]["experts"] + spec["router"]["shared"]
    hidden_size, intermediate = spec["hidden"], spec["intermediate"]
    w13 = uniform(generator, stored, 2 * intermediate, hidden_size,
                  scale=hidden_size ** -0.5).to(dtype)
    w2 = uniform(generator, stored, hidden_size, intermediate,
                 scale=intermediate ** -0.5).to(dtype)
    return w13, w2


def expert_biases(generator, spec, dtype):
    """The experts' biases of a gpt-oss bundle, w13's [E, 2I] within +-2
    limit (both clamps act) and w2's [E, H] within +-1, or []."""
    if not spec.get("expert_biases"):
        return []
    stored = spec["router"]["experts"] + spec["router"]["shared"]
    limit = spec["swiglu"][1] if "swiglu" in spec else 0.5
    return [uniform(generator, stored, 2 * spec["intermediate"],
                    scale=2 * limit).to(dtype),
            uniform(generator, stored, spec["hidden"]).to(dtype)]


def reference_epilogue(spec, biases):
    """The reference's keyword arguments for the bundle's activation and
    expert biases."""
    swiglu = tuple(spec["swiglu"]) if "swiglu" in spec else None
    return {"biases": tuple(biases) or (None, None), "swiglu": swiglu}


def float64_experts(spec, hidden, ids, weights, w13, w2, biases):
    """The experts in float64 on the GPU, per expert: sum over slots of
    weight * (gated(x w13[e]^T + b13[e]) w2[e]^T + b2[e])."""
    swiglu = tuple(spec["swiglu"]) if "swiglu" in spec else None
    tokens, slots = ids.shape
    flat = ids.reshape(-1).long().cuda()
    scale = weights.reshape(-1).double().cuda()
    output = torch.zeros(tokens, hidden.shape[1], dtype=torch.float64,
                         device="cuda")
    for expert in flat.unique().tolist():
        slot = (flat == expert).nonzero().view(-1)
        h = hidden[slot // slots].double() @ w13[expert].double().T
        if biases:
            h += biases[0][expert].double()
        y = gated(h, swiglu) @ w2[expert].double().T
        if biases:
            y += biases[1][expert].double()
        output.index_add_(0, slot // slots, y * scale[slot].unsqueeze(1))
    return output.cpu()


def given_routing(generator, tokens, slots, experts):
    """Ids in [0, E) with about one slot in 8 out of range and one token in
    8 repeating its first expert, and weights in [0, 1)."""
    ids = torch.randint(0, experts, (tokens, slots), generator=generator,
                        dtype=torch.int32)
    out_of_range = torch.tensor([-1, experts, -2 ** 31, 2 ** 31 - 1],
                                dtype=torch.int32)
    drop = torch.rand(tokens, slots, generator=generator) < 0.125
    choice = torch.randint(0, len(out_of_range), (tokens, slots),
                           generator=generator)
    ids = torch.where(drop, out_of_range[choice], ids)
    if slots > 1:
        repeat = torch.rand(tokens, generator=generator) < 0.125
        ids[:, 1] = torch.where(repeat, ids[:, 0], ids[:, 1])
    weights = torch.rand(tokens, slots, generator=generator)
    return ids, weights


def check_output(output, expected, spec):
    """'' when `output` matches `expected` within the dtype's tolerance,
    else why not."""
    actual = output.cpu()
    if not torch.isfinite(actual.float()).all():
        return "output not finite (unwritten rows?)"
    relative, _ = relative_errors(actual, expected)
    if relative > TOLERANCE[spec["dtype"]]:
        return f"max |error| / max |reference| {relative:.3g}"
    return ""


def check_experts(bundle, spec, reference, tokens, generator):
    """One run of an experts bundle on random given routing."""
    dtype = TORCH_DTYPES[spec["dtype"]]
    router = spec["router"]
    hidden = uniform(generator, tokens, spec["hidden"]).to(dtype)
    w13, w2 = expert_weights(generator, spec, dtype)
    biases = expert_biases(generator, spec, dtype)
    ids, weights = given_routing(generator, tokens,
                                 router["top_k"] + router["shared"],
                                 w13.shape[0])
    output = poisoned((tokens, spec["hidden"]), dtype)
    bundle.run(tokens, [tensor.cuda() for tensor in
                        [hidden, ids, weights, w13, w2] + biases] + [output])
    torch.cuda.synchronize()
    expected = reference.fused_experts(spec["activation"], spec["dtype"],
                                       hidden, ids, weights, w13, w2,
                                       **reference_epilogue(spec, biases))
    return check_output(output, expected, spec)


def check(bundle, spec, reference, tokens, generator, weights_generator):
    """One run of a layer bundle; full-size layers draw their weights from
    `weights_generator` (the GPU's) and take the float64 reference."""
    router, dtype = spec["router"], TORCH_DTYPES[spec["dtype"]]
    experts = router["experts"]
    hidden_size = spec["hidden"]
    hidden = uniform(generator, tokens, hidden_size).to(dtype)
    logits = uniform(generator, tokens, experts, scale=2.0)
    full = spec.get("full", False)
    w13, w2 = expert_weights(weights_generator if full else generator, spec,
                             dtype)
    biases = expert_biases(generator, spec, dtype)
    bias = (uniform(generator, experts, scale=0.1) if router["bias"]
            else None)
    inputs = ([hidden, logits, w13, w2] + ([bias] if bias is not None else [])
              + biases)
    output = poisoned((tokens, hidden_size), dtype)
    bundle.run(tokens, [tensor.cuda() for tensor in inputs] + [output])
    torch.cuda.synchronize()

    if full:
        weights, ids = reference.gate(router, logits, bias)
        expected = float64_experts(spec, hidden.cuda(), ids, weights, w13, w2,
                                   [b.cuda() for b in biases])
        return check_output(output, expected, spec)
    expected = reference.fused_moe(router, spec["activation"], spec["dtype"],
                                   hidden, logits, bias, w13, w2,
                                   **reference_epilogue(spec, biases))
    return check_output(output, expected, spec)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default="build-runtime")
    parser.add_argument("--bundles", default="out/gpu-bundles")
    parser.add_argument("--tokens",
                        help="T,... (default: a bundle's own, else "
                        "1,7,128,1000)")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--only", default="",
                        help="comma-separated bundle names (default: all)")
    args = parser.parse_args()
    print(f"layer_test: seed {args.seed}", flush=True)
    generator = torch.Generator().manual_seed(args.seed)
    weights_generator = torch.Generator("cuda").manual_seed(args.seed)
    reference = Reference(args.build)
    only = args.only.split(",") if args.only else []
    failed = 0
    for spec in load_specs(args.bundles):
        if spec["kind"] not in ("layer", "experts") or (
                spec["name"] not in only
                if only or spec.get("full") else False):
            continue
        bundle = Bundle(bundle_path(args.bundles, spec))
        tokens_list = args.tokens or spec.get("tokens", "1,7,128,1000")
        for tokens in map(int, tokens_list.split(",")):
            if spec["kind"] == "layer":
                failure = check(bundle, spec, reference, tokens, generator,
                                weights_generator)
            else:
                failure = check_experts(bundle, spec, reference, tokens,
                                        generator)
            print(f"{spec['name']:16} T={tokens:<5} "
                  f"{'FAIL ' + failure if failure else 'PASS'}", flush=True)
            failed += bool(failure)
        bundle.close()
    print("layer_test: " + ("all passed" if not failed
                            else f"{failed} case(s) failed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
