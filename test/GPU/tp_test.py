#!/usr/bin/env python3
"""GPU test of tensor-parallel FusedMoE and FusedExperts (tp_group=) on two
GPUs, one process each under torchrun, against the one-GPU modules on the
same weights.

Every rank builds the whole layer's random weights from one seed (rank 0's,
broadcast), loads them into a one-GPU module and, with load_full_weights,
into a module sharded over the NCCL group of both ranks (each holds I/2 of
every expert); the shard's parameters must be the whole weights' gate rows,
up rows, w2 columns and block scales of its rank, bit for bit. For each
case, T in TOKEN_COUNTS and routing in ROUTINGS ("uniform": random logits;
"skewed": every token's logits favour experts 0..top_k-1, so all rows land
on those experts), the sharded module's output must be finite and within
tolerance of the one-GPU module's, and the same bit for bit on both ranks
(all_gather); both outputs are allocated where a NaN-filled block of their
size was just freed (torch's caching allocator hands it on), so an
unwritten element shows. Then, at each T, the sharded forward is captured
in a CUDA graph (all-reduce included), its output filled with NaN before
each replay on new inputs of both routings: the replay must equal the
eager sharded forward bit for bit and be within tolerance of the one-GPU
module.

Cases (CASES): reduced Mixtral and Qwen3-30B-A3B (I/2 = 224 and 12) and
reduced DeepSeek-V3 (shared expert, grouped sigmoid routing, correction
bias; I/2 = 32) in bf16, and DeepSeek-V3's routing with H = 224 and I =
256 in fp8 with 128 x 128 block scales (I/2 = 128: whole blocks, which
block scales need; the reduced preset's I = 64 is refused); FusedExperts on
reduced DeepSeek-V3 with the caller's routing (shared expert ids
included). torch.compile(fullgraph=True) of a sharded FusedMoE equals
eager bit for bit. Argument errors: sizes that do not shard, a tp_group
that is no process group, and load_full_weights given tensors of the wrong
shape, dtype or kind (ValueError or TypeError, copying nothing).

Tolerance: bf16, max |error| / max |one-GPU output| <= 2e-2, as
torch_test.py's; the sharded sum adds one bf16 rounding of each rank's
partial output. fp8: the sharded and the one-GPU output each pass
moe_mlir.testing.fp8.check against the float64 reference on the same
quantized operands (fp8_torch_test.py's, routed by the plain C++
reference's gate), the sharded one as the sum of two ranks' shares of the
intermediate columns (their slot rows and partial outputs rounded
apiece): the ranks' first GEMMs compute the same intermediate columns
(whole 128-column activation groups), but with other tiles, and a last-bit
difference of the bf16 intermediate can flip an e4m3 rounding or a
group's scale, which the check decodes before it holds the rest to 5e-3.

NVLink multicast stays off, as the two-GPU machine needs: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are set here
before torch starts NCCL. The process group is initialised with a timeout
(--timeout-s), so a missing peer fails the run instead of hanging it.
Prints a PASS or FAIL line per check and rank, and "N passed, M failed"
over both ranks; exits non-zero on any failure.

The GPU machine has no compiler, so the bundles come from here:
    /usr/bin/python3 test/GPU/tp_test.py --prepare     # here, with MLIR
    PYTHONPATH=build-runtime/python python3 -m torch.distributed.run \\
        --standalone --nproc-per-node 2 test/GPU/tp_test.py  # there
(scripts/gpu-run.sh tp runs the second on a machine with two GPUs).
"""

import argparse
import dataclasses
import os
import sys
import time

from moe_mlir.testing.distributed import (MULTICAST_OFF, RankResults,
                                          disable_multicast, init_nccl,
                                          require_torchrun)

disable_multicast()  # before torch is imported

import moe_mlir  # noqa: E402
from moe_mlir import layers  # noqa: E402
from moe_mlir.testing.presets import (REDUCED_PRESETS,  # noqa: E402
                                     check_reduced_presets)

try:
    import torch
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

WORLD_SIZE = 2
# name: (layer, fp8 weight scaling or None for bf16 weights).
CASES = {
    "mixtral-reduced-bf16": (REDUCED_PRESETS["mixtral-8x7b"], None),
    "qwen3-reduced-bf16": (REDUCED_PRESETS["qwen3-30b-a3b"], None),
    "deepseek-reduced-bf16": (REDUCED_PRESETS["deepseek-v3"], None),
    "deepseek-i256-fp8-block": (dataclasses.replace(
        REDUCED_PRESETS["deepseek-v3"], intermediate_size=256), "block"),
}
EXPERTS_CASE = "deepseek-reduced-bf16"
COMPILE_CASE = "mixtral-reduced-bf16"
TOKENS_MAX = 4096
TOKEN_COUNTS = (1, 7, 128, 4096)
ROUTINGS = ("uniform", "skewed")
BF16_TOLERANCE = 2e-2
BLOCK = layers.SCALE_BLOCK
# Bundles for the default target (the shipped configs' device name; the
# H200 has as many multiprocessors), passed explicitly: a module would
# otherwise key its bundle by the GPU's own name, which --prepare cannot
# know.
TARGET = {"device_name": layers.DEFAULT_DEVICE_NAME,
          "num_sms": layers.DEFAULT_NUM_SMS}


def prepare(cache_dir):
    """Compiles the bundles the modules will look for, one GPU's and one
    rank's of each (no torch needed)."""
    check_reduced_presets()
    bundles = [(name, "layer") for name in CASES] + [(EXPERTS_CASE,
                                                      "experts")]
    for name, part in bundles:
        layer, scaling = CASES[name]
        for world_size in (1, WORLD_SIZE):
            path = moe_mlir.layer_bundle(
                layer.tensor_parallel(world_size, scaling), "bf16",
                quantization=scaling, part=part, cache_dir=cache_dir,
                tokens_max=TOKENS_MAX, **TARGET)
            print(f"{name} {part}, {world_size} rank(s): {path}")


def make_module(kind, layer, scaling, args, device, tp_group=None):
    """A FusedMoE or FusedExperts (``kind``) of ``layer``, bf16 or with fp8
    weights of ``scaling``, on one GPU or sharded over ``tp_group``."""
    fp8 = ({} if scaling is None
           else {"dtype": torch.float8_e4m3fn, "weight_scaling": scaling})
    return kind(layer=layer, device=device, cache_dir=args.cache,
                tokens_max=TOKENS_MAX, tp_group=tp_group, **TARGET, **fp8)


def full_weights(layer, scaling, generator, device):
    """The whole layer's weights, as a checkpoint holds them on the host:
    [w13, w2] in bf16, or their e4m3 codes and float32 scales (quantized
    on ``device``) for fp8; uniform in +-1/sqrt(fan-in)."""
    from moe_mlir.testing.tensors import uniform
    from moe_mlir.torch import quantize_fp8_weights

    values = [uniform(generator, *layer.w13_shape,
                      scale=layer.hidden_size ** -0.5),
              uniform(generator, *layer.w2_shape,
                      scale=layer.intermediate_size ** -0.5)]
    if scaling is None:
        return [weight.to(torch.bfloat16) for weight in values]
    codes, scales = zip(*(quantize_fp8_weights(weight.to(device), scaling)
                          for weight in values))
    return [tensor.cpu() for tensor in (*codes, *scales)]


def layer_inputs(layer, tokens, routing, generator, device):
    """Hidden states [T, H] bf16 and router logits [T, E] float32 on
    ``device``: uniform random logits, or "skewed" ones that are 4 (+- 0.5)
    for experts 0..top_k-1 and -4 (+- 0.5) for the others, which every
    router of CASES sends to those experts."""
    from moe_mlir.testing.tensors import uniform

    hidden = uniform(generator, tokens, layer.hidden_size).to(torch.bfloat16)
    if routing == "uniform":
        logits = uniform(generator, tokens, layer.num_experts, scale=2.0)
    else:
        logits = uniform(generator, tokens, layer.num_experts, scale=0.5)
        logits -= 4.0
        logits[:, :layer.router.top_k] += 8.0
    return hidden.to(device), logits.to(device)


def experts_inputs(layer, tokens, routing, generator, device):
    """Hidden states, int32 ids [T, S] and float32 weights [T, S] as a
    caller routes: a softmax top-k of layer_inputs' logits, then the shared
    experts with weight 1. int32 and float32, which forward passes on as
    they are, so that its output is its first allocation."""
    hidden, logits = layer_inputs(layer, tokens, routing, generator, device)
    weights, ids = torch.softmax(logits, dim=1).topk(layer.router.top_k,
                                                     dim=1)
    shared = torch.arange(layer.num_experts, layer.num_stored_experts,
                          device=device)
    ids = torch.cat([ids, shared.expand(tokens, -1)], dim=1)
    weights = torch.cat([weights, torch.ones(tokens, shared.numel(),
                                             device=device)], dim=1)
    return hidden, ids.int(), weights


def on_poison(module, *arguments):
    """``module(*arguments)`` with a NaN-filled tensor of the output's size
    freed just before, so that the caching allocator hands its block to
    the output; returns the output and whether it got that block."""
    from moe_mlir.testing.tensors import poisoned

    hidden = arguments[0]
    poison = poisoned(tuple(hidden.shape), hidden.dtype, hidden.device)
    address = poison.data_ptr()
    del poison
    output = module(*arguments)
    return output, output.data_ptr() == address


def fp8_reference(full, inputs, gate):
    """fp8_torch_test.reference_experts of the one-GPU fp8 module ``full``
    on its ``inputs`` (a FusedMoE's hidden states and logits, routed by the
    plain C++ reference ``gate``'s router, bit-identical to the GPU's, or a
    FusedExperts' hidden states, ids and weights)."""
    from fp8_torch_test import reference_experts, router_spec

    if len(inputs) == 3:
        return reference_experts(full, *inputs)
    hidden, logits = inputs
    weights, ids = gate.gate(router_spec(full.layer.router), logits,
                             full.correction_bias)
    return reference_experts(full, hidden, ids.to(hidden.device),
                             weights.to(hidden.device))


def within_tolerance(output, expected, reference, shards):
    """(passed, detail): ``output`` finite and within the tolerance of
    ``expected`` (the one-GPU module's output) with bf16 weights, or with
    fp8 weights (``reference``: fp8_reference's) by
    moe_mlir.testing.fp8.check, the intermediate's columns summed over
    ``shards`` ranks."""
    from moe_mlir.testing import fp8
    from moe_mlir.testing.tensors import relative_errors

    if reference is not None:
        result = fp8.check(output, *reference[:2], shards=shards)
        return result.passed, result.summary()
    if not torch.isfinite(expected).all():
        return False, "the one-GPU output is not finite"
    if not torch.isfinite(output).all():
        return False, "output not finite"
    error, _ = relative_errors(output, expected)
    return (error <= BF16_TOLERANCE,
            f"max |error| / max |one-GPU| {error:.2e} (tolerance "
            f"{BF16_TOLERANCE})")


def same_on_ranks(output, group):
    """Whether every rank of ``group`` has ``output`` bit for bit."""
    from moe_mlir.testing.tensors import bits

    gathered = [torch.empty_like(output)
                for _ in range(torch.distributed.get_world_size(group))]
    torch.distributed.all_gather(gathered, output.contiguous(), group=group)
    return all(torch.equal(bits(other), bits(output)) for other in gathered)


def raw(tensor):
    """``tensor``'s bits as integers of its element size, on the host (what
    torch compares and concatenates in every dtype, e4m3 included)."""
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
    return tensor.detach().cpu().view(width[tensor.element_size()])


def shard_of(tensor, rank, part, halves, dim):
    """Rank ``rank``'s ``part`` consecutive indices of each of ``halves``
    equal ranges of ``tensor``'s dimension ``dim``, concatenated, as raw
    bits: written here apart from Layer.shard_slices."""
    size = tensor.shape[dim] // halves
    return torch.cat([raw(tensor).narrow(dim, half * size + rank * part,
                                         part)
                      for half in range(halves)], dim=dim)


def check_shard(results, label, tp, weights):
    """The sharded module's parameters: the rank's gate and up rows of w13,
    columns of w2 and the block scales of both, bit for bit."""
    rank, part = tp.tp_rank, tp.shard_layer.intermediate_size
    expected = {"w13": shard_of(weights[0], rank, part, 2, 1),
                "w2": shard_of(weights[1], rank, part, 1, 2)}
    parameters = {"w13": tp.w13, "w2": tp.w2}
    if tp.weight_scaling == "block":
        expected.update(
            w13_weight_scale_inv=shard_of(weights[2], rank, part // BLOCK,
                                          2, 1),
            w2_weight_scale_inv=shard_of(weights[3], rank, part // BLOCK,
                                         1, 2))
        parameters.update(w13_weight_scale_inv=tp.w13_weight_scale_inv,
                          w2_weight_scale_inv=tp.w2_weight_scale_inv)
    differ = [name for name, parameter in parameters.items()
              if not torch.equal(raw(parameter), expected[name])]
    results.check(f"{label}: load_full_weights gives rank {rank} its "
                  f"shard (I/{tp.tp_world_size} = {part})", not differ,
                  f"{', '.join(differ)} differ" if differ else "")


def check_outputs(results, label, tp, full, make_inputs, reference_of,
                  group):
    """The sharded module against the one-GPU one at each T and routing
    (with fp8 weights, both against ``reference_of`` their inputs),
    eagerly, then replayed from a CUDA graph."""
    from moe_mlir.testing.tensors import bits
    from moe_mlir.testing.timing import graphed

    for tokens in TOKEN_COUNTS:
        for routing in ROUTINGS:
            inputs = make_inputs(tokens, routing)
            output, tp_poisoned = on_poison(tp, *inputs)
            expected, full_poisoned = on_poison(full, *inputs)
            torch.cuda.synchronize()
            reference = reference_of(inputs) if reference_of else None
            passed, detail = within_tolerance(output, expected, reference,
                                              tp.tp_world_size)
            if reference is not None:
                full_passed, full_detail = within_tolerance(
                    expected, None, reference, 1)
                passed &= full_passed
                detail = f"sharded: {detail}; one-GPU: {full_detail}"
            if not same_on_ranks(output, group):
                passed, detail = False, f"the ranks differ; {detail}"
            if not (tp_poisoned and full_poisoned):
                detail += " (an output missed the poisoned block)"
            results.check(f"{label} T={tokens} {routing}", passed, detail)

        static = make_inputs(tokens, "uniform")
        replay, static_output = graphed(lambda: tp(*static),
                                        capture_error_mode="thread_local")
        failures = []
        for routing in ROUTINGS:
            fresh = make_inputs(tokens, routing)
            for tensor, new in zip(static, fresh):
                tensor.copy_(new)
            static_output.fill_(float("nan"))
            replay()
            eager = tp(*fresh)
            expected = full(*fresh)
            torch.cuda.synchronize()
            if not torch.equal(bits(static_output), bits(eager)):
                failures.append(f"{routing}: the replay differs from eager")
            passed, detail = within_tolerance(
                static_output, expected,
                reference_of(fresh) if reference_of else None,
                tp.tp_world_size)
            if not passed:
                failures.append(f"{routing}: {detail}")
        del replay
        results.check(f"{label} T={tokens}: CUDA graph replays", not failures,
                      "; ".join(failures))


def test_case(results, name, kind, args, group, generator, device):
    """One case: the one-GPU and the sharded module of ``kind`` on the same
    whole weights; returns the sharded one and the inputs' maker."""
    layer, scaling = CASES[name]
    label = f"{kind.__name__} {name}"
    start = time.time()
    weights = full_weights(layer, scaling, generator, device)
    bias = {}
    if kind.__name__ == "FusedMoE" and layer.correction_bias:
        from moe_mlir.testing.tensors import uniform
        bias["correction_bias"] = uniform(generator, layer.num_experts,
                                          scale=0.1)
    full = make_module(kind, layer, scaling, args, device)
    tp = make_module(kind, layer, scaling, args, device, group)
    full.load_full_weights(*weights, **bias)
    tp.load_full_weights(*weights, **bias)
    check_shard(results, label, tp, weights)
    if bias:
        results.check(f"{label}: the correction bias is whole",
                      torch.equal(tp.correction_bias.cpu(),
                                  bias["correction_bias"]))
    inputs = experts_inputs if kind.__name__ == "FusedExperts" else \
        layer_inputs

    def make_inputs(tokens, routing):
        return inputs(layer, tokens, routing, generator, device)

    reference_of = None
    if scaling is not None:
        from moe_mlir.testing.reference import Reference

        gate = Reference(args.build)

        def reference_of(inputs):
            return fp8_reference(full, inputs, gate)

    check_outputs(results, label, tp, full, make_inputs, reference_of,
                  group)
    print(f"[rank {tp.tp_rank}] {label}: {time.time() - start:.1f} s",
          flush=True)
    return tp, make_inputs


def test_compile(results, tp, make_inputs):
    """torch.compile(fullgraph=True) of a sharded FusedMoE against eager,
    bit for bit (the op, all-reduce inside, is one node)."""
    from moe_mlir.testing.tensors import bits

    inputs = make_inputs(7, "uniform")
    name = "torch.compile(fullgraph=True) of a sharded FusedMoE equals eager"
    try:
        compiled = torch.compile(tp, fullgraph=True)(*inputs)
        eager = tp(*inputs)
        torch.cuda.synchronize()
        results.check(name, torch.equal(bits(compiled), bits(eager)))
    except Exception as error:  # noqa: BLE001 - reported as a failure
        results.check(name, False, f"raised {type(error).__name__}: "
                                   f"{str(error)[:3000]}")


def test_errors(results, tp, args, group, device, generator):
    """Sizes that do not shard, a tp_group that is no group, and
    load_full_weights' checks, on the sharded bf16 Mixtral ``tp``; no
    collectives."""
    from moe_mlir.torch import FusedMoE

    layer = tp.layer
    odd = dataclasses.replace(layer, intermediate_size=25)
    results.raises("FusedMoE(tp_group=): I not divisible by the ranks",
                   ValueError,
                   lambda: make_module(FusedMoE, odd, None, args, device,
                                       group))
    results.raises("FusedMoE(tp_group=): fp8 blocks astride ranks "
                   "(reduced DeepSeek-V3, I/2 = 32)", ValueError,
                   lambda: make_module(FusedMoE, REDUCED_PRESETS[
                       "deepseek-v3"], "block", args, device, group))
    results.raises("FusedMoE(tp_group=): not a process group", TypeError,
                   lambda: make_module(FusedMoE, layer, None, args, device,
                                       "tp"))
    results.check("FusedMoE(tp_group=): repr names the rank",
                  f"tp_rank={tp.tp_rank} of {WORLD_SIZE}" in repr(tp),
                  repr(tp))

    w13, w2 = full_weights(layer, None, generator, device)
    kept = tp.w13.detach().clone()
    cases = {
        "the shard's shape (w2)": (ValueError, (w13, w2[..., :224]), {}),
        "float32 w13": (TypeError, (w13.float(), w2), {}),
        "scales of bf16 weights": (ValueError,
                                   (w13, w2, torch.ones(1), torch.ones(1)),
                                   {}),
        "a correction bias the layer lacks": (
            ValueError, (w13, w2), {"correction_bias": torch.zeros(8)}),
        "a path, not a tensor": (TypeError, (w13, "w2.safetensors"), {}),
    }
    for case, (kind, arguments, keywords) in cases.items():
        results.raises(f"load_full_weights: {case}", kind,
                       lambda arguments=arguments, keywords=keywords:
                       tp.load_full_weights(*arguments, **keywords))
    results.check("load_full_weights: a refused call copies nothing",
                  torch.equal(tp.w13, kept))


def run(args):
    """The checks on this rank; returns the exit code."""
    from moe_mlir.torch import FusedExperts, FusedMoE

    device = init_nccl(args.timeout_s)
    rank = torch.distributed.get_rank()
    results = RankResults(rank)
    world_size = torch.distributed.get_world_size()
    if world_size != WORLD_SIZE:
        results.check(f"{WORLD_SIZE} ranks", False,
                      f"torchrun started {world_size}")
        torch.distributed.destroy_process_group()
        return 1
    # The modules' group: all ranks, but not the default group, as a
    # serving engine's tensor-parallel group is not.
    group = torch.distributed.new_group(list(range(world_size)))
    seed = torch.tensor([args.seed], device=device)
    torch.distributed.broadcast(seed, src=0, group=group)
    if rank == 0:
        print(f"tp_test: seed {seed.item()}, torch {torch.__version__}, "
              f"{world_size} x {torch.cuda.get_device_name(device)}, "
              + ", ".join(f"{name}={os.environ[name]}"
                          for name in MULTICAST_OFF), flush=True)
    generator = torch.Generator().manual_seed(seed.item())

    modules = {}
    for name in CASES:
        modules[name] = test_case(results, name, FusedMoE, args, group,
                                  generator, device)
    test_case(results, EXPERTS_CASE, FusedExperts, args, group, generator,
              device)
    test_compile(results, *modules[COMPILE_CASE])
    test_errors(results, modules[COMPILE_CASE][0], args, group, device,
                generator)

    return results.finish("tp_test", device, group)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--prepare", action="store_true",
                        help="compile the bundles into --cache (here, "
                             "where the compiler is)")
    parser.add_argument("--cache", default="out/gpu-bundles/tp",
                        help="the modules' bundle cache")
    parser.add_argument("--seed", type=int, default=int(time.time()),
                        help="rank 0's is every rank's")
    parser.add_argument("--timeout-s", type=int, default=120,
                        help="how long a collective waits for a peer")
    parser.add_argument("--build", default="build-runtime",
                        help="the build whose libmoe_reference.so routes "
                             "the fp8 reference")
    args = parser.parse_args()
    if args.prepare:
        prepare(args.cache)
        return 0
    if torch is None:
        parser.error("torch is needed (all but --prepare run on the GPUs)")
    require_torchrun(parser, WORLD_SIZE)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
