#!/usr/bin/env python3
"""Router benchmark: the moe.gate kernel of moe-compile against the torch
composition of the same router (eager, torch.compile, and CUDA-graph replay
of both), for DeepSeek-V3, Kimi-K2 and Qwen3-30B-A3B at T in {1, 128, 4096,
16384}, L2 flushed before every timed call. Prints microseconds (median of
CUDA-event timings), the speed-up over the best torch variant, and the
memory floor (bytes moved / 3.0 TB/s)."""

import argparse
import os
import sys

import torch

from moe_mlir import Bundle

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "GPU"))
from moe_ctypes import load_specs  # noqa: E402
from timing import flush_buffer, time_us  # noqa: E402

BANDWIDTH = 3.0e12  # measured device-to-device copy on the H100, bytes/s


def torch_router(router):
    """The router as serving engines write it in torch (DeepSeek's grouped
    top-k code for groups, a plain softmax top-k otherwise)."""
    groups, keep = router["groups"], router["topk_groups"]
    top_k, scale = router["top_k"], router["scale"]

    def route(logits, bias):
        tokens, experts = logits.shape
        if router["scoring"] == "sigmoid":
            scores = logits.sigmoid()
        else:
            scores = logits.softmax(dim=-1, dtype=torch.float32)
        selection = scores + bias if bias is not None else scores
        if groups > 1:
            group_scores = selection.view(tokens, groups, -1).topk(
                2, dim=-1)[0].sum(dim=-1)
            group_ids = group_scores.topk(keep, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores).scatter_(1, group_ids, 1)
            mask = group_mask.unsqueeze(-1).expand(
                tokens, groups, experts // groups).reshape(tokens, -1)
            selection = selection.masked_fill(~mask.bool(), float("-inf"))
        ids = selection.topk(top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, ids)
        if router["renormalize"]:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * scale, ids.to(torch.int32)

    return route


def graphed(function):
    function()  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        function()
    return graph.replay


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bundles", default="out/gpu-bundles")
    parser.add_argument("--tokens", default="1,128,4096,16384")
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args()
    flush = flush_buffer()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    header = (f"{'router':10} {'T':>6} {'eager':>9} {'compiled':>9} "
              f"{'comp+graph':>10} {'ours':>8} {'ours+graph':>10} "
              f"{'speed-up':>8} {'floor':>7}  (us)")
    print(header)
    for spec in load_specs(args.bundles):
        if spec["kind"] != "router":
            continue
        router = spec["router"]
        name = spec["name"].removeprefix("router-")
        bundle = Bundle(os.path.join(args.bundles, spec["name"] + ".moeb"))
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
                "comp+graph": timed(graphed(lambda: compiled(logits, bias))),
                "ours": timed(ours),
                "ours+graph": timed(graphed(ours)),
            }
            # The torch result must agree with ours before its time counts.
            ours()
            torch.cuda.synchronize()
            torch_ids = reference(logits, bias)[1].sort(dim=-1)[0]
            our_ids = ids[:, :router["top_k"]].sort(dim=-1)[0]
            agree = (torch_ids == our_ids).all(dim=-1).float().mean().item()
            best_torch = min(times["eager"], times["compiled"],
                             times["comp+graph"])
            floor = (logits.numel() * 4 + experts * 4 +
                     tokens * slots * 8) / BANDWIDTH * 1e6
            print(f"{name:10} {tokens:>6} {times['eager']:9.1f} "
                  f"{times['compiled']:9.1f} {times['comp+graph']:10.1f} "
                  f"{times['ours']:8.1f} {times['ours+graph']:10.1f} "
                  f"{best_torch / times['ours+graph']:7.1f}x {floor:7.2f}"
                  f"  ids agree on {agree:.1%} of tokens", flush=True)
        bundle.close()


if __name__ == "__main__":
    main()
