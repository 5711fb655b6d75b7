#!/usr/bin/env python3
"""Grouped-matmul benchmark: the two grouped matmuls of a layer as moe-compile
makes them (--part gemm1: w13 with SiLU-and-mul, tokens gathered in the
kernel, rows out in expert-sorted padded order; --part gemm2: w2 times the
routed weights, rows out in slot order) against torch.nn.functional.grouped_mm
on the same data (rows pre-gathered in expert order, offs the int32 cumulative
row counts), alone and with the epilogue in torch (silu(gate) * up; the
routed-weight multiply and the scatter to slot order). Full-size Mixtral-8x7B,
Qwen3-30B-A3B and DeepSeek-V3 (shared expert fused as expert 256) at
T in {1, 16, 64, 256, 1024, 4096}, experts drawn uniformly (each token's top_k
distinct routed experts uniformly at random, as layer_bench.py's --routing
uniform; DeepSeek-V3's group limit is not imposed, which changes no expert's
rows: under either draw each expert gets each token with chance top_k / E,
so its rows are Binomial(T, top_k / E)), L2 flushed (256 MiB read) before
every timed call. Prints microseconds (median of CUDA-event timings), ours
over grouped_mm, the floor = max(bytes / 3.0 TB/s, flops / 720 TFLOP/s),
bytes = the weights of the experts that received rows plus the activations
read and written once, and ours and grouped_mm over the floor. Our output must match the peer's
(||error|| / ||peer|| <= 1e-2) for a time to be printed; a case whose call
would take longer than --max-call-s is skipped with the reason.

With --check-heuristic (and --compiler) it checks moe-tile's heuristic
against the tuned database instead: for every entry of --check-db (the
shipped configs/gemm-configs.json) for this GPU, at the entry's bucket and
routing block size, the entry's config against the heuristic's (compiled
for a device no database has), both checked like moe-tune's candidates
(against grouped_mm; fp8 entries, compiled with --quantization of the
entry's scaling and bf16 hidden states, against the float32 reference on
the dequantized operands) and timed twice, alternately (the lower median of
each counts). Prints heuristic / tuned per entry and the worst ratio;
--models, --tokens, --block-m and --dtype pick entries."""

import argparse
import concurrent.futures
import json
import os
import re
import sys
import time

import torch

from moe_mlir import Bundle
from moe_mlir.testing import tune_space
from moe_mlir.testing.bundles import bundle_path, load_specs
from moe_mlir.testing.compiler import compile_bundle, list_presets
from moe_mlir.testing.gemm import model_cases, random_inputs, random_weights
from moe_mlir.testing.reference import Reference
from moe_mlir.testing.timing import L2Flush, floor_us, time_us
from moe_mlir.testing.tuner import Budget, measure

TOLERANCE = 1e-2
DEVICE = "cuda"

torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 fallback check


def run_case(case, bundle, flush, args, estimate):
    """(result dict) for one case; skips ours when it would be too slow."""
    def ours():
        bundle.run(case.tokens, case.tensors)

    floor = floor_us(case.bytes, case.flops)
    result = {"floor": floor, "ours": None, "note": ""}
    peer_iterations = args.iterations
    try:
        result["peer"] = time_us(case.peer, flush, peer_iterations)
        result["peer_epi"] = time_us(case.peer_epilogue, flush,
                                     peer_iterations)
    except Exception as error:  # report the peer's failure, time ours still
        result["peer"] = result["peer_epi"] = None
        result["note"] = f"peer failed: {type(error).__name__}: {error}"
    if estimate is not None and estimate > args.max_call_s * 1e6:
        result["note"] = (f"ours skipped: about {estimate / 1e6:.2f} s a call "
                          f"(scaled from the last T) > {args.max_call_s} s")
        return result
    first = time_us(ours, flush, 1, warm_up_calls=0)  # also the warm-up
    result["probe"] = first
    if first > args.max_call_s * 1e6:
        result["note"] = (f"ours skipped after one call: {first / 1e6:.2f} s "
                          f"> {args.max_call_s} s")
        return result
    iterations = max(3, min(args.iterations,
                            int(args.case_budget_s * 1e6 / first)))
    result["ours"] = time_us(ours, flush, iterations, warm_up_calls=0)
    result["iterations"] = iterations
    ours()
    against = "grouped_mm"
    if result["peer_epi"] is not None:
        worst, norm = case.compare()
    else:
        against = "fp32 torch reference"
        worst, norm = case.compare(case.reference())
    result["error"] = norm
    if not norm <= TOLERANCE:
        result["note"] += (f" MISMATCH vs {against}: norm {norm:.2e}, "
                           f"max {worst:.2e} (time not valid)")
        result["wrong"] = True
    return result


def bundle_paths(args, pair, tokens_list):
    """{(part, T): bundle} of a model's two grouped matmuls: --bundles' one
    for every T, or with --compiler one compiled for each T."""
    if not args.compiler:
        return {(part, tokens): bundle_path(args.bundles, pair[part])
                for part in pair for tokens in tokens_list}
    os.makedirs(args.work, exist_ok=True)
    paths = {}
    for part, spec in pair.items():
        for tokens in tokens_list:
            path = os.path.join(args.work, f"{spec['name']}-{tokens}.moeb")
            for line in compile_bundle(
                    args.compiler,
                    [*spec["args"], "--tokens-max", str(tokens),
                     "--token-buckets", "max", "--block-m",
                     str(spec["block_m"])], path, args.config_db):
                print(f"# {spec['name']} T={tokens}: {line}", flush=True)
            paths[(part, tokens)] = path
    return paths


def compile_checks(args, checks, device):
    """{(index, "tuned" | "heuristic"): (bundle, moe-compile's warnings)}
    of each (gemm, entry) of `checks`, compiled at the entry's bucket."""
    os.makedirs(args.work, exist_ok=True)
    compiler = tune_space.Compiler(args.compiler, args.work, device)
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        futures = {}
        for index, (gemm, item) in enumerate(checks):
            name = (f"check-{gemm['model']}-{gemm['part']}-"
                    f"{weights_label(gemm).replace(' ', '-')}-"
                    f"m{gemm['block_m']}-t{item['tokens']}")
            for kind, config in (("tuned", item["config"]),
                                 ("heuristic", None)):
                futures[(index, kind)] = pool.submit(
                    compiler.compile, gemm, f"{name}-{kind}", item["tokens"],
                    config)
        bundles = {key: future.result() for key, future in futures.items()}
    for (index, kind), (bundle, message) in bundles.items():
        if bundle is None:
            raise RuntimeError(f"{kind} bundle of entry {checks[index][1]} "
                               f"does not compile: {message}")
    return bundles


def heuristic_config(bundle, warnings):
    """The config moe-tile's heuristic chose (its warning names it) and the
    K splits moe-split-k added (the bundle's partial-sum workspace)."""
    found = re.search(r"#moe\.gemm_config<([^>]*)>", " ".join(warnings))
    config = found.group(1).replace(" = ", "=") if found else "?"
    with open(os.path.join(bundle, "manifest.txt")) as file:
        for line in file:
            if line.startswith("workspace gemm_partials "):
                config += f", split_k={line.split()[3]}"
    return config


def time_pair(paths, case, flush, budget):
    """{kind: µs or None, "why": ...}: each bundle of `paths` (tuned,
    heuristic) measured twice, alternately, the lower median kept."""
    times, why = {kind: [] for kind in paths}, ""
    for _ in range(2):
        for kind, path in paths.items():
            us, message = measure(path, case, flush, budget)
            if us is None:
                why += f" {kind}: {message}"
            else:
                times[kind].append(us)
    result = {kind: min(values) if len(values) == 2 else None
              for kind, values in times.items()}
    return dict(result, why=why.strip())


def check_heuristic(args, tokens_list, flush, reference, generator):
    """--check-heuristic: heuristic / tuned for each tuned entry; 1 when an
    entry or the heuristic failed its check."""
    device = torch.cuda.get_device_name()
    # Entries that name the heuristic have nothing to check against it.
    entries = [item for item in tune_space.read_database(args.check_db)
               if item["config"] != tune_space.HEURISTIC
               and item["device"] == device and item["tokens"] in tokens_list
               and (not args.block_m or item.get("block_m") == args.block_m)
               and (not args.dtype or item["dtype"] == args.dtype)]
    checks, unmatched = tune_space.entry_gemms(
        args.compiler, entries, list_presets(args.compiler))
    for item in unmatched:
        print(f"# no layer known for entry {tune_space.entry_key(item)}: not "
              f"checked", flush=True)
    if args.models:
        checks = [(gemm, item) for gemm, item in checks
                  if gemm["model"] in args.models.split(",")]
    print(f"# {len(checks)} entries of {args.check_db} for {device}",
          flush=True)
    bundles = compile_checks(args, checks, device)
    budget = Budget(args.iterations, args.case_budget_s)
    print("| gemm | block_m | T | tuned config | tuned µs | heuristic config "
          "| heuristic µs | heuristic / tuned | moe-tune's |")
    print("|---|---:|---:|---|---:|---|---:|---:|---:|", flush=True)
    rows, failed = [], 0
    layers = sorted({(gemm["model"], weights_label(gemm))
                     for gemm, _ in checks})
    for model, label in layers:
        mine = [(index, gemm, item) for index, (gemm, item)
                in enumerate(checks) if (gemm["model"], weights_label(gemm))
                == (model, label)]
        x_all, w13, w2 = random_inputs(
            mine[0][1], max(item["tokens"] for _, _, item in mine))
        for block_m, tokens in sorted({(gemm["block_m"], item["tokens"])
                                       for _, gemm, item in mine}):
            here = sorted(((index, gemm, item) for index, gemm, item in mine
                           if (gemm["block_m"], item["tokens"]) ==
                           (block_m, tokens)),
                          key=lambda check: check[1]["part"])
            cases, _ = model_cases(tune_space.gemm_pair(here[0][1]), tokens,
                                   x_all, w13, w2, reference, generator)
            for index, gemm, item in here:
                paths = {kind: bundles[(index, kind)][0]
                         for kind in ("tuned", "heuristic")}
                result = time_pair(paths, cases[gemm["part"]][0], flush,
                                   budget)
                row = {"name": f"{model} {gemm['part']} {label}",
                       "block_m": block_m,
                       "tokens": tokens, "entry": item, "result": result,
                       "heuristic": heuristic_config(
                           *bundles[(index, "heuristic")])}
                failed += not (result["tuned"] and result["heuristic"])
                rows.append(row)
                print(check_row(row), flush=True)
            del cases
        del w13, w2, x_all
        torch.cuda.empty_cache()
    timed = [row for row in rows
             if row["result"]["tuned"] and row["result"]["heuristic"]]
    if timed:
        worst = max(timed, key=check_ratio)
        behind = [row for row in timed if check_ratio(row) > 1.10]
        print(f"gemm_bench: worst heuristic / tuned {check_ratio(worst):.3f}"
              f" ({worst['name']} block_m {worst['block_m']} "
              f"T={worst['tokens']}); {len(behind)} of {len(timed)} entries "
              f"more than 10 % behind")
    print(f"gemm_bench: {failed} failed check(s)" if failed else
          "gemm_bench: all outputs matched")
    return 1 if failed else 0


def weights_label(gemm):
    """"bf16", or "f8E4M3FN block" for fp8 weights and their scaling."""
    return " ".join(filter(None, (tune_space.weight_dtype(gemm),
                                  gemm["quantization"])))


def check_ratio(row):
    return row["result"]["heuristic"] / row["result"]["tuned"]


def check_row(row):
    result, item = row["result"], row["entry"]
    config = ", ".join(f"{key}={json.dumps(value)}" for key, value in
                       item["config"].items())
    measured = item.get("measured", {})
    recorded = (f"{measured['heuristic_us'] / measured['us']:.2f}x"
                if "heuristic_us" in measured and measured.get("us") else "-")
    ratio = (f"{check_ratio(row):.3f}x"
             if result["tuned"] and result["heuristic"] else result["why"])
    return (f"| {row['name']} | {row['block_m']} | {row['tokens']} | "
            f"{config} | {cell(result['tuned'], '.1f')} | "
            f"{row['heuristic']} | {cell(result['heuristic'], '.1f')} | "
            f"{ratio} | {recorded} |")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build-runtime")
    parser.add_argument("--bundles", default="out/gpu-bundles")
    parser.add_argument("--compiler", default="",
                        help="compile one bundle per T (--tokens-max T, so "
                             "that moe-tile takes that bucket's tuned "
                             "config) with this moe-compile instead of "
                             "using --bundles' (made for 16384 tokens)")
    parser.add_argument("--config-db", default="",
                        help="with --compiler: a tuned database before the "
                             "shipped entries")
    parser.add_argument("--block-m", type=int, default=0,
                        help="with --compiler: routing blocks of this many "
                             "rows instead of the specs' (128 gives the "
                             "kernels two warpgroups); with "
                             "--check-heuristic: the entries of this block "
                             "size only")
    parser.add_argument("--check-heuristic", action="store_true",
                        help="with --compiler: time each tuned entry of "
                             "--check-db against moe-tile's heuristic")
    parser.add_argument("--dtype", default="",
                        choices=("", "bf16", "f16", tune_space.FP8),
                        help="with --check-heuristic: the entries of this "
                             "weight type only")
    parser.add_argument("--check-db", default=os.path.join(
                            os.path.dirname(os.path.abspath(__file__)), "..",
                            "configs", "gemm-configs.json"),
                        help="the database --check-heuristic checks (the "
                             "shipped one)")
    parser.add_argument("--work", default="out/gemm-bench",
                        help="with --compiler: where the bundles go")
    parser.add_argument("--tokens", default="1,16,64,256,1024,4096")
    parser.add_argument("--models", default="",
                        help="comma-separated preset (or, with "
                             "--check-heuristic, layer) names (default: all)")
    parser.add_argument("--iterations", type=int, default=20,
                        help="most timed calls per variant")
    parser.add_argument("--case-budget-s", type=float, default=1.5,
                        help="time of our calls per case, fewer reps above")
    parser.add_argument("--max-call-s", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    if args.check_heuristic and not args.compiler:
        parser.error("--check-heuristic compiles: give --compiler")
    tokens_list = [int(t) for t in args.tokens.split(",")]
    flush = L2Flush(DEVICE)
    reference = Reference(args.build)
    generator = torch.Generator().manual_seed(args.seed)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if args.check_heuristic:
        return check_heuristic(args, tokens_list, flush, reference, generator)
    print(f"{'gemm':20} {'T':>5} {'act.e':>5} {'ours':>11} {'grouped_mm':>10} "
          f"{'+epilogue':>10} {'ours/gmm':>9} {'floor':>8} {'ours/floor':>10} "
          f"{'gmm/floor':>9} {'error':>8}  (us)", flush=True)
    # With --compiler the specs come from the source tree's bundles.json.
    specs = [s for s in load_specs(os.path.join(
                 os.path.dirname(__file__), "..", "test", "GPU")
                 if args.compiler else args.bundles)
             if s["kind"] == "gemm" and s.get("bench")]
    if args.block_m:
        specs = [dict(s, block_m=args.block_m) for s in specs]
    models = list(dict.fromkeys(s["model"] for s in specs))
    if args.models:
        models = [m for m in models if m in args.models.split(",")]
    rows_out = []
    failed = 0
    for model in models:
        pair = {s["part"]: s for s in specs if s["model"] == model}
        spec = pair["gemm1"]
        hidden = spec["hidden"]
        started = time.time()
        # Weights allocated once per model (DeepSeek-V3's w13 is 15 GB).
        w13, w2 = random_weights(spec["experts"], hidden,
                                 spec["intermediate"])
        x_all = torch.randn(max(tokens_list), hidden, dtype=torch.bfloat16,
                            device=DEVICE)
        paths = bundle_paths(args, pair, tokens_list)
        opened = {path: Bundle(path)
                  for path in set(paths.values())}
        bundles = {key: opened[path] for key, path in paths.items()}
        last = {}  # part -> (padded rows, our µs) of the last T, to scale
        for tokens in tokens_list:
            cases, padded = model_cases(pair, tokens, x_all, w13, w2,
                                        reference, generator)
            for case, active in cases.values():
                estimate = None
                if case.part in last:
                    rows_then, time_then = last[case.part]
                    estimate = time_then * padded / max(rows_then, 1)
                result = run_case(case, bundles[(case.part, tokens)], flush,
                                  args, estimate)
                if result["ours"] is not None:
                    last[case.part] = (padded, result["ours"])
                elif "probe" in result:
                    last[case.part] = (padded, result["probe"])
                elif estimate is not None:
                    last[case.part] = (padded, estimate)
                failed += bool(result.get("wrong"))
                name = f"{model} {case.part}"
                rows_out.append((name, tokens, active, result))
                print(format_row(name, tokens, active, result), flush=True)
            del cases
        for bundle in opened.values():
            bundle.close()
        del w13, w2, x_all
        torch.cuda.empty_cache()
        print(f"# {model}: {time.time() - started:.1f} s", flush=True)
    print("\n| gemm | T | active experts | ours µs | grouped_mm µs | "
          "+epilogue µs | ours / grouped_mm | floor µs | ours / floor | "
          "grouped_mm / floor | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, tokens, active, result in rows_out:
        print(markdown_row(name, tokens, active, result))
    print(f"gemm_bench: {'all outputs matched' if not failed else f'{failed} mismatch(es)'}")
    return 1 if failed else 0


def cell(value, form):
    width = form.split(".")[0]
    return ("-".rjust(int(width)) if width else "-") if value is None \
        else format(value, form)


def ratios(result):
    ours, peer, floor = result["ours"], result.get("peer"), result["floor"]
    return (ours / peer if ours and peer else None,
            ours / floor if ours else None,
            peer / floor if peer else None)


def format_row(name, tokens, active, result):
    slower, ours_floor, peer_floor = ratios(result)
    return (f"{name:20} {tokens:>5} {active:>5} {cell(result['ours'], '11.1f')} "
            f"{cell(result.get('peer'), '10.1f')} "
            f"{cell(result.get('peer_epi'), '10.1f')} "
            f"{cell(slower, '8.1f')}x {result['floor']:8.1f} "
            f"{cell(ours_floor, '9.1f')}x {cell(peer_floor, '8.1f')}x "
            f"{cell(result.get('error'), '8.1e')}  {result['note']}")


def markdown_row(name, tokens, active, result):
    slower, ours_floor, peer_floor = ratios(result)
    ours = cell(result["ours"], ".1f") if result["ours"] else result["note"]
    return (f"| {name} | {tokens} | {active} | {ours} | "
            f"{cell(result.get('peer'), '.1f')} | "
            f"{cell(result.get('peer_epi'), '.1f')} | "
            f"{cell(slower, '.1f')}x | {result['floor']:.1f} | "
            f"{cell(ours_floor, '.1f')}x | {cell(peer_floor, '.1f')}x | "
            f"{cell(result.get('error'), '.1e')} |")


if __name__ == "__main__":
    sys.exit(main())
