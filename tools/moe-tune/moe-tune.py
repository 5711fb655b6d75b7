#!/usr/bin/env python3
"""moe-tune: searches the #moe.gemm_config of each grouped matmul of the
given presets on this machine's GPU and writes the config database
(docs/CONFIG-DATABASE.md) that moe-tile reads.

For every preset and grouped matmul (gemm1: w13 with SiLU-and-mul, token
rows gathered; gemm2: w2 with routed weights, sorted rows) it compiles each
candidate of moe_mlir.testing.tune_space with moe-compile (in parallel; the
static moe-compile runs on a machine without MLIR), plus moe-tile's
heuristic at each token count. Then, at each T, on fresh random routing (experts drawn
uniformly) and weights, it runs each candidate once on a NaN-poisoned output
and checks it against torch.nn.functional.grouped_mm with the epilogue in
torch (||error|| / ||peer|| <= 1e-2): a candidate that fails is dropped,
whatever its time. The rest are timed with CUDA events (a warm-up call, then
the median of up to --iterations calls, L2 flushed before each); the three
fastest are timed again for longer (--final-budget-s), and the fastest of
those becomes the entry for (E, N, K, dtype, device name, T). Each entry
records what was measured: the winner's and the heuristic's µs, grouped_mm's,
and how many candidates were timed and rejected.

  tools/moe-tune/moe-tune.py --compiler moe-compile --output configs/gemm-configs.json
"""

import argparse
import concurrent.futures
import datetime
import os
import sys
import time

import torch

from moe_mlir import Bundle, Error
from moe_mlir.testing import tune_space
from moe_mlir.testing.compiler import (CompileError, compile_bundle,
                                       list_presets)
from moe_mlir.testing.gemm import model_cases, random_weights
from moe_mlir.testing.reference import Reference
from moe_mlir.testing.timing import flush_buffer, time_us

TOLERANCE = 1e-2
DEVICE = "cuda"
# Candidates timed a second time, longer, before one is chosen.
FINALISTS = 3
# A device name no database has: compiling for it gives moe-tile's heuristic.
HEURISTIC_DEVICE = "moe-tune: no device (the heuristic)"


class Compiler:
    """moe-compile, run for one grouped matmul of a preset."""

    def __init__(self, path, work, device):
        self.path, self.work, self.device = path, work, device

    def compile(self, gemm, name, tokens_max, config=None):
        """(bundle path, None) or (None, the compiler's message); `config`
        None compiles the heuristic's config."""
        bundle = os.path.join(self.work, name + ".moeb")
        arguments = ["--preset", gemm["model"], "--part", gemm["part"],
                     "--dtype", gemm["dtype"], "--block-m",
                     str(gemm["block_m"]), "--tokens-max", str(tokens_max),
                     "--token-buckets", "max"]
        database, device = "", HEURISTIC_DEVICE
        if config is not None:
            database = os.path.join(self.work, name + ".json")
            device = self.device
            tune_space.write_database(database, [tune_space.entry(
                gemm, self.device, 1, config)])
        try:
            compile_bundle(self.path, arguments, bundle, database, device)
        except CompileError as error:
            return None, str(error)
        return bundle, None


def compile_all(compiler, gemms, tokens_list, jobs):
    """{(model, part): {"candidates": [(config, bundle)], "heuristic":
    {T: bundle}, "rejected": [(config, why)]}}, compiled in parallel."""
    plans = {}
    work = []
    for gemm in gemms:
        plan = plans.setdefault((gemm["model"], gemm["part"]),
                                {"candidates": [], "heuristic": {},
                                 "rejected": []})
        for config in tune_space.candidates(gemm["block_m"]):
            tokens_max = (max(tokens_list) if config["split_k"] == 1 else
                          min(max(tokens_list), tune_space.SPLIT_MAX_TOKENS))
            work.append((plan, gemm, config,
                         tune_space.config_name(gemm, config), tokens_max))
        for tokens in tokens_list:
            work.append((plan, gemm, None,
                         f"{gemm['model']}-{gemm['part']}-heuristic-{tokens}",
                         tokens))
    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [(item, pool.submit(compiler.compile, item[1], item[3],
                                      item[4], item[2])) for item in work]
        for (plan, gemm, config, name, tokens_max), future in futures:
            bundle, why = future.result()
            if config is None:
                if bundle is None:
                    raise RuntimeError(f"the heuristic config of {name} does "
                                       f"not compile: {why}")
                plan["heuristic"][tokens_max] = bundle
            elif bundle is None:
                plan["rejected"].append((config, why))
            else:
                plan["candidates"].append((config, bundle))
    print(f"# compiled {len(work)} bundles in {time.time() - started:.0f} s "
          f"with {jobs} jobs", flush=True)
    return plans


def measure(path, case, flush, args, budget_s=None):
    """(µs or None, why): the bundle at `path` called on a poisoned output,
    checked against grouped_mm, then timed for about `budget_s` (the case
    budget by default). The bundle is loaded for this measurement only:
    hundreds of candidates' split-K workspaces would not fit beside the
    weights."""
    try:
        bundle = Bundle(path)
    except Error as error:  # a workspace that does not fit, say
        return None, f"load failed: {error}"
    try:
        return measure_loaded(bundle, case, flush, args,
                              budget_s or args.case_budget_s)
    finally:
        bundle.close()


def measure_loaded(bundle, case, flush, args, budget_s):
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
    iterations = max(3, min(args.iterations * int(budget_s /
                                                  args.case_budget_s),
                            int(budget_s * 1e6 / max(first, 1.0))))
    return time_us(ours, flush, iterations), ""


def tune_model(model, pair, plans, tokens_list, reference, flush, args,
               generator, device):
    """Database entries of the model's two grouped matmuls at each T."""
    gemm1 = pair["gemm1"]
    experts, hidden, inter = (gemm1["experts"], gemm1["hidden"],
                              gemm1["intermediate"])
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[gemm1["dtype"]]
    w13, w2 = random_weights(experts, hidden, inter, dtype)
    x_all = torch.randn(max(tokens_list), hidden, dtype=dtype, device=DEVICE)
    entries = []
    date = datetime.date.today().isoformat()
    for tokens in tokens_list:
        cases, _ = model_cases(pair, tokens, x_all, w13, w2, reference,
                               generator)
        for part, (case, _) in cases.items():
            plan = plans[(model, part)]
            # moe-tile's heuristic config, compiled for this T.
            heuristic_us, why = measure(plan["heuristic"][tokens], case,
                                        flush, args)
            if heuristic_us is None:
                raise RuntimeError(f"{model} {part} T={tokens}: the "
                                   f"heuristic's bundle {why}")
            peer_us = time_us(case.peer_epilogue, flush, args.iterations)
            timed, rejected = [], len(plan["rejected"])
            for config, path in plan["candidates"]:
                if not tune_space.timed_at(config, tokens):
                    continue
                us, why = measure(path, case, flush, args)
                if us is None:
                    rejected += 1
                    print(f"  {model} {part} T={tokens} {config}: {why}",
                          flush=True)
                else:
                    timed.append((us, config, path))
            # Short timings rank the candidates; the few fastest are timed
            # again, longer, back to back, so that a lucky short run (clocks
            # still high, say) does not decide.
            finalists = sorted(timed, key=lambda item: item[0])[:FINALISTS]
            final = []
            for _, config, path in finalists:
                us, why = measure(path, case, flush, args,
                                  budget_s=args.final_budget_s)
                if us is not None:
                    final.append((us, config, path))
            best_us, best, _ = min(final or finalists,
                                   key=lambda item: item[0])
            measured = {"us": round(best_us, 1),
                        "heuristic_us": round(heuristic_us, 1),
                        "grouped_mm_epilogue_us": round(peer_us, 1),
                        "timed": len(timed), "rejected": rejected,
                        "date": date}
            entries.append(tune_space.entry(pair[part], device, tokens, best,
                                            measured))
            print(f"{model:14} {part} T={tokens:<5} best {best_us:9.1f} us "
                  f"{best}  heuristic {heuristic_us:9.1f} us "
                  f"({heuristic_us / best_us:.2f}x)  grouped_mm+epilogue "
                  f"{peer_us:9.1f} us  [{len(timed)} timed, {rejected} "
                  f"rejected]", flush=True)
    del w13, w2, x_all
    torch.cuda.empty_cache()
    return entries


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compiler", default="build/bin/moe-compile",
                        help="moe-compile (the static one travels)")
    parser.add_argument("--build", default="build-runtime",
                        help="build directory with libmoe_reference.so")
    parser.add_argument("--presets",
                        default="mixtral-8x7b,qwen3-30b-a3b,deepseek-v3,"
                                "kimi-k2")
    parser.add_argument("--tokens", default="1,16,64,256,1024,4096")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "f16"))
    parser.add_argument("--block-m", type=int, default=64,
                        help="rows per routing block the GEMMs are tuned "
                             "for (entries record it)")
    parser.add_argument("--output", default="configs/gemm-configs.json",
                        help="database to write; its entries for other "
                             "keys and buckets are kept")
    parser.add_argument("--work", default="out/tune",
                        help="directory for the candidates' bundles")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--case-budget-s", type=float, default=0.3,
                        help="time of one candidate's timed calls, fewer "
                             "iterations above")
    parser.add_argument("--final-budget-s", type=float, default=1.5,
                        help="time of each finalist's second, longer timing")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe-tune: no CUDA device: tuning needs the GPU it tunes for")
    device = torch.cuda.get_device_name()
    tokens_list = sorted(int(t) for t in args.tokens.split(","))
    presets = list_presets(args.compiler)
    unknown = [name for name in args.presets.split(",") if name not in presets]
    if unknown:
        sys.exit(f"moe-tune: unknown presets {unknown} ({', '.join(presets)})")
    print(f"moe-tune: {device}, torch {torch.__version__}, T {tokens_list}",
          flush=True)
    os.makedirs(args.work, exist_ok=True)
    gemms = [gemm for name in args.presets.split(",")
             for gemm in tune_space.gemms(presets[name], args.dtype,
                                          args.block_m)]
    plans = compile_all(Compiler(args.compiler, args.work, device), gemms,
                        tokens_list, args.jobs)
    reference = Reference(args.build)
    flush = flush_buffer(DEVICE)
    generator = torch.Generator().manual_seed(args.seed)
    written = 0
    for name in args.presets.split(","):
        started = time.time()
        pair = {gemm["part"]: gemm for gemm in gemms if gemm["model"] == name}
        entries = tune_model(name, pair, plans, tokens_list, reference,
                             flush, args, generator, device)
        # Written after each model: what was measured survives a later
        # failure.
        merged = tune_space.merge(tune_space.read_database(args.output),
                                  entries)
        tune_space.write_database(args.output, merged)
        written += len(entries)
        print(f"# {name}: {time.time() - started:.0f} s, {len(entries)} "
              f"entries written", flush=True)
    print(f"moe-tune: wrote {written} entries "
          f"({len(tune_space.read_database(args.output))} in all) to "
          f"{args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
