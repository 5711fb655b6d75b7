#!/usr/bin/env python3
"""GPU test of the moe_mlir package on torch tensors.

- moe_mlir.Bundle on routing-deepseek (bundles.json): tensors() as its
  manifest declares them, outputs bit-identical to the C++ reference with
  torch tensors passed through data_ptr(), and to that run with tensors
  passed through DLPack and raw pointers (on a side stream), replays of a
  CUDA graph bit-identical to the reference; wrong tensors raise.
- moe_mlir.torch.FusedMoE on each of LAYERS against a torch reference of the
  layer (float64 on the host, from DESIGN.md's semantics): max |error| over
  max |reference| within TOLERANCE, with torch's sync debug mode set to
  "error" around forward; captured in a CUDA graph and replayed on new
  inputs, equal to eager runs; its argument checks raise TypeError or
  ValueError, and a capture before the bundle is loaded RuntimeError.
  Tokens whose routing the reference decides by less than TIE_MARGIN
  (relative to the token's largest selection score) are left out of the
  comparison: float32 on the GPU may decide them the other way (the routing
  tests check ties bit-exactly).

The GPU machine has no compiler, so the FusedMoE bundles come from here:
    /usr/bin/python3 test/GPU/python_test.py --prepare   # here, with MLIR
    PYTHONPATH=build-runtime/python python3 test/GPU/python_test.py  # there
(scripts/gpu-run.sh runs the second). Exits non-zero on any failure.
"""

import copy
import sys
import warnings

import moe_mlir
from moe_mlir.testing.bundles import bundle_path, load_specs
from moe_mlir.testing.results import module_test_main

try:
    import torch
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

LAYERS = {
    "mixtral-like-bf16": (moe_mlir.Layer(
        256, 128, 8, moe_mlir.Router("softmax", 2, renormalize=True)),
        "bf16"),
    "deepseek-reduced-bf16": (moe_mlir.Layer(
        224, 64, 256,
        moe_mlir.Router("sigmoid", 8, num_groups=8, topk_groups=4,
                        renormalize=True, routed_scaling_factor=2.5,
                        num_shared_experts=1),
        correction_bias=True), "bf16"),
    "qwen-like-f16": (moe_mlir.Layer(
        64, 32, 128, moe_mlir.Router("softmax", 8, renormalize=True)), "f16"),
    "softmax-f32": (moe_mlir.Layer(
        64, 48, 16, moe_mlir.Router("softmax", 4)), "f32"),
}
TOKENS_MAX = 1024
TOKEN_COUNTS = (1, 7, 64, 1000)
TOLERANCE = {"f32": 1e-5, "f16": 4e-3, "bf16": 2e-2}
TIE_MARGIN = 1e-5
ROUTING_BUNDLE = "routing-deepseek"


def prepare(cache_dir):
    """Compiles the bundles FusedMoE will look for (no torch needed)."""
    for name, (layer, dtype) in LAYERS.items():
        path = moe_mlir.layer_bundle(layer, dtype, cache_dir=cache_dir,
                                     tokens_max=TOKENS_MAX)
        print(f"{name}: {path}")


class DlpackOnly:
    """A tensor seen only through the DLPack protocol, as a non-torch
    producer (CuPy, JAX) would hand it over."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, stream=None):
        return self.tensor.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def routing_tensors(spec, tokens):
    """(name, role, dtype, shape) of each tensor of routing bundle `spec`
    at `tokens` tokens, as moe-compile declares them in the manifest: the
    logits, the correction bias, the rows to combine; the weights and ids,
    moe.route's sorted slots, block experts and padded count, and the
    combined rows."""
    router, block_m = spec["router"], spec["block_m"]
    experts, hidden = router["experts"], spec["hidden"]
    slots = router["top_k"] + router["shared"]
    capacity = tokens * slots + (experts + router["shared"]) * (block_m - 1)
    return [("arg0", "input", spec["logits"], (tokens, experts)),
            ("arg1", "input", "f32", (experts,)),
            ("arg2", "input", spec["rows"], (tokens, slots, hidden)),
            ("result0", "output", "f32", (tokens, slots)),
            ("result1", "output", "i32", (tokens, slots)),
            ("result2", "output", "i32", (capacity,)),
            ("result3", "output", "i32", (-(-capacity // block_m),)),
            ("result4", "output", "i32", ()),
            ("result5", "output", spec["rows"], (tokens, hidden))]


def test_bundle(results, args, generator):
    from moe_mlir.testing.reference import Reference
    from moe_mlir.testing.routing import routing_mismatches
    from moe_mlir.testing.tensors import poisoned_outputs, same_bits

    spec, = (spec for spec in load_specs(args.bundles)
             if spec["name"] == ROUTING_BUNDLE)
    reference = Reference(args.build)
    bundle = moe_mlir.Bundle(bundle_path(args.bundles, spec))
    tokens = 300
    infos = [tuple(info) for info in bundle.tensors(tokens)]
    results.check("Bundle.tensors lists the manifest's tensors",
                  infos == routing_tensors(spec, tokens), f"{infos}")
    bounds = bundle.variants
    results.check("Bundle.variants: increasing up to tokens_max",
                  bounds[-1] == bundle.tokens_max
                  and bounds == sorted(set(bounds)), f"{bounds}")
    results.check("Bundle.variant_for: the first variant that serves T",
                  all(bundle.variant_for(count)
                      == next(i for i, bound in enumerate(bounds)
                              if bound >= count)
                      for count in (1, 2, tokens, bundle.tokens_max)),
                  f"{bounds}")
    results.raises("Bundle.variant_for: beyond tokens_max", moe_mlir.Error,
                   lambda: bundle.variant_for(bundle.tokens_max + 1))

    def inputs(count):
        logits = torch.randn(count, 256, generator=generator) * 2
        bias = torch.randn(256, generator=generator) * 0.1
        rows = torch.randn(count, 9, 224, generator=generator)
        return [logits.cuda(), bias.cuda(), rows.to(torch.bfloat16).cuda()]

    tensors = inputs(tokens)
    expected = poisoned_outputs(bundle, tokens)
    bundle.run(tokens, tensors + expected)
    torch.cuda.synchronize()
    failures = routing_mismatches(reference, spec, *tensors, expected)
    results.check("Bundle.run on torch tensors matches the reference",
                  not failures, "; ".join(failures))

    outputs = poisoned_outputs(bundle, tokens)
    bundle.run(tokens, [DlpackOnly(tensor) for tensor in tensors + outputs])
    torch.cuda.synchronize()
    results.check("Bundle.run through DLPack", same_bits(outputs, expected))

    outputs = poisoned_outputs(bundle, tokens)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    raw = [(tensor.data_ptr(), info.dtype, tuple(tensor.shape))
           for tensor, info in zip(tensors + outputs,
                                   bundle.tensors(tokens))]
    bundle.run(tokens, raw, stream=side.cuda_stream)
    side.synchronize()
    results.check("Bundle.run on raw pointers and a side stream",
                  same_bits(outputs, expected))

    # A CUDA graph of one run, replayed on new inputs.
    static_inputs, static_outputs = inputs(64), poisoned_outputs(bundle, 64)
    bundle.run(64, static_inputs + static_outputs)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        bundle.run(64, static_inputs + static_outputs)
    failures = []
    for _ in range(2):
        fresh = inputs(64)
        for static, new in zip(static_inputs, fresh):
            static.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        failures += routing_mismatches(reference, spec, *fresh,
                                       static_outputs)
    results.check("Bundle.run captured in a CUDA graph matches the "
                  "reference", not failures, "; ".join(failures))

    results.raises("Bundle.run: host tensor", ValueError, lambda: bundle.run(
        tokens, [tensors[0].cpu()] + tensors[1:] + outputs))
    results.raises("Bundle.run: dtype no bundle takes", TypeError,
                   lambda: bundle.run(tokens, [tensors[0].double()]
                                      + tensors[1:] + outputs))
    results.raises("Bundle.run: not contiguous", ValueError,
                   lambda: bundle.run(tokens, [tensors[0].t()]
                                      + tensors[1:] + outputs))
    results.raises("Bundle.run: wrong dims", moe_mlir.Error,
                   lambda: bundle.run(tokens, [torch.empty(
                       tokens, 255, device="cuda")] + tensors[1:] + outputs))
    results.raises("Bundle.run: wrong tensor count", moe_mlir.Error,
                   lambda: bundle.run(tokens, tensors))
    results.raises("Bundle.run: beyond tokens_max", moe_mlir.Error,
                   lambda: bundle.run(bundle.tokens_max + 1,
                                      tensors + outputs))
    torch.cuda.synchronize()
    bundle.close()


def reference_routing(router, logits, bias):
    """(weights, ids, margin) per token, in float64 on the host: margin is
    the smallest gap at a routing decision (k-th vs next expert, kept vs
    dropped group) over the token's largest selection score."""
    tokens, experts = logits.shape
    if router.scoring == "softmax":
        scores = torch.softmax(logits, dim=1)
    else:
        scores = torch.sigmoid(logits)
    selection = scores + bias if bias is not None else scores.clone()
    scale = selection.abs().amax(dim=1).clamp_min(1e-30)
    margin = torch.full((tokens,), float("inf"), dtype=torch.float64)
    if router.num_groups > 1:
        grouped = selection.view(tokens, router.num_groups, -1)
        group_scores = grouped.topk(2, dim=2).values.sum(dim=2)
        ordered, order = group_scores.sort(dim=1, descending=True,
                                           stable=True)
        if router.topk_groups < router.num_groups:
            margin = torch.minimum(margin,
                                   ordered[:, router.topk_groups - 1]
                                   - ordered[:, router.topk_groups])
        dropped = order[:, router.topk_groups:]
        mask = torch.zeros_like(group_scores, dtype=torch.bool)
        mask.scatter_(1, dropped, True)
        selection = selection.masked_fill(
            mask.repeat_interleave(experts // router.num_groups, dim=1),
            float("-inf"))
    ordered, order = selection.sort(dim=1, descending=True, stable=True)
    ids = order[:, :router.top_k]
    if router.top_k < experts:
        gap = ordered[:, router.top_k - 1] - ordered[:, router.top_k]
        margin = torch.minimum(margin, gap)
    margin = margin / scale
    weights = scores.gather(1, ids)
    if router.renormalize:
        weights = weights / (weights.sum(dim=1, keepdim=True) + 1e-20)
    weights = weights * router.routed_scaling_factor
    shared = torch.arange(experts, experts + router.num_shared_experts)
    ids = torch.cat([ids, shared.expand(tokens, -1)], dim=1)
    weights = torch.cat(
        [weights, torch.ones(tokens, router.num_shared_experts,
                             dtype=torch.float64)], dim=1)
    return weights, ids, margin


def reference_layer(layer, hidden, logits, w13, w2, bias):
    """The layer in float64 on the host, and each token's routing margin:
    y[t] = sum over slots of weight * w2[e] @ (silu(g) * u), (g, u) the
    halves of w13[e] @ x[t]."""
    hidden, logits, w13, w2 = (tensor.cpu().double()
                               for tensor in (hidden, logits, w13, w2))
    bias = bias.cpu().double() if bias is not None else None
    weights, ids, margin = reference_routing(layer.router, logits, bias)
    intermediate = layer.intermediate_size
    output = torch.zeros(hidden.shape, dtype=torch.float64)
    for expert in ids.unique().tolist():
        token, slot = (ids == expert).nonzero(as_tuple=True)
        h = hidden[token] @ w13[expert].T
        activated = torch.nn.functional.silu(h[:, :intermediate]) * (
            h[:, intermediate:])
        output.index_add_(0, token,
                          (activated @ w2[expert].T)
                          * weights[token, slot, None])
    return output, margin


def compare(layer, dtype, output, hidden, logits, moe):
    """('' if `output` matches the reference, else why not; what was left
    out)."""
    bias = moe.correction_bias
    expected, margin = reference_layer(layer, hidden, logits, moe.w13,
                                       moe.w2, bias)
    actual = output.cpu().double()
    clear = margin > TIE_MARGIN
    skipped = f"{int((~clear).sum())} near-tie token(s) left out"
    if not torch.isfinite(actual).all():
        return "output not finite", skipped
    if not clear.any():
        return "no token routes clearly", skipped
    error = (actual - expected)[clear].abs().max().item()
    scale = expected[clear].abs().max().item()
    relative = error / max(scale, 1e-30)
    if relative > TOLERANCE[dtype]:
        return f"max |error| {error:.3g}, relative {relative:.3g}", skipped
    return "", skipped


def test_fused_moe(results, args, generator):
    from moe_mlir.testing.tensors import bits, uniform
    from moe_mlir.torch import FusedMoE, TORCH_DTYPES, unload_bundles

    for name, (layer, dtype) in LAYERS.items():
        torch_dtype = TORCH_DTYPES[dtype]
        moe = FusedMoE(layer=layer, dtype=torch_dtype, device="cuda",
                       cache_dir=args.cache, tokens_max=TOKENS_MAX)
        with torch.no_grad():
            moe.w13.copy_(uniform(generator, *layer.w13_shape,
                                  scale=layer.hidden_size ** -0.5))
            moe.w2.copy_(uniform(generator, *layer.w2_shape,
                                 scale=layer.intermediate_size ** -0.5))
            if moe.correction_bias is not None:
                moe.correction_bias.copy_(uniform(generator,
                                                  layer.num_experts,
                                                  scale=0.1))

        def inputs(tokens):
            return (uniform(generator, tokens, layer.hidden_size)
                    .to(torch_dtype).cuda(),
                    uniform(generator, tokens, layer.num_experts,
                            scale=2.0).cuda())

        def routable_inputs(tokens):
            # Tokens whose routing is a near-tie are left out of the
            # comparison; a draw where all of them tie (likely at T=1) would
            # leave nothing to compare, so draw again.
            bias = (moe.correction_bias.cpu().double()
                    if moe.correction_bias is not None else None)
            for _ in range(20):
                hidden, logits = inputs(tokens)
                margin = reference_routing(layer.router,
                                           logits.cpu().double(), bias)[2]
                if (margin > TIE_MARGIN).any():
                    return hidden, logits
            raise RuntimeError(f"20 draws of {tokens} token(s) all tie")

        for tokens in TOKEN_COUNTS:
            hidden, logits = routable_inputs(tokens)
            with warnings.catch_warnings():  # "a prototype feature"
                warnings.simplefilter("ignore", UserWarning)
                torch.cuda.set_sync_debug_mode("error")
            try:
                output = moe(hidden, logits)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
            failure, skipped = compare(layer, dtype, output, hidden, logits,
                                       moe)
            results.check(f"FusedMoE {name} T={tokens}", not failure,
                          failure or skipped)

        # Graph capture, once the bundle is loaded (it is, from above).
        static_hidden, static_logits = inputs(64)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_output = moe(static_hidden, static_logits)
        failures = []
        for _ in range(2):
            hidden, logits = inputs(64)
            static_hidden.copy_(hidden)
            static_logits.copy_(logits)
            graph.replay()
            eager = moe(hidden, logits)
            torch.cuda.synchronize()
            if not torch.equal(bits(static_output), bits(eager)):
                failures.append("replay differs from eager")
            failure, _ = compare(layer, dtype, static_output, hidden, logits,
                                 moe)
            if failure:
                failures.append(failure)
        results.check(f"FusedMoE {name} CUDA graph", not failures,
                      "; ".join(failures))

    # The checks of forward, on the last layer (f32).
    hidden, logits = inputs(5)
    results.raises("FusedMoE: hidden size", ValueError,
                   lambda: moe(hidden[:, 1:], logits))
    results.raises("FusedMoE: token counts", ValueError,
                   lambda: moe(hidden, logits[1:]))
    results.raises("FusedMoE: hidden dtype", TypeError,
                   lambda: moe(hidden.half(), logits))
    results.raises("FusedMoE: integer logits", TypeError,
                   lambda: moe(hidden, logits.int()))
    results.raises("FusedMoE: host tensors", ValueError,
                   lambda: moe(hidden.cpu(), logits.cpu()))
    results.raises("FusedMoE: logits on another device", ValueError,
                   lambda: moe(hidden, logits.cpu()))
    results.raises("FusedMoE: beyond tokens_max", ValueError,
                   lambda: moe(*inputs(TOKENS_MAX + 1)))
    results.raises("FusedMoE: not a tensor", TypeError,
                   lambda: moe(hidden.tolist(), logits))
    empty = moe(hidden[:0], logits[:0])
    results.check("FusedMoE: no tokens", empty.shape == (0, layer.hidden_size))
    bf16_logits = moe(hidden, logits.to(torch.bfloat16))
    torch.cuda.synchronize()
    results.check("FusedMoE: bf16 logits are read as float32",
                  torch.equal(bf16_logits,
                              moe(hidden, logits.to(torch.bfloat16).float())))
    results.raises("FusedMoE: conflicting arguments", ValueError,
                   lambda: FusedMoE(8, 64, 32, 2, preset="deepseek-v3"))
    results.raises("FusedMoE: unsupported dtype", TypeError,
                   lambda: FusedMoE(layer=layer, dtype=torch.float64,
                                    cache_dir=args.cache))

    # A copy loads its own bundle and computes the same.
    copied = copy.deepcopy(moe)
    results.check("FusedMoE: a deep copy runs",
                  torch.equal(copied(hidden, logits), moe(hidden, logits)))

    converted = FusedMoE(layer=layer, dtype=torch.float32, device="cuda",
                         cache_dir=args.cache,
                         tokens_max=TOKENS_MAX).half()
    results.raises("FusedMoE: parameters converted after construction",
                   TypeError, lambda: converted(hidden, logits))

    # A module whose bundle is not loaded yet cannot load it while
    # capturing. Modules of one layer share its loaded bundle, so unload
    # the one the module above loaded.
    fresh = FusedMoE(layer=layer, dtype=torch.float32, device="cuda",
                     cache_dir=args.cache, tokens_max=TOKENS_MAX)
    unload_bundles()

    def capture_first_forward():
        # The capture ends empty, which torch warns about.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                fresh(hidden, logits)

    results.raises("FusedMoE: first forward under capture", RuntimeError,
                   capture_first_forward)
    torch.cuda.synchronize()


def run(results, args):
    """The checks on the GPU."""
    print(f"python_test: seed {args.seed}", flush=True)
    generator = torch.Generator().manual_seed(args.seed)
    test_bundle(results, args, generator)
    test_fused_moe(results, args, generator)


def add_arguments(parser):
    parser.add_argument("--build", default="build-runtime")
    parser.add_argument("--bundles", default="out/gpu-bundles")


def main():
    return module_test_main("python_test", __doc__, "out/gpu-bundles/python",
                            prepare, run, add_arguments)


if __name__ == "__main__":
    sys.exit(main())
