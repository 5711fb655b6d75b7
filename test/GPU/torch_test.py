#!/usr/bin/env python3
"""GPU test of moe_mlir.torch's FusedExperts and of the torch.library ops
moe_mlir::fused_moe and moe_mlir::fused_experts under torch.compile,
torch.export, FakeTensorMode and CUDA graphs.

- FusedExperts on each of EXPERT_LAYERS against a float64 torch reference of
  the experts (written here from the op's semantics) on fresh random data at
  each of TOKEN_COUNTS: max |error| over max |reference| within TOLERANCE,
  with torch's sync debug mode "error" around forward; the bundle run
  directly on a NaN-poisoned output equals forward bit for bit (every
  element written). Ids out of range (-1, E+X, 2**31, 2**32 + 1, ... in
  int64; -1, E+X, INT32_MAX, INT32_MIN in int32) add nothing, a token
  without valid ids gets exactly 0, an expert twice in a token counts
  twice. Ids of other integer types, weights of other float types and
  strided or misaligned activations give the int32/float32 result bit for
  bit. Captured in a CUDA graph and replayed on new inputs, equal to eager.
  Argument errors raise TypeError or ValueError; T = 0 gives an empty
  output; a capture before the bundle is loaded raises RuntimeError.
- The ops: torch.library.opcheck passes; under FakeTensorMode they give the
  output's shape, dtype and device without touching a bundle;
  torch.compile(fullgraph=True) of a module calling FusedMoE and
  FusedExperts equals eager bit for bit at two token counts; torch.export
  of it (static, and with T dynamic) has both ops in its graph and runs
  equal to eager.
- The README's "In PyTorch" example, run from the README itself.

The GPU machine has no compiler, so the bundles come from here:
    /usr/bin/python3 test/GPU/torch_test.py --prepare   # here, with MLIR
    PYTHONPATH=build-runtime/python python3 test/GPU/torch_test.py  # there
(scripts/gpu-run.sh runs the second). Exits non-zero on any failure.
"""

import os
import re
import sys
import warnings

import moe_mlir
from moe_mlir.testing.results import module_test_main

try:
    import torch
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

# The router fields other than top_k and num_shared_experts do not matter
# to the experts; the first layer is also the README example's
# (FusedExperts(num_experts=8, hidden_size=256, intermediate_size=128,
# top_k=2, tokens_max=1024) builds it so).
EXPERT_LAYERS = {
    "mixtral-like-bf16": (moe_mlir.Layer(
        256, 128, 8, moe_mlir.Router("softmax", 2)), "bf16"),
    "qwen-like-f16": (moe_mlir.Layer(
        64, 32, 128, moe_mlir.Router("softmax", 8)), "f16"),
    "deepseek-like-shared-bf16": (moe_mlir.Layer(
        224, 64, 256, moe_mlir.Router("softmax", 8, num_shared_experts=1)),
        "bf16"),
}
# The layer whose FusedMoE (part "layer") and FusedExperts the
# torch.compile and torch.export checks run together.
MODEL_LAYER = "mixtral-like-bf16"
TOKENS_MAX = 1024
TOKEN_COUNTS = (1, 7, 64, 300)
TOLERANCE = {"f16": 4e-3, "bf16": 2e-2}
README = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                      os.pardir, "README.md")
README_SECTION = "\n### In PyTorch: FusedExperts and the torch.library ops\n"


def prepare(cache_dir):
    """Compiles the bundles the modules will look for (no torch needed)."""
    for name, (layer, dtype) in EXPERT_LAYERS.items():
        path = moe_mlir.layer_bundle(layer, dtype, part="experts",
                                     cache_dir=cache_dir,
                                     tokens_max=TOKENS_MAX)
        print(f"{name} experts: {path}")
    layer, dtype = EXPERT_LAYERS[MODEL_LAYER]
    path = moe_mlir.layer_bundle(layer, dtype, part="layer",
                                 cache_dir=cache_dir, tokens_max=TOKENS_MAX)
    print(f"{MODEL_LAYER} layer: {path}")


def reference_experts(hidden, ids, weights, w13, w2):
    """The experts in float64 on the host: out[t] = sum over the slots s
    whose id e = ids[t, s] is in [0, E+X) of weights[t, s] * (silu(g) * u)
    w2[e]^T, (g, u) the halves of x[t] w13[e]^T; other ids add nothing and
    an id twice in a token adds twice."""
    hidden, w13, w2, weights = (tensor.detach().cpu().double()
                                for tensor in (hidden, w13, w2, weights))
    ids = ids.cpu().long()  # int64 holds the values of every id type
    intermediate = w2.shape[2]
    output = torch.zeros(hidden.shape, dtype=torch.float64)
    valid = (ids >= 0) & (ids < w13.shape[0])
    for expert in ids[valid].unique().tolist():
        token, slot = (ids == expert).nonzero(as_tuple=True)
        h = hidden[token] @ w13[expert].T
        activated = torch.nn.functional.silu(h[:, :intermediate]) * (
            h[:, intermediate:])
        output.index_add_(0, token, (activated @ w2[expert].T)
                          * weights[token, slot, None])
    return output


def within_tolerance(output, expected, dtype):
    """(passed, detail): whether ``output`` is finite and within
    TOLERANCE[dtype] of ``expected`` as max |error| over max |expected|."""
    from moe_mlir.testing.tensors import relative_errors

    actual = output.cpu().double()
    if not torch.isfinite(actual).all():
        return False, "output not finite"
    relative, _ = relative_errors(actual, expected)
    return (relative <= TOLERANCE[dtype],
            f"max |error| / max |reference| {relative:.3g} (tolerance "
            f"{TOLERANCE[dtype]})")


def routed_inputs(layer, dtype, tokens, generator):
    """Hidden states [T, H] in ``dtype`` and a routing as a caller computes
    it, all on the GPU: ids [T, S] int64 (torch.topk's) of a softmax top-k
    over random logits, the shared experts E..E+X-1 in the last slots with
    weight 1, and the weights [T, S] float32."""
    from moe_mlir.testing.tensors import uniform

    hidden = uniform(generator, tokens, layer.hidden_size).to(dtype)
    logits = uniform(generator, tokens, layer.num_experts, scale=2.0)
    weights, ids = torch.softmax(logits, dim=1).topk(layer.router.top_k,
                                                     dim=1)
    shared = torch.arange(layer.num_experts, layer.num_stored_experts)
    ids = torch.cat([ids, shared.expand(tokens, -1)], dim=1)
    weights = torch.cat([weights, torch.ones(tokens, shared.numel())], dim=1)
    return hidden.cuda(), ids.cuda(), weights.cuda()


def with_special_ids(ids, specials):
    """(ids, rows): ``ids`` [T, S] with every fourth token's second slot a
    copy of its first (one expert twice), the next token's first slot and
    every slot of the token after replaced by ``specials`` in turn (ids out
    of range); ``rows`` are those latter tokens, which no expert serves."""
    ids = ids.cpu().clone()
    specials = torch.tensor(specials, dtype=ids.dtype)
    tokens, slots = ids.shape
    ids[0::4, 1] = ids[0::4, 0]
    first = torch.arange(1, tokens, 4)
    ids[first, 0] = specials[torch.arange(first.numel()) % specials.numel()]
    rows = torch.arange(2, tokens, 4)
    ids[rows] = specials[torch.arange(rows.numel() * slots).view(-1, slots)
                         % specials.numel()]
    return ids.cuda(), rows


def forward_without_syncs(experts, *arguments):
    """``experts(*arguments)`` with torch's sync debug mode "error", so that
    a host synchronisation in forward raises."""
    with warnings.catch_warnings():  # "a prototype feature"
        warnings.simplefilter("ignore", UserWarning)
        torch.cuda.set_sync_debug_mode("error")
    try:
        return experts(*arguments)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def make_experts(layer, dtype, args, generator):
    """A FusedExperts of ``layer`` on the GPU with random weights."""
    from moe_mlir.testing.tensors import uniform
    from moe_mlir.torch import FusedExperts

    experts = FusedExperts(layer=layer, dtype=dtype, device="cuda",
                           cache_dir=args.cache, tokens_max=TOKENS_MAX)
    with torch.no_grad():
        experts.w13.copy_(uniform(generator, *layer.w13_shape,
                                  scale=layer.hidden_size ** -0.5))
        experts.w2.copy_(uniform(generator, *layer.w2_shape,
                                 scale=layer.intermediate_size ** -0.5))
    return experts


def test_experts_layer(results, name, layer, dtype_name, args, generator):
    """The checks of FusedExperts on one layer; returns the module."""
    from moe_mlir.testing.tensors import bits, poisoned
    from moe_mlir.torch import TORCH_DTYPES

    dtype = TORCH_DTYPES[dtype_name]
    experts = make_experts(layer, dtype, args, generator)
    label = f"FusedExperts {name}"

    def inputs(tokens):
        return routed_inputs(layer, dtype, tokens, generator)

    bundle = moe_mlir.Bundle(experts.bundle_path)
    for tokens in TOKEN_COUNTS:
        hidden, ids, weights = inputs(tokens)
        output = forward_without_syncs(experts, hidden, ids, weights)
        torch.cuda.synchronize()
        expected = reference_experts(hidden, ids, weights, experts.w13,
                                     experts.w2)
        results.check(f"{label} T={tokens}",
                      *within_tolerance(output, expected, dtype_name))

        direct = poisoned((tokens, layer.hidden_size), dtype)
        bundle.run(tokens, [hidden, ids.int(), weights, experts.w13,
                            experts.w2, direct])
        torch.cuda.synchronize()
        results.check(f"{label} T={tokens}: the bundle run on a NaN-"
                      "poisoned output writes forward's output",
                      torch.equal(bits(direct), bits(output)))
    bundle.close()

    tokens = 64
    hidden, ids, weights = inputs(tokens)
    stored = layer.num_stored_experts
    for id_dtype, specials in (
            (torch.int64, [-1, stored, 2 ** 31, 2 ** 32 + 1, -2 ** 32 + 2,
                           2 ** 63 - 1, -2 ** 63]),
            (torch.int32, [-1, stored, stored + 1000, 2 ** 31 - 1,
                           -2 ** 31])):
        special, rows = with_special_ids(ids.to(id_dtype), specials)
        output = experts(hidden, special, weights)
        torch.cuda.synchronize()
        expected = reference_experts(hidden, special, weights, experts.w13,
                                     experts.w2)
        passed, detail = within_tolerance(output, expected, dtype_name)
        unserved = output[rows.cuda()]
        if not torch.equal(unserved, torch.zeros_like(unserved)):
            passed, detail = False, "a token without valid ids is not 0"
        results.check(f"{label}: {id_dtype} ids out of range and repeated",
                      passed, detail)

    expected = experts(hidden, ids.int(), weights)
    misaligned = torch.empty(hidden.numel() + 1, dtype=dtype, device="cuda")
    misaligned = misaligned[1:].view(hidden.shape)
    misaligned.copy_(hidden)
    # Narrow id types where they hold every id (int8 with 128 experts: the
    # count itself is beyond int8).
    narrow = [id_dtype for id_dtype, bound in ((torch.int16, 2 ** 15),
                                               (torch.uint8, 2 ** 8),
                                               (torch.int8, 2 ** 7))
              if stored <= bound]
    variants = {
        "int64 ids": (hidden, ids, weights),
        **{f"{id_dtype} ids": (hidden, ids.to(id_dtype), weights)
           for id_dtype in narrow},
        "float64 weights": (hidden, ids, weights.double()),
        "strided hidden_states and ids": (
            torch.cat([hidden, hidden], dim=1)[:, layer.hidden_size:],
            ids.int().t().contiguous().t(), weights),
        "misaligned hidden_states": (misaligned, ids, weights),
    }
    for variant, arguments in variants.items():
        output = experts(*arguments)
        results.check(f"{label}: {variant} give int32/float32's result",
                      torch.equal(bits(output), bits(expected)))
    rounded = weights.to(torch.bfloat16)
    results.check(f"{label}: bf16 weights are read as float32",
                  torch.equal(bits(experts(hidden, ids, rounded)),
                              bits(experts(hidden, ids, rounded.float()))))

    # A CUDA graph of forward (the id conversion included), once the
    # bundle is loaded (it is, from above), replayed on new inputs.
    static = inputs(tokens)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_output = experts(*static)
    failures = []
    for _ in range(2):
        fresh = inputs(tokens)
        for tensor, new in zip(static, fresh):
            tensor.copy_(new)
        graph.replay()
        eager = experts(*fresh)
        torch.cuda.synchronize()
        if not torch.equal(bits(static_output), bits(eager)):
            failures.append("replay differs from eager")
        passed, detail = within_tolerance(
            static_output, reference_experts(*fresh, experts.w13,
                                             experts.w2), dtype_name)
        if not passed:
            failures.append(detail)
    results.check(f"{label}: CUDA graph", not failures, "; ".join(failures))
    return experts


def test_experts_errors(results, experts, args, generator):
    """FusedExperts' argument checks, on ``experts``."""
    from moe_mlir.torch import FusedExperts

    layer, dtype = experts.layer, experts.dtype
    hidden, ids, weights = routed_inputs(layer, dtype, 5, generator)
    cases = {
        "hidden size": (ValueError, (hidden[:, 1:], ids, weights)),
        "ids' slots": (ValueError, (hidden, ids[:, :1], weights)),
        "weights' token count": (ValueError, (hidden, ids, weights[1:])),
        "hidden dtype": (TypeError, (hidden.float(), ids, weights)),
        "float ids": (TypeError, (hidden, ids.float(), weights)),
        "bool ids": (TypeError, (hidden, ids.bool(), weights)),
        "integer weights": (TypeError, (hidden, ids, weights.int())),
        "host tensors": (ValueError, (hidden.cpu(), ids.cpu(),
                                      weights.cpu())),
        "ids on another device": (ValueError, (hidden, ids.cpu(), weights)),
        "beyond tokens_max": (ValueError, routed_inputs(
            layer, dtype, TOKENS_MAX + 1, generator)),
        "not a tensor": (TypeError, (hidden, ids.tolist(), weights)),
    }
    for case, (kind, arguments) in cases.items():
        results.raises(f"FusedExperts: {case}", kind,
                       lambda arguments=arguments: experts(*arguments))
    empty = experts(hidden[:0], ids[:0], weights[:0])
    results.check("FusedExperts: no tokens",
                  empty.shape == (0, layer.hidden_size)
                  and empty.dtype == dtype, f"{empty.shape} {empty.dtype}")

    def build(**options):
        return FusedExperts(**options, cache_dir=args.cache,
                            tokens_max=TOKENS_MAX)

    results.raises("FusedExperts: no top_k", ValueError,
                   lambda: build(num_experts=8, hidden_size=64,
                                 intermediate_size=32))
    results.raises("FusedExperts: sizes and a layer", ValueError,
                   lambda: build(num_experts=8, layer=layer))
    results.raises("FusedExperts: a layer that is not one", TypeError,
                   lambda: build(layer="mixtral"))
    results.raises("FusedExperts: unsupported dtype", TypeError,
                   lambda: build(layer=layer, dtype=torch.float64))
    converted = build(layer=layer, dtype=dtype, device="cuda").half()
    results.raises("FusedExperts: parameters converted after construction",
                   TypeError, lambda: converted(hidden, ids, weights))
    strided = build(layer=layer, dtype=dtype, device="cuda")
    strided.w13.data = strided.w13.data.transpose(1, 2).contiguous() \
        .transpose(1, 2)
    results.raises("FusedExperts: a weight not contiguous", ValueError,
                   lambda: strided(hidden, ids, weights))


def test_ops(results, moe, experts, generator):
    """The ops under torch.library.opcheck and FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    layer = experts.layer
    hidden, ids, weights = routed_inputs(layer, experts.dtype, 7, generator)
    logits = torch.randn(7, layer.num_experts, generator=generator).cuda()
    w13, w2 = experts.w13.detach(), experts.w2.detach()
    calls = {
        "fused_experts": (torch.ops.moe_mlir.fused_experts.default,
                          [hidden, ids.int(), weights, w13, w2],
                          experts.bundle_path),
        "fused_moe": (torch.ops.moe_mlir.fused_moe.default,
                      [hidden, logits, moe.w13.detach(), moe.w2.detach(),
                       None], moe.bundle_path),
    }
    for name, (op, tensors, path) in calls.items():
        results.opcheck(f"torch.library.opcheck(moe_mlir::{name})", op,
                        (*tensors, path))

        def fake_call():
            with FakeTensorMode() as mode:
                fakes = [mode.from_tensor(tensor) if tensor is not None
                         else None for tensor in tensors]
                # No bundle is there: the fake implementation needs none.
                output = op(*fakes, "/nonexistent/bundle.moeb")
            return (isinstance(output, FakeTensor)
                    and output.shape == hidden.shape
                    and output.dtype == hidden.dtype
                    and output.device == hidden.device,
                    f"{type(output).__name__} {list(output.shape)} "
                    f"{output.dtype} {output.device}")

        results.attempt(f"moe_mlir::{name} under FakeTensorMode", fake_call)


def test_compile_and_export(results, moe, experts, generator):
    """A module calling FusedMoE and FusedExperts under torch.compile and
    torch.export, against its eager runs."""
    from moe_mlir.testing.tensors import same_bits

    class MoeBlock(torch.nn.Module):
        """What a model holds: a whole layer (its router included) and
        experts that the caller routes."""

        def __init__(self):
            super().__init__()
            self.moe = moe
            self.experts = experts

        def forward(self, hidden_states, router_logits, topk_ids,
                    topk_weights):
            return (self.moe(hidden_states, router_logits),
                    self.experts(hidden_states, topk_ids, topk_weights))

    block = MoeBlock()
    layer = experts.layer

    def inputs(tokens):
        hidden, ids, weights = routed_inputs(layer, experts.dtype, tokens,
                                             generator)
        logits = torch.randn(tokens, layer.num_experts, generator=generator)
        return hidden, logits.cuda(), ids, weights

    def same_as_eager(run, token_counts):
        mismatches = []
        for tokens in token_counts:
            arguments = inputs(tokens)
            outputs = run(*arguments)
            eager = block(*arguments)
            torch.cuda.synchronize()
            if not same_bits(outputs, eager):
                mismatches.append(f"T={tokens} differs from eager")
        return not mismatches, "; ".join(mismatches)

    compiled = torch.compile(block, fullgraph=True)
    results.attempt("torch.compile(fullgraph=True) of FusedMoE and "
                    "FusedExperts equals eager",
                    lambda: same_as_eager(compiled, (7, 64)))

    ops = {torch.ops.moe_mlir.fused_moe.default,
           torch.ops.moe_mlir.fused_experts.default}

    def export(**options):
        exported = torch.export.export(block, inputs(64), **options)
        targets = {node.target for node in exported.graph.nodes
                   if node.op == "call_function"}
        if not ops <= targets:
            return False, f"the graph calls {sorted(map(str, targets))}"
        return same_as_eager(exported.module(), (64,) if not options
                             else (7, 300))

    results.attempt("torch.export of FusedMoE and FusedExperts: both ops "
                    "in the graph, equal to eager", export)
    tokens = torch.export.Dim("tokens", min=2, max=TOKENS_MAX)
    results.attempt("torch.export with T dynamic: both ops in the graph, "
                    "equal to eager at other T",
                    lambda: export(dynamic_shapes={
                        "hidden_states": {0: tokens},
                        "router_logits": {0: tokens},
                        "topk_ids": {0: tokens},
                        "topk_weights": {0: tokens}}))


def test_readme_example(results, args):
    """The README's example, run as it stands there. It finds its bundle in
    the default cache directory, which during the run is this test's."""
    from moe_mlir import layers

    with open(README) as file:
        readme = file.read()
    section = readme[readme.index(README_SECTION):]
    example = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)

    def run():
        namespace = {}
        default_cache_dir = layers.default_cache_dir
        layers.default_cache_dir = lambda: os.path.abspath(args.cache)
        try:
            exec(compile(example, "README.md", "exec"), namespace)
        finally:
            layers.default_cache_dir = default_cache_dir
        torch.cuda.synchronize()
        output = namespace["y"]
        return (output.shape == (16, 256) and output.dtype == torch.bfloat16,
                f"y: {list(output.shape)} {output.dtype}")

    results.attempt("the README's FusedExperts example", run)


def test_capture_before_load(results, experts, generator):
    """A capture that meets an unloaded bundle raises RuntimeError."""
    from moe_mlir.torch import unload_bundles

    arguments = routed_inputs(experts.layer, experts.dtype, 5, generator)
    unload_bundles()

    def capture_first_forward():
        # The capture ends empty, which torch warns about.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                experts(*arguments)

    results.raises("FusedExperts: first forward under capture",
                   RuntimeError, capture_first_forward)
    torch.cuda.synchronize()
    output = experts(*arguments)
    torch.cuda.synchronize()
    results.check("FusedExperts: forward after unload_bundles loads again",
                  bool(torch.isfinite(output).all()))


def run(results, args):
    """The checks on the GPU."""
    from moe_mlir.torch import FusedMoE

    print(f"torch_test: seed {args.seed}, torch {torch.__version__}",
          flush=True)
    generator = torch.Generator().manual_seed(args.seed)
    modules = {name: test_experts_layer(results, name, layer, dtype, args,
                                        generator)
               for name, (layer, dtype) in EXPERT_LAYERS.items()}
    experts = modules[MODEL_LAYER]
    test_experts_errors(results, experts, args, generator)
    moe = FusedMoE(layer=experts.layer, dtype=experts.dtype, device="cuda",
                   cache_dir=args.cache, tokens_max=TOKENS_MAX)
    test_ops(results, moe, experts, generator)
    test_compile_and_export(results, moe, experts, generator)
    test_readme_example(results, args)
    test_capture_before_load(results, experts, generator)


def main():
    return module_test_main("torch_test", __doc__, "out/gpu-bundles/torch",
                            prepare, run)


if __name__ == "__main__":
    sys.exit(main())
