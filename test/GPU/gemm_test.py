#!/usr/bin/env python3
"""GPU test of the grouped-matmul bundles (moe-compile --part gemm1|gemm2,
and the awkward sizes of test/GPU/Inputs/gemm*-odd.mlir): every gemm bundle
of bundles.json that is not a benchmark's runs on fresh random inputs (never
zeros) with routing operands from the C++ reference of moe.route, output
poisoned with NaN first, and must match a float64 torch reference computed
per slot from the ids (not from the kernel's expert blocks): every row that
holds a slot finite, and max |error| / max |reference| and ||error|| /
||reference|| within 1e-2 (bf16) or 4e-3 (f16). Cases: T = 1, 7, 1000 with
experts drawn uniformly, and T = 128, 1000 with all tokens on top_k + 1
experts (most experts get no rows, the others several blocks); a bundle's
own "cases" where bundles.json gives them. A bundle with "bias" takes the
grouped matmul's bias [E, N] after the routing operands (and the routed
weights), and "swiglu" (alpha, limit) names the clamped SwiGLU in place of
SiLU-and-mul; the first GEMM's bias spans +-2 limit, so that both clamps
act. A bundle with "replay" is then captured in a CUDA graph and replayed
twice on outputs poisoned again, which must equal the first call's bit for
bit (stream-K: the counters zeroed by every call, graph or not, and the
parts summed in a fixed order). Exits non-zero on any mismatch."""

import argparse
import sys
import time

import torch

from moe_mlir import Bundle
from moe_mlir.testing.bundles import bundle_path, load_specs
from moe_mlir.testing.gemm import (gemm1_reference, gemm2_reference,
                                   random_ids, route, valid_rows)
from moe_mlir.testing.reference import Reference
from moe_mlir.testing.tensors import poisoned, relative_errors, uniform
from moe_mlir.torch import TORCH_DTYPES

TOLERANCE = {"bf16": 1e-2, "f16": 4e-3}
DEVICE = "cuda"
CASES = "1:uniform,7:uniform,128:skewed,1000:uniform,1000:skewed"


def check(bundle, spec, reference, tokens, mode, generator):
    dtype = TORCH_DTYPES[spec["dtype"]]
    experts, slots = spec["experts"], spec["slots"]
    hidden, inter = spec["hidden"], spec["intermediate"]
    ids = random_ids(tokens, spec, generator, mode)
    sorted_ids, expert_ids, num_padded = route(reference, ids, spec)
    capacity = sorted_ids.numel()
    routing = [sorted_ids.to(DEVICE), expert_ids.to(DEVICE),
               num_padded.to(DEVICE)]
    empty = experts - len(ids.unique())
    note = f"{empty:3} of {experts} experts empty"

    swiglu = spec.get("swiglu")
    if spec["part"] == "gemm1":
        x = uniform(generator, tokens, hidden).to(dtype)
        w13 = uniform(generator, experts, 2 * inter, hidden,
                      scale=2 * hidden ** -0.5).to(dtype)
        bias = (uniform(generator, experts, 2 * inter,
                        scale=2 * swiglu[1] if swiglu else 1.0).to(dtype)
                if spec.get("bias") else None)
        output = poisoned((capacity, inter), dtype, DEVICE)
        inputs = [x.to(DEVICE), w13.to(DEVICE)] + routing
        expected = gemm1_reference(x, w13, ids, bias=bias, swiglu=swiglu)
    else:
        rows = uniform(generator, capacity, inter).to(dtype)
        w2 = uniform(generator, experts, hidden, inter,
                     scale=2 * inter ** -0.5).to(dtype)
        weights = uniform(generator, tokens, slots, low=0.1)
        bias = (uniform(generator, experts, hidden).to(dtype)
                if spec.get("bias") else None)
        output = poisoned((tokens, slots, hidden), dtype, DEVICE)
        inputs = [rows.to(DEVICE), w2.to(DEVICE)] + routing + [
            weights.to(DEVICE)]
        expected = gemm2_reference(rows, w2, ids, sorted_ids, weights,
                                   bias=bias)
    if bias is not None:
        inputs.append(bias.to(DEVICE))

    shapes = [tuple(info.shape) for info in bundle.tensors(tokens)]
    given = [tuple(tensor.shape) for tensor in inputs + [output]]
    if shapes != given:
        return f"manifest shapes {shapes}, test built {given}", note
    poison = output.clone()
    bundle.run(tokens, inputs + [output])
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    actual = output.cpu()
    if spec.get("replay") and not replays_alike(bundle, tokens, inputs,
                                                output, poison):
        return "a CUDA-graph replay differs from the first call", note

    if spec["part"] == "gemm1":
        row, slot = valid_rows(sorted_ids, tokens * slots)
        if not torch.equal(slot.sort().values, torch.arange(tokens * slots)):
            return "route: the padded rows do not hold every slot once", note
        actual, expected = actual[row], expected[slot]
    else:
        actual = actual.view(tokens * slots, hidden)
    if not torch.isfinite(actual.float()).all():
        bad = int((~torch.isfinite(actual.float())).any(dim=1).sum())
        return f"{bad} of {actual.shape[0]} rows not finite (unwritten?)", note
    worst, norm = relative_errors(actual, expected)
    note += f", error max {worst:.2e} norm {norm:.2e}"
    if max(worst, norm) > TOLERANCE[spec["dtype"]]:
        return f"error beyond {TOLERANCE[spec['dtype']]:g}", note
    return "", note


def replays_alike(bundle, tokens, inputs, output, poison):
    """Whether two replays of the call captured in a CUDA graph, each on
    `output` poisoned again, leave exactly what the first call left."""
    first = output.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        bundle.run(tokens, inputs + [output])
    for _ in range(2):
        output.copy_(poison)
        graph.replay()
        torch.cuda.synchronize()
        if not torch.equal(output.view(torch.uint8), first.view(torch.uint8)):
            return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default="build-runtime")
    parser.add_argument("--bundles", default="out/gpu-bundles")
    parser.add_argument("--cases",
                        help="T:mode,... with mode uniform or skewed "
                        f"(default: a bundle's own, else {CASES})")
    parser.add_argument("--only", default="",
                        help="comma-separated bundle names (default: all)")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    print(f"gemm_test: seed {args.seed}", flush=True)
    generator = torch.Generator().manual_seed(args.seed)
    reference = Reference(args.build)
    def cases(spec):
        text = args.cases or spec.get("cases", CASES)
        return [(int(tokens), mode) for tokens, mode in
                (case.split(":") for case in text.split(","))]
    failed = passed = 0
    for spec in load_specs(args.bundles):
        if spec["kind"] != "gemm" or spec.get("bench"):
            continue
        if args.only and spec["name"] not in args.only.split(","):
            continue
        bundle = Bundle(bundle_path(args.bundles, spec))
        for tokens, mode in cases(spec):
            failure, note = check(bundle, spec, reference, tokens, mode,
                                  generator)
            print(f"{spec['name']:20} T={tokens:<5} {mode:8} "
                  f"{'FAIL ' + failure if failure else 'PASS'}  ({note})",
                  flush=True)
            failed += bool(failure)
            passed += not failure
        bundle.close()
    print(f"gemm_test: {passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
