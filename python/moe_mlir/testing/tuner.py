"""The tuner (tools/moe-tune) as a Python call: tune_layer searches the
#moe.gemm_config of both grouped matmuls of any layer — a preset, an MLIR
file or sizes, in bf16, f16 or with fp8 weights — on this machine's GPU and
writes the config database (docs/CONFIG-DATABASE.md) that moe-tile reads.

For each grouped matmul (gemm1: w13 with SiLU-and-mul, token rows gathered;
gemm2: w2 with routed weights, sorted rows) and routing block size it
compiles each candidate of tune_space with moe-compile (in parallel; the
static moe-compile runs on a machine without MLIR), plus moe-tile's
heuristic at each token count. Then, at each T, on fresh random routing
(experts drawn uniformly) and weights, it runs each candidate once on a
NaN-poisoned output and checks it against torch.nn.functional.grouped_mm
with the epilogue in torch (||error|| / ||peer|| <= 1e-2): a candidate that
fails is dropped, whatever its time. The rest are timed with CUDA events (a
warm-up call, then the median of up to `iterations` calls, L2 flushed before
each); the three fastest are timed again for longer (`final_budget_s`),
beside the heuristic, and the fastest of those becomes the entry for (E, N,
K, dtype, device name, block_m, T); where that is the heuristic, the
entry says so (`"config": "heuristic"`), so that moe-tile takes the
heuristic at that bucket rather than a neighbouring bucket's entry. Each
entry records what was measured: the winner's and the
heuristic's µs, the peer's, how many candidates were timed and rejected,
and the layer's sizes (its routing: top_k and shared experts).

FP8 layers (a `quantization`, or a file's fp8 layer) get the fp8
candidates (tune_space.candidates) and entries keyed f8E4M3FN with their
scaling. Their weights are random values quantized per the scheme as
checkpoints are, the rows of both grouped matmuls quantized as
moe.quantize does (per token and 128 columns for block scales, per token
otherwise), and each candidate is checked against a float32 reference per
expert on the dequantized operands (the same e4m3 values: only the order of
summation differs), within the same 1e-2. The peer timed for the record is
torch._scaled_grouped_mm on the same e4m3 operands with rowwise scales (it
has no block scales), where this torch has it.

    from moe_mlir.testing.tuner import tune_layer
    tune_layer("bench/Inputs/e256-top8-no-shared.mlir",
               compiler="/tmp/moe-compile", output="my-configs.json")
"""

import dataclasses
import datetime
import os
import time

import torch

from .. import Bundle, Error
from . import tune_space
from .gemm import model_cases, random_inputs
from .reference import Reference
from .timing import L2Flush, time_us

TOLERANCE = 1e-2
DEVICE = "cuda"
# Candidates timed a second time, longer, before one is chosen.
FINALISTS = 3


@dataclasses.dataclass
class Budget:
    """How long each candidate is timed: up to `iterations` calls within
    about `case_s` seconds, and each finalist again for `final_s`."""
    iterations: int = 15
    case_s: float = 0.3
    final_s: float = 1.5

    def calls(self, budget_s, first_us):
        """Timed calls for `budget_s` seconds of calls that took `first_us`
        once: the iterations scaled to the budget, fewer for slow calls."""
        return max(3, min(self.iterations * int(budget_s / self.case_s),
                          int(budget_s * 1e6 / max(first_us, 1.0))))


def measure(path, case, flush, budget, budget_s=None):
    """(µs or None, why): the bundle at `path` called on a poisoned output,
    checked against grouped_mm, then timed for about `budget_s` (the
    budget's case_s by default). The bundle is loaded for this measurement
    only: hundreds of candidates' split-K workspaces would not fit beside the
    weights."""
    try:
        bundle = Bundle(path)
    except Error as error:  # a workspace that does not fit, say
        return None, f"load failed: {error}"
    try:
        return _measure_loaded(bundle, case, flush, budget,
                               budget_s or budget.case_s)
    finally:
        bundle.close()


def _measure_loaded(bundle, case, flush, budget, budget_s):
    output = case.tensors[-1]

    def ours():
        bundle.run(case.tokens, case.tensors)

    output.fill_(float("nan"))
    try:
        first = time_us(ours, flush, 1, warm_up_calls=0)
    except RuntimeError as error:
        return None, f"run failed: {error}"
    worst, norm = case.compare()
    if not norm <= TOLERANCE:
        return None, f"mismatch: norm {norm:.2e}, max {worst:.2e}"
    return time_us(ours, flush, budget.calls(budget_s, first)), ""


def _tune_case(case, plan, flush, budget):
    """(best µs, best config (None when the heuristic's was fastest),
    heuristic µs, the peer's µs with the epilogue (None when it failed),
    timed, rejected) of one grouped matmul at one T."""
    label = f"{case.spec['model']} {case.part} m{case.spec['block_m']} " \
            f"T={case.tokens}"
    # moe-tile's heuristic config, compiled for this T.
    heuristic_us, why = measure(plan["heuristic"][case.tokens], case, flush,
                                budget)
    if heuristic_us is None:
        raise RuntimeError(f"{label}: the heuristic's bundle {why}")
    try:
        peer_us = time_us(case.peer_epilogue, flush, budget.iterations)
    except (AttributeError, RuntimeError) as error:  # a torch without it
        print(f"  {label}: {case.peer_name} failed, not timed: {error}",
              flush=True)
        peer_us = None
    timed, rejected = [], len(plan["rejected"])
    for config, path in plan["candidates"]:
        if not tune_space.timed_at(config, case.tokens):
            continue
        us, why = measure(path, case, flush, budget)
        if us is None:
            rejected += 1
            print(f"  {label} {config}: {why}", flush=True)
        else:
            timed.append((us, config, path))
    if not timed:
        raise RuntimeError(f"{label}: no candidate ran correctly")
    # Short timings rank the candidates; the few fastest are timed again,
    # longer, back to back, so that a lucky short run (clocks still high,
    # say) does not decide. The heuristic runs in that round too (config
    # None): a candidate becomes an entry only by beating it there.
    finalists = sorted(timed, key=lambda item: item[0])[:FINALISTS]
    final = []
    for _, config, path in finalists + [
            (heuristic_us, None, plan["heuristic"][case.tokens])]:
        us, _ = measure(path, case, flush, budget, budget.final_s)
        if us is not None:
            final.append((us, config, path))
    heuristic_us = next((us for us, config, _ in final if config is None),
                        heuristic_us)
    best_us, best, _ = min(final or finalists, key=lambda item: item[0])
    return best_us, best, heuristic_us, peer_us, len(timed), rejected


def _tune_tokens(pair, tokens, plans, weights, reference, flush, budget,
                 generator, device):
    """The database entries of a layer's two grouped matmuls (`pair`, at
    one routing block size) at `tokens` tokens."""
    x_all, w13, w2 = weights
    cases, _ = model_cases(pair, tokens, x_all, w13, w2, reference,
                           generator)
    entries = []
    for part, (case, _) in cases.items():
        gemm = pair[part]
        best_us, best, heuristic_us, peer_us, timed, rejected = _tune_case(
            case, plans[tune_space.plan_key(gemm)], flush, budget)
        measured = {"us": round(best_us, 1),
                    "heuristic_us": round(heuristic_us, 1)}
        if peer_us is not None:
            measured[f"{case.peer_name}_epilogue_us"] = round(peer_us, 1)
        measured.update({"timed": timed, "rejected": rejected,
                         "layer": gemm["sizes"],
                         "date": datetime.date.today().isoformat()})
        # Where the heuristic wins, an entry that says so: with no entry the
        # bucket would take its nearest neighbour's.
        entries.append(tune_space.entry(
            gemm, device, tokens,
            best if best is not None else tune_space.HEURISTIC, measured))
        peer = "-" if peer_us is None else f"{peer_us:9.1f}"
        print(f"{gemm['model']:14} {part} m{gemm['block_m']:<3} "
              f"T={tokens:<5} best {best_us:9.1f} us "
              f"{best or 'the heuristic (its entry says so)'}  heuristic "
              f"{heuristic_us:9.1f} us ({heuristic_us / best_us:.2f}x)  "
              f"{case.peer_name}+epilogue {peer} us  [{timed} timed, "
              f"{rejected} rejected]", flush=True)
    return entries


def _write(output, entries):
    """Merges `entries` (and the retirements among them) into the database
    `output` (what was measured survives a later failure)."""
    tune_space.write_database(output, tune_space.merge(
        tune_space.read_database(output), entries))


def tune_layers(layers, *, compiler, output=None,
                tokens=tune_space.DEFAULT_TOKENS, dtype="bf16",
                quantization=None, block_m=(64,), work="out/tune", jobs=None,
                build="build-runtime", budget=None, seed=2026,
                time_limit_s=None):
    """Tunes both grouped matmuls of each of `layers` at each of `tokens`
    (token buckets) and each routing block size of `block_m` (64, 128) on
    this GPU; returns the database entries, and with `output` merges them
    into that database (its entries for other keys and buckets are kept)
    after each bucket.

    A layer is a moe_mlir.Layer, an MLIR file of one moe.fused_moe, a
    moe-compile --layer-sizes text or a preset name (tune_space.
    resolve_layer; `dtype` and `quantization`, None or fp8 weights scaled
    per "tensor", "channel" or "block", are those of presets and sizes, a
    file has its own). `compiler` is moe-compile; candidates' bundles go to
    `work`, compiled in `jobs` threads; `build` is the build directory with
    libmoe_reference.so (the routing); `budget` a Budget. With
    `time_limit_s`, buckets that would end past that many seconds from the
    call are left out, and said so. Raises CompileError when a layer is not
    one moe-compile knows."""
    if not torch.cuda.is_available():
        raise RuntimeError("tuning needs the GPU it tunes for: no CUDA "
                           "device")
    started = time.time()
    budget = budget or Budget()
    tokens_list = sorted(tokens)
    device = torch.cuda.get_device_name()
    resolved = [tune_space.resolve_layer(compiler, layer, dtype,
                                         quantization)
                for layer in layers]
    names = [layer["name"] for layer in resolved]
    if len(set(names)) != len(names):
        raise ValueError(f"two layers of one name: {names}")
    for layer in resolved:
        if layer["dtype"] not in ("bf16", "f16"):
            raise ValueError(f"{layer['name']}: moe-tune tunes bf16 and f16 "
                             f"layers, not {layer['dtype']}")
    described = [layer["name"] + (f" (fp8, {layer['quantization']} scales)"
                                  if layer.get("quantization") else "")
                 for layer in resolved]
    print(f"moe-tune: {device}, torch {torch.__version__}, T {tokens_list}, "
          f"block_m {list(block_m)}, layers {described}", flush=True)
    os.makedirs(work, exist_ok=True)
    pairs = {(layer["name"], rows): {gemm["part"]: gemm for gemm in
                                     tune_space.gemms(
                                         layer, layer["dtype"], rows,
                                         layer.get("quantization"))}
             for layer in resolved for rows in block_m}
    plans = tune_space.compile_all(
        tune_space.Compiler(compiler, work, device),
        [gemm for pair in pairs.values() for gemm in pair.values()],
        tokens_list, jobs or os.cpu_count())
    reference = Reference(build)
    flush = L2Flush(DEVICE)
    generator = torch.Generator().manual_seed(seed)
    entries, skipped, longest = [], [], 0.0
    for layer in resolved:
        weights = None
        for rows in block_m:
            for tokens in tokens_list:
                if (time_limit_s is not None and
                        time.time() - started + longest > time_limit_s):
                    skipped.append(f"{layer['name']} m{rows} T={tokens}")
                    continue
                # Allocated once per layer (DeepSeek-V3's w13 is 15 GB).
                weights = weights or random_inputs(
                    pairs[(layer["name"], rows)]["gemm1"], max(tokens_list))
                bucket_started = time.time()
                new = _tune_tokens(pairs[(layer["name"], rows)], tokens,
                                   plans, weights, reference, flush, budget,
                                   generator, device)
                longest = max(longest, time.time() - bucket_started)
                entries += [item for item in new if "config" in item]
                if output:
                    _write(output, new)
        print(f"# {layer['name']}: {time.time() - started:.0f} s so far",
              flush=True)
        del weights
        torch.cuda.empty_cache()
    if skipped:
        print(f"moe-tune: time limit of {time_limit_s:.0f} s: not tuned "
              f"{', '.join(skipped)}", flush=True)
    return entries


def tune_layer(layer, **options):
    """tune_layers([layer], **options): the database entries of one layer."""
    return tune_layers([layer], **options)

