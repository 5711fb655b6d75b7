#!/usr/bin/env python3
"""Router benchmark: the moe.gate kernel of moe-compile against the torch
composition of the same router (eager, torch.compile, and CUDA-graph replay
of both), for DeepSeek-V3, Kimi-K2 and Qwen3-30B-A3B at T in {1, 128, 4096,
16384}, L2 flushed before every timed call. Prints microseconds (median of
CUDA-event timings), the speed-up over the best torch variant, the memory
floor (bytes moved / 3.0 TB/s) and ours (graph-replayed) over the floor."""

import argparse

import torch

from moe_mlir import Bundle
from moe_mlir.testing.bundles import bundle_path, load_specs
from moe_mlir.testing.peers import torch_router
from moe_mlir.testing.timing import L2Flush, floor_us, graphed, time_us


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bundles", default="out/gpu-bundles")
    parser.add_argument("--tokens", default="1,128,4096,16384")
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args()
    flush = L2Flush()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    header = (f"{'router':10} {'T':>6} {'eager':>9} {'compiled':>9} "
              f"{'comp+graph':>10} {'ours':>8} {'ours+graph':>10} "
              f"{'speed-up':>8} {'floor':>7} {'ours/floor':>10}  (us)")
    print(header)
    for spec in load_specs(args.bundles):
        if spec["kind"] != "router":
            continue
        router = spec["router"]
        name = spec["name"].removeprefix("router-")
        bundle = Bundle(bundle_path(args.bundles, spec))
        reference = torch_router(router)
        compiled = torch.compile(reference, dynamic=False)
        experts, slots = router["experts"], router["top_k"] + router["shared"]
        for tokens in map(int, args.tokens.split(",")):
            logits = torch.randn(tokens, experts, device="cuda") * 2
            bias = (torch.randn(experts, device="cuda") * 0.1
                    if router["bias"] else None)
            weights = torch.empty(tokens, slots, device="cuda")
            ids = torch.empty(tokens, slots, dtype=torch.int32, device="cuda")
            tensors = [logits] + ([bias] if bias is not None else []) + [weights, ids]

            def ours():
                bundle.run(tokens, tensors)

            # Five untimed calls first: torch.compile and the graphs settle.
            def timed(function):
                return time_us(function, flush, args.iterations,
                               warm_up_calls=5)

            times = {
                "eager": timed(lambda: reference(logits, bias)),
                "compiled": timed(lambda: compiled(logits, bias)),
                "comp+graph": timed(graphed(lambda: compiled(logits,
                                                             bias))[0]),
                "ours": timed(ours),
                "ours+graph": timed(graphed(ours)[0]),
            }
            # The torch result must agree with ours before its time counts.
            ours()
            torch.cuda.synchronize()
            torch_ids = reference(logits, bias)[1].sort(dim=-1)[0]
            our_ids = ids[:, :router["top_k"]].sort(dim=-1)[0]
            agree = (torch_ids == our_ids).all(dim=-1).float().mean().item()
            best_torch = min(times["eager"], times["compiled"],
                             times["comp+graph"])
            floor = floor_us(logits.numel() * 4 + experts * 4 +
                             tokens * slots * 8)
            print(f"{name:10} {tokens:>6} {times['eager']:9.1f} "
                  f"{times['compiled']:9.1f} {times['comp+graph']:10.1f} "
                  f"{times['ours']:8.1f} {times['ours+graph']:10.1f} "
                  f"{best_torch / times['ours+graph']:7.1f}x {floor:7.2f}"
                  f" {times['ours+graph'] / floor:9.1f}x"
                  f"  ids agree on {agree:.1%} of tokens", flush=True)
        bundle.close()


if __name__ == "__main__":
    main()
