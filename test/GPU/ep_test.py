#!/usr/bin/env python3
"""GPU test of the expert-parallel kernels on one GPU: every rank of a
simulated world of W ranks (moe_mlir.expert_parallel.simulate_world), its
slices of the exchange buffers in one allocation, against the plain C++
reference of the whole layer.

For each case (CASES: reduced Qwen3-30B-A3B, DeepSeek-V3 with its shared
expert, grouped sigmoid routing and correction bias, and Mixtral; W = 2,
and 4 for DeepSeek-V3) and T in TOKEN_COUNTS tokens a rank, each rank's
three bundles (dispatch, experts, combine; compiled here with --prepare)
run for ranks 0 .. W-1 in turn, phase after phase, on exchange buffers
that start as garbage (NaN rows and weights, -1 slots and counts) and are
never cleared. Every rank's output, poisoned with NaN before, must be
finite and within tolerance of the reference layer on the rank's tokens
with the whole layer's weights, the rank holding only its E/W routed
experts and the shared one:
- "uniform": random normal logits;
- "skewed": every token's logits favour rank 0's first experts, so that
  its regions fill to their capacity (C = T) and the other ranks receive
  nothing routed; run on the buffers the uniform call left, which checks
  that stale rows and counts are overwritten rather than summed.
Then the world's 3W launches are captured in a CUDA graph and replayed on
new inputs (the outputs poisoned before): the replay must equal an eager
run on the same inputs bit for bit. The phases order themselves by their
completion flags (zeroed once, never cleared): after a case's calls every
counter of both flags must equal the number of calls that ran, and no
rank's status may record a wait that gave up. Argument errors: a run
before the exchange buffers are bound, a binding of the wrong number of
slices, a run given another rank's slice (moe_mlir.Error, nothing
launched); and a rank whose peers never dispatch: its experts phase must
give up after about 10 s, its status naming the phase and a peer
(RankBundles.check_status).

Tolerance: max |error| / max |reference| <= 2e-2, as torch_test.py's; the
reference rounds the intermediates to bf16 where the kernels do, and each
row's arithmetic is the single-device layer's.

The GPU machine has no compiler, so the bundles come from here:
    /usr/bin/python3 test/GPU/ep_test.py --prepare   # here, with MLIR
    PYTHONPATH=build-runtime/python python3 test/GPU/ep_test.py  # there
(scripts/gpu-run.sh tests, step ep-tests).
"""

import sys
import time

from moe_mlir import Error, layers
from moe_mlir.expert_parallel import (FLAGS, PHASES, RankBundles,
                                      allocate_exchange, simulate_world)
from moe_mlir.testing.presets import REDUCED_PRESETS, check_reduced_presets
from moe_mlir.testing.results import module_test_main

try:
    import torch
    from moe_mlir.testing.expert_parallel import (TOLERANCE, full_weights,
                                                  rank_inputs, rank_weights,
                                                  reference_error)
except ImportError:  # --prepare runs where MLIR is, which has no torch.
    torch = None

TOKEN_COUNTS = (1, 7, 128)
# (preset, world sizes), reduced layers in bf16.
CASES = (("qwen3-30b-a3b", (2,)), ("deepseek-v3", (2, 4)),
         ("mixtral-8x7b", (2,)))


def bundle_options(cache):
    return {"cache_dir": cache,
            "device_name": layers.DEFAULT_DEVICE_NAME}


def prepare(cache):
    check_reduced_presets()
    for preset, worlds in CASES:
        layer = REDUCED_PRESETS[preset]
        for world in worlds:
            for rank in range(world):
                for tokens in TOKEN_COUNTS:
                    for phase in PHASES:
                        path = layers.layer_bundle(
                            layer, "bf16", tokens_max=tokens,
                            token_buckets=(tokens,),
                            expert_parallel=(world, rank), phase=phase,
                            **bundle_options(cache))
                        print(path, flush=True)


class World:
    """The W ranks of one case at T tokens a rank, on one GPU: their
    bundles, the whole layer's weights and each rank's share of them."""

    def __init__(self, layer, world, tokens, cache, generator):
        self.layer, self.world, self.tokens = layer, world, tokens
        self.cache = cache
        self.ranks = [RankBundles(layer, world, rank, tokens, "bf16",
                                  **bundle_options(cache))
                      for rank in range(world)]
        self.weights, self.bias = full_weights(layer, generator, "cuda")
        self.rank_weights = [rank_weights(layer, world, rank, self.weights)
                             for rank in range(world)]
        #: The calls run on the device (a capture runs none, a replay one).
        self.calls = 0

    def inputs(self, generator, skewed):
        return [rank_inputs(self.layer, self.tokens, skewed, self.bias,
                            generator, "cuda") for _ in range(self.world)]

    def outputs(self):
        return [torch.full((self.tokens, self.layer.hidden_size),
                           float("nan"), dtype=torch.bfloat16, device="cuda")
                for _ in range(self.world)]

    def run(self, inputs, outputs, buffers=None):
        if not torch.cuda.is_current_stream_capturing():
            self.calls += 1
        return simulate_world(self.ranks, inputs, self.rank_weights, outputs,
                              buffers=buffers)

    def check_completion(self, results, name, buffers):
        """Every rank signalled every rank once per call in either
        exchange, and no wait gave up."""
        torch.cuda.synchronize()
        counters = {flags: torch.stack(buffers[flags]).unique().tolist()
                    for flags in FLAGS}
        statuses = [bundles.status.tolist() for bundles in self.ranks]
        results.check(f"{name}: the flags count the {self.calls} calls, "
                      f"no wait gave up",
                      all(values == [self.calls]
                          for values in counters.values())
                      and all(status == [0, 0] for status in statuses),
                      f"counters {counters}, statuses {statuses}")

    def check(self, results, reference, name, inputs, outputs):
        checked = [reference_error(reference, self.layer, inputs[rank],
                                   self.weights, outputs[rank])
                   for rank in range(self.world)]
        finite = all(ok for ok, _ in checked)
        worst = max(error for _, error in checked)
        results.check(name, finite and worst <= TOLERANCE,
                      f"max |error| / max |reference| = {worst:.2e}"
                      + ("" if finite else ", not all finite"))

    def close(self):
        for bundles in self.ranks:
            bundles.close()


def check_graph(results, world, generator, buffers, name):
    """Captures the world's launches and replays them on new inputs: the
    replay must equal an eager run on those inputs bit for bit."""
    inputs = world.inputs(generator, skewed=False)
    outputs = world.outputs()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        world.run(inputs, outputs, buffers)  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        world.run(inputs, outputs, buffers)
    fresh = world.inputs(generator, skewed=True)
    for held, new in zip(inputs, fresh):
        for tensor, value in zip(held, new):
            tensor.copy_(value)
    for output in outputs:
        output.fill_(float("nan"))
    graph.replay()
    world.calls += 1
    torch.cuda.synchronize()
    replayed = [output.clone() for output in outputs]
    eager = world.outputs()
    world.run(inputs, eager, buffers)
    torch.cuda.synchronize()
    same = all(torch.equal(a.view(torch.int16), b.view(torch.int16))
               for a, b in zip(replayed, eager))
    results.check(f"{name}: CUDA graph replay equals eager bit for bit", same)


def check_errors(results, world):
    inputs = world.inputs(torch.Generator().manual_seed(0), skewed=False)
    fresh = RankBundles(world.layer, world.world, 0, world.tokens, "bf16",
                        **bundle_options(world.cache))
    slices = allocate_exchange(fresh.exchange_shapes(), world.world, "cuda")
    mine = {name: tensors[0] for name, tensors in slices.items()}
    results.raises("a run before the exchange buffers are bound", Error,
                   lambda: fresh.run("dispatch", inputs[0], mine))
    results.raises("a binding of one slice too few", Error,
                   lambda: fresh.bind({name: tensors[1:]
                                       for name, tensors in slices.items()}))
    fresh.bind(slices)
    theirs = {name: tensors[1] for name, tensors in slices.items()}
    results.raises("a run given another rank's slice", Error,
                   lambda: fresh.run("dispatch", inputs[0], theirs))
    # Rank 0 alone: its experts phase waits for its peers' dispatch, which
    # never comes, and gives up, naming one of them.
    started = time.monotonic()
    fresh.run("dispatch", inputs[0], mine)
    fresh.run("experts", world.rank_weights[0], mine)
    try:
        fresh.check_status()
        message = "no error"
    except Error as error:
        message = str(error)
    waited = time.monotonic() - started
    named = [f"experts phase gave up waiting for rank {peer}'s dispatch"
             for peer in range(1, world.world)]
    results.check("an experts phase whose peers never dispatch gives up "
                  "after about 10 s and names one",
                  any(text in message for text in named)
                  and 5 < waited < 120, f"after {waited:.1f} s: {message}")
    fresh.close()


def run(results, args):
    from moe_mlir.testing.reference import Reference

    print(f"ep_test: seed {args.seed}", flush=True)
    generator = torch.Generator().manual_seed(args.seed)
    reference = Reference(args.build)
    errors_checked = False
    for preset, worlds in CASES:
        layer = REDUCED_PRESETS[preset]
        for world_size in worlds:
            if args.only and f"{preset}:{world_size}" not in \
                    args.only.split(","):
                continue
            for tokens in TOKEN_COUNTS:
                name = f"{preset} W={world_size} T={tokens}"
                world = World(layer, world_size, tokens, args.cache,
                              generator)
                buffers = None
                for routing in ("uniform", "skewed"):
                    inputs = world.inputs(generator, routing == "skewed")
                    outputs = world.outputs()
                    buffers = world.run(inputs, outputs, buffers)
                    torch.cuda.synchronize()
                    world.check(results, reference, f"{name} {routing}",
                                inputs, outputs)
                check_graph(results, world, generator, buffers, name)
                world.check_completion(results, name, buffers)
                if not errors_checked:
                    check_errors(results, world)
                    errors_checked = True
                world.close()


def add_arguments(parser):
    parser.add_argument("--build", default="build-runtime",
                        help="the build directory of libmoe_reference.so")
    parser.add_argument("--only", default="",
                        help="cases as preset:world, comma-separated "
                             "(default: all)")


if __name__ == "__main__":
    sys.exit(module_test_main("ep_test", __doc__, "out/gpu-bundles/ep",
                              prepare, run, add_arguments))
