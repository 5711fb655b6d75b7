#!/usr/bin/env python3
"""GPU test of expert-parallel layers on two GPUs, one process each under
torchrun: each rank holds its E/2 routed experts and the shared ones, runs
its three bundles (dispatch, experts, combine) with the exchange buffers
in torch's symmetric memory (moe_mlir.expert_parallel.SymmetricExchange:
the dispatch and combine kernels store straight into the peer's slices
over NVLink), the phases ordered by their completion flags alone (with
--barrier, torch's device-side barrier between them too), and its output
is checked against the plain C++ reference of the whole layer on its
tokens.

Every rank builds the whole layer's weights from one seed (rank 0's,
broadcast). For each case (CASES: reduced Qwen3-30B-A3B, DeepSeek-V3 with
its shared expert, grouped sigmoid routing and correction bias, and
Mixtral), T in TOKEN_COUNTS tokens a rank and routing in ROUTINGS
("uniform": normal logits; "skewed": every token of both ranks favours
rank 0's first experts, so that rank 0's receive regions fill to their
capacity), the output, poisoned with NaN first, must be finite and within
tolerance (2e-2 of the reference's largest magnitude, as torch_test.py's)
on both ranks. The exchange buffers start as whatever the allocation held
(the flags zeroed once) and are never cleared between calls. Then the
forward (three phases) is captured in a CUDA graph on both ranks and
replayed on new inputs: the replay must equal an eager forward bit for
bit. After every forward no wait of the rank may have given up
(RankBundles.check_status), and after a case's calls this rank's counters
of both flags must equal the number of calls.

Then the same through moe_mlir.torch.FusedMoE(ep_group=group) (a group of
both ranks other than the default one, as a serving engine's is): for each
case, a module on each rank and a one-GPU FusedMoE, both loaded with
load_full_weights from the whole weights on the host (same seed on both
ranks); the rank's parameters must be its routed experts and the shared
one bit for bit, and the correction bias whole. At each T and routing the
module's output (allocated where a NaN-filled block was just freed) must
be finite and within 2e-2 of max |one-GPU output| of the one-GPU module's
on the same tokens; its forward captured in a CUDA graph and replayed on
new inputs of both routings must equal eager bit for bit. The first
forward at each T makes the rank's bundles and exchange buffers
(collectively), which the module finds in --cache. torch.compile
(fullgraph=True) of reduced Mixtral's module must see one
moe_mlir::fused_moe_ep node and, with Inductor, equal eager bit for bit.
Argument errors: tp_group and ep_group together, experts that do not
split over the ranks, a group that is no process group, fp8 weights and
expert biases (not implemented), T beyond tokens_max, and
load_full_weights given tensors of the wrong shape or dtype (ValueError,
TypeError or NotImplementedError, copying nothing).

NVLink multicast stays off, as the two-GPU machine needs: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are set here
before torch starts. The process group is created with a timeout, the
phases' waits give up after about 10 s and the barriers after
--barrier-timeout-ms, so a missing peer fails the run instead of hanging
it. Prints a PASS or FAIL line per check and rank, and "N passed, M
failed" over both ranks; exits non-zero on any failure.

The GPU machine has no compiler, so the bundles come from here:
    /usr/bin/python3 test/GPU/ep_dist_test.py --prepare   # here, with MLIR
    PYTHONPATH=build-runtime/python python3 -m torch.distributed.run \\
        --standalone --nproc-per-node 2 test/GPU/ep_dist_test.py  # there
(scripts/gpu-run.sh ep runs the second on a machine with two GPUs).
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

from moe_mlir import layers  # noqa: E402
from moe_mlir.expert_parallel import (FLAGS, PHASES,  # noqa: E402
                                      RankBundles, SymmetricExchange)
from moe_mlir.testing.presets import (REDUCED_PRESETS,  # noqa: E402
                                      check_reduced_presets)

try:
    import torch
    from moe_mlir.testing.expert_parallel import (TOLERANCE, full_weights,
                                                  rank_inputs, rank_weights,
                                                  reference_error)
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

WORLD_SIZE = 2
CASES = ("qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b")
TOKEN_COUNTS = (1, 7, 128, 4096)
ROUTINGS = ("uniform", "skewed")
# The one-GPU FusedMoE's, which the expert-parallel ones are checked
# against, and the expert-parallel ones' bound on T.
TOKENS_MAX = max(TOKEN_COUNTS)
COMPILE_CASE = "mixtral-8x7b"
# Bundles for the default target (the shipped configs' device name; the
# H200 has as many multiprocessors), passed explicitly: a module would
# otherwise key its bundles by the GPU's own name, which --prepare cannot
# know.
TARGET = {"device_name": layers.DEFAULT_DEVICE_NAME,
          "num_sms": layers.DEFAULT_NUM_SMS}


def bundle_options(cache):
    return {"cache_dir": cache, **TARGET}


def prepare(cache):
    """Compiles every bundle the test looks for: each rank's phases at each
    T, which RankLayer and FusedMoE(ep_group=) load, and the one-GPU
    FusedMoE's (no torch needed)."""
    check_reduced_presets()
    for preset in CASES:
        print(layers.layer_bundle(REDUCED_PRESETS[preset], "bf16",
                                  tokens_max=TOKENS_MAX,
                                  **bundle_options(cache)), flush=True)
        for rank in range(WORLD_SIZE):
            for tokens in TOKEN_COUNTS:
                for phase in PHASES:
                    print(layers.layer_bundle(
                        REDUCED_PRESETS[preset], "bf16", tokens_max=tokens,
                        token_buckets=(tokens,),
                        expert_parallel=(WORLD_SIZE, rank), phase=phase,
                        **bundle_options(cache)), flush=True)


class RankLayer:
    """This rank's part of one case at T tokens a rank: its bundles bound
    to the exchange buffers in symmetric memory, its experts' weights."""

    def __init__(self, layer, tokens, rank, group, args, generator, device):
        self.layer, self.tokens, self.device = layer, tokens, device
        self.bundles = RankBundles(layer, WORLD_SIZE, rank, tokens, "bf16",
                                   device=device.index,
                                   **bundle_options(args.cache))
        self.exchange = SymmetricExchange(self.bundles.exchange_shapes(),
                                          group, device,
                                          args.barrier_timeout_ms, rank=rank)
        self.bundles.bind(self.exchange.slices)
        self.barrier = self.exchange.barrier if args.barrier else None
        self.weights, self.bias = full_weights(layer, generator, device)
        self.mine = rank_weights(layer, WORLD_SIZE, rank, self.weights)
        #: The forwards run on the device (a capture runs none, a replay
        #: one).
        self.calls = 0

    def inputs(self, rank, skewed, generator):
        """This rank's inputs: every rank draws all ranks' in turn from the
        shared generator, so that the generators stay in step."""
        drawn = [rank_inputs(self.layer, self.tokens, skewed, self.bias,
                             generator, self.device)
                 for _ in range(WORLD_SIZE)]
        return drawn[rank]

    def output(self):
        return torch.full((self.tokens, self.layer.hidden_size),
                          float("nan"), dtype=torch.bfloat16,
                          device=self.device)

    def forward(self, routing, output):
        if not torch.cuda.is_current_stream_capturing():
            self.calls += 1
        self.bundles.forward(routing[0], routing[1], self.mine, output,
                             self.exchange.mine, self.barrier,
                             bias=routing[2] if len(routing) > 2 else None)

    def check_completion(self, results, name):
        """No wait of this rank gave up (blocking)."""
        results.attempt(f"{name}: no wait gave up",
                        lambda: (self.bundles.check_status() is None, ""))

    def check_counters(self, results, name):
        """Every rank signalled this rank once per call, in either
        exchange."""
        counters = {flags: self.exchange.mine[flags].unique().tolist()
                    for flags in FLAGS}
        results.check(f"{name}: this rank's flags count the {self.calls} "
                      f"calls", all(values == [self.calls]
                                    for values in counters.values()),
                      f"{counters}")


def check_graph(results, part, rank, generator, name):
    """The forward captured on both ranks and replayed on new inputs equals
    an eager forward on them bit for bit."""
    routing = part.inputs(rank, False, generator)
    output = part.output()
    stream = torch.cuda.Stream(part.device)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        part.forward(routing, output)  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        part.forward(routing, output)
    for held, new in zip(routing, part.inputs(rank, True, generator)):
        held.copy_(new)
    output.fill_(float("nan"))
    graph.replay()
    part.calls += 1
    torch.cuda.synchronize()
    replayed = output.clone()
    eager = part.output()
    part.forward(routing, eager)
    torch.cuda.synchronize()
    results.check(f"{name}: CUDA graph replay equals eager bit for bit",
                  torch.equal(replayed.view(torch.int16),
                              eager.view(torch.int16)))


def check_module(results, preset, rank, group, args, generator, device):
    """FusedMoE(ep_group=group) of ``preset`` against the one-GPU FusedMoE
    on the same whole weights, loaded from the host: the rank's
    parameters, then its output at each T and routing, eagerly (allocated
    where a NaN-filled block was just freed) and replayed from a CUDA graph
    on new inputs. Returns the module and its inputs' maker."""
    from moe_mlir.testing.tensors import bits
    from moe_mlir.testing.timing import graphed
    from moe_mlir.torch import FusedMoE
    from tp_test import on_poison, within_tolerance

    layer = REDUCED_PRESETS[preset]
    label = f"FusedMoE(ep_group=) {preset}"
    start = time.time()
    weights, bias = full_weights(layer, generator, device)
    checkpoint = [weight.cpu() for weight in weights]
    extra = {} if bias is None else {"correction_bias": bias.cpu()}
    options = {"layer": layer, "device": device, "cache_dir": args.cache,
               "tokens_max": TOKENS_MAX, **TARGET}
    full = FusedMoE(**options)
    ep = FusedMoE(**options, ep_group=group)
    full.load_full_weights(*checkpoint, **extra)
    ep.load_full_weights(*checkpoint, **extra)
    # Written here apart from Layer.expert_slices: the rank's routed
    # experts, then the shared ones.
    share, routed = layer.num_experts // WORLD_SIZE, layer.num_experts
    differ = [name for name, parameter, weight in (
                  ("w13", ep.w13, checkpoint[0]),
                  ("w2", ep.w2, checkpoint[1]))
              if not torch.equal(bits(parameter.cpu()), bits(torch.cat(
                  [weight[rank * share:(rank + 1) * share],
                   weight[routed:]])))]
    if bias is not None and not torch.equal(ep.correction_bias.cpu(),
                                            extra["correction_bias"]):
        differ.append("correction_bias (held whole)")
    results.check(f"{label}: load_full_weights gives rank {rank} its "
                  f"{share} routed experts and "
                  f"{layer.router.num_shared_experts} shared", not differ,
                  f"{', '.join(differ)} differ" if differ else "")

    def make_inputs(tokens, routing):
        """This rank's hidden states and logits: every rank draws all
        ranks' from the shared generator, which keeps them in step."""
        drawn = [rank_inputs(layer, tokens, routing == "skewed", None,
                             generator, device)
                 for _ in range(WORLD_SIZE)]
        return drawn[rank]

    for tokens in TOKEN_COUNTS:
        for routing in ROUTINGS:
            inputs = make_inputs(tokens, routing)
            output, poisoned = on_poison(ep, *inputs)
            expected = full(*inputs)
            torch.cuda.synchronize()
            passed, detail = within_tolerance(output, expected, None, 1)
            if not poisoned:
                detail += " (the output missed the poisoned block)"
            results.check(f"{label} T={tokens} {routing}", passed, detail)

        static = make_inputs(tokens, "uniform")
        replay, static_output = graphed(lambda: ep(*static),
                                        capture_error_mode="thread_local")
        failures = []
        for routing in ROUTINGS:
            fresh = make_inputs(tokens, routing)
            for tensor, new in zip(static, fresh):
                tensor.copy_(new)
            static_output.fill_(float("nan"))
            replay()
            eager = ep(*fresh)
            expected = full(*fresh)
            torch.cuda.synchronize()
            if not torch.equal(bits(static_output), bits(eager)):
                failures.append(f"{routing}: the replay differs from eager")
            passed, detail = within_tolerance(static_output, expected, None,
                                              1)
            if not passed:
                failures.append(f"{routing}: {detail}")
        del replay
        results.check(f"{label} T={tokens}: CUDA graph replays equal eager "
                      "bit for bit", not failures, "; ".join(failures))
    print(f"[rank {rank}] {label}: {time.time() - start:.1f} s", flush=True)
    return ep, make_inputs


def check_compile(results, ep, make_inputs):
    """torch.compile(fullgraph=True) of an expert-parallel FusedMoE: one
    node of the op in Dynamo's graph, and Inductor's output equal to eager
    bit for bit."""
    from moe_mlir.testing.tensors import bits

    inputs = make_inputs(7, "uniform")
    graphs = []

    def recording(graph_module, _):
        graphs.append(graph_module)
        return graph_module.forward

    def one_node():
        torch._dynamo.reset()
        torch.compile(ep, backend=recording, fullgraph=True)(*inputs)
        targets = [node.target for graph in graphs
                   for node in graph.graph.nodes
                   if node.op == "call_function"]
        op = torch.ops.moe_mlir.fused_moe_ep
        ops = sum(target in (op, op.default) for target in targets)
        return ops == 1, f"{ops} fused_moe_ep nodes in {targets}"

    def inductor():
        torch._dynamo.reset()
        compiled = torch.compile(ep, fullgraph=True)(*inputs)
        eager = ep(*inputs)
        torch.cuda.synchronize()
        return torch.equal(bits(compiled), bits(eager)), ""

    results.attempt("torch.compile(fullgraph=True) of an expert-parallel "
                    "FusedMoE sees one op node", one_node)
    results.attempt("torch.compile(fullgraph=True) of an expert-parallel "
                    "FusedMoE equals eager bit for bit", inductor)


def check_errors(results, ep, rank, group, args, device):
    """FusedMoE(ep_group=)'s argument errors on the module ``ep``: groups
    given together, experts that do not split, a group that is no group,
    what is not implemented, T beyond tokens_max and load_full_weights'
    checks; no collectives."""
    from moe_mlir.torch import FusedMoE

    layer = ep.layer
    options = {"device": device, "cache_dir": args.cache,
               "tokens_max": TOKENS_MAX, **TARGET}
    results.raises("FusedMoE: tp_group and ep_group together", ValueError,
                   lambda: FusedMoE(layer=layer, tp_group=group,
                                    ep_group=group, **options))
    odd = dataclasses.replace(layer, num_experts=7)
    results.raises("FusedMoE(ep_group=): 7 experts over 2 ranks",
                   ValueError,
                   lambda: FusedMoE(layer=odd, ep_group=group, **options))
    results.raises("FusedMoE(ep_group=): not a process group", TypeError,
                   lambda: FusedMoE(layer=layer, ep_group="ep", **options))
    results.raises("FusedMoE(ep_group=): fp8 weights", NotImplementedError,
                   lambda: FusedMoE(layer=layer, dtype=torch.float8_e4m3fn,
                                    weight_scaling="channel", ep_group=group,
                                    **options))
    biased = dataclasses.replace(layer, expert_biases=True)
    results.raises("FusedMoE(ep_group=): expert biases", NotImplementedError,
                   lambda: FusedMoE(layer=biased, ep_group=group, **options))
    results.check("FusedMoE(ep_group=): repr names the rank",
                  f"ep_rank={rank} of {WORLD_SIZE}" in repr(ep), repr(ep))
    tokens = TOKENS_MAX + 1
    results.raises(
        "FusedMoE(ep_group=): T beyond tokens_max", ValueError,
        lambda: ep(torch.zeros(tokens, layer.hidden_size,
                               dtype=torch.bfloat16, device=device),
                   torch.zeros(tokens, layer.num_experts, device=device)))

    w13, w2 = (torch.zeros(shape, dtype=torch.bfloat16)
               for shape in (layer.w13_shape, layer.w2_shape))
    kept = ep.w13.detach().clone()
    cases = {
        "the rank's shape, not the whole layer's (w13)": (
            ValueError, (torch.zeros_like(ep.w13), w2)),
        "w2 of another intermediate size": (ValueError, (w13, w2[..., :-1])),
        "float32 w13": (TypeError, (w13.float(), w2)),
        "scales of bf16 weights": (ValueError,
                                   (w13, w2, torch.ones(1), torch.ones(1))),
    }
    for case, (kind, arguments) in cases.items():
        results.raises(f"FusedMoE(ep_group=).load_full_weights: {case}",
                       kind, lambda arguments=arguments:
                       ep.load_full_weights(*arguments))
    results.check("FusedMoE(ep_group=).load_full_weights: a refused call "
                  "copies nothing", torch.equal(ep.w13, kept))


def check_mismatch(results, rank, args, device):
    """Ranks that bring different exchange buffers (rank 1 another T), or a
    rank that runs another rank's bundles, are refused on every rank before
    anything is allocated, the message naming the rank."""
    from moe_mlir import Error
    from moe_mlir.expert_parallel import SymmetricExchange

    layer = REDUCED_PRESETS[CASES[0]]
    group = torch.distributed.group.WORLD

    def shapes(bundle_rank, tokens):
        bundles = RankBundles(layer, WORLD_SIZE, bundle_rank, tokens, "bf16",
                              device=device.index,
                              **bundle_options(args.cache))
        try:
            return bundles.exchange_shapes()
        finally:
            bundles.close()

    other_tokens = shapes(rank, TOKEN_COUNTS[rank])
    results.raises("ranks with other token counts", Error,
                   lambda: SymmetricExchange(other_tokens, group, device,
                                             rank=rank))
    rank_zeros = shapes(0, TOKEN_COUNTS[0])
    results.raises("a rank running another rank's bundles", Error,
                   lambda: SymmetricExchange(rank_zeros, group, device,
                                             rank=0))


def run(args):
    from moe_mlir.testing.reference import Reference

    device = init_nccl(args.timeout_s)
    rank = torch.distributed.get_rank()
    results = RankResults(rank)
    world_size = torch.distributed.get_world_size()
    if world_size != WORLD_SIZE:
        results.check(f"{WORLD_SIZE} ranks", False,
                      f"torchrun started {world_size}")
        torch.distributed.destroy_process_group()
        return 1
    group = torch.distributed.group.WORLD
    seed = torch.tensor([args.seed], device=device)
    torch.distributed.broadcast(seed, src=0)
    if rank == 0:
        print(f"ep_dist_test: seed {seed.item()}, torch {torch.__version__}, "
              f"{world_size} x {torch.cuda.get_device_name(device)}, "
              + ", ".join(f"{name}={os.environ[name]}"
                          for name in MULTICAST_OFF), flush=True)
    generator = torch.Generator().manual_seed(seed.item())
    reference = Reference(args.build)
    for preset in CASES:
        if args.only and preset not in args.only.split(","):
            continue
        for tokens in TOKEN_COUNTS:
            name = f"{preset} T={tokens}"
            part = RankLayer(REDUCED_PRESETS[preset], tokens, rank, group,
                             args, generator, device)
            for routing in ROUTINGS:
                inputs = part.inputs(rank, routing == "skewed", generator)
                output = part.output()
                part.forward(inputs, output)
                torch.cuda.synchronize()
                finite, error = reference_error(reference, part.layer, inputs,
                                                part.weights, output)
                results.check(f"{name} {routing}",
                              finite and error <= TOLERANCE,
                              f"max |error| / max |reference| = {error:.2e}"
                              + ("" if finite else ", not all finite"))
                part.check_completion(results, f"{name} {routing}")
            check_graph(results, part, rank, generator, name)
            part.check_completion(results, f"{name} CUDA graph")
            part.check_counters(results, name)
            part.bundles.close()
            torch.distributed.barrier()

    # The modules' group: all ranks, but not the default group, as a
    # serving engine's expert-parallel group is not.
    module_group = torch.distributed.new_group(list(range(world_size)))
    modules = {}
    for preset in CASES:
        if args.only and preset not in args.only.split(","):
            continue
        modules[preset] = check_module(results, preset, rank, module_group,
                                       args, generator, device)
    if COMPILE_CASE in modules:
        check_compile(results, *modules[COMPILE_CASE])
        check_errors(results, modules[COMPILE_CASE][0], rank, module_group,
                     args, device)

    check_mismatch(results, rank, args, device)

    return results.finish("ep_dist_test", device)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--prepare", action="store_true",
                        help="compile the bundles into --cache (here, "
                             "where the compiler is)")
    parser.add_argument("--cache", default="out/gpu-bundles/ep-dist",
                        help="the bundle cache")
    parser.add_argument("--seed", type=int, default=int(time.time()),
                        help="rank 0's is every rank's")
    parser.add_argument("--timeout-s", type=int, default=120,
                        help="how long a collective waits for a peer")
    parser.add_argument("--barrier", action="store_true",
                        help="put torch's symmetric-memory barrier between "
                             "the phases too (by default their flags alone "
                             "order them)")
    parser.add_argument("--barrier-timeout-ms", type=int, default=10000,
                        help="how long a barrier waits for a peer")
    parser.add_argument("--build", default="build-runtime",
                        help="the build directory of libmoe_reference.so")
    parser.add_argument("--only", default="",
                        help="comma-separated presets (default: all)")
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
