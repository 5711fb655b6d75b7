# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s moe-compile %t | FileCheck %s
"""moe-tune's GPU-free half for fp8 (block-scaled) layers: a preset or a
file's fp8 layer resolved with its quantization (a static layer's by its
weights' scaling), its grouped matmuls keyed by the weights' type
(f8E4M3FN) and scaling, fp8 candidates that obey
convert-moe-to-gpu's rules for block scales (block_k the 128-column scale
block, block_n <= 128, weight boxes that tile the 128-row scale blocks,
rings that fit shared memory) so that moe-compile refuses none of them for
a small layer, and entries that moe-tile finds for the layer's experts
(no heuristic warning) and the benchmark finds again."""

import os
import subprocess
import sys

from moe_mlir.testing import tune_space
from moe_mlir.testing.compiler import list_presets

compiler, work = sys.argv[1:3]

# A preset with --quantization, and a file of an fp8 layer: the scaling
# comes with the layer, and the grouped matmuls are keyed by it.
deepseek = tune_space.resolve_layer(compiler, "deepseek-v3", "bf16", "block")
path = os.path.join(work, "kimi-fp8.mlir")
with open(path, "w") as file:
    subprocess.run([compiler, "--preset", "kimi-k2", "--quantization",
                    "channel", "--print-source"], stdout=file, check=True)
kimi = tune_space.resolve_layer(compiler, path)
# Static activation scales reach the GEMMs as per-token ones: a static
# layer's GEMMs are keyed by its weights' scaling.
path = os.path.join(work, "mixtral-static.mlir")
with open(path, "w") as file:
    subprocess.run([compiler, "--preset", "mixtral-8x7b", "--quantization",
                    "tensor-static", "--print-source"], stdout=file,
                   check=True)
mixtral = tune_space.resolve_layer(compiler, path)
for layer in (deepseek, kimi, mixtral):
    for gemm in tune_space.gemms(layer, layer["dtype"], 64,
                                 layer["quantization"]):
        item = tune_space.entry(gemm, "H100", 1, {})
        print(layer["name"], gemm["part"], gemm["dtype"], item["dtype"],
              item["quantization"], item["E"], item["N"], item["K"])
# CHECK: deepseek-v3 gemm1 bf16 f8E4M3FN block 257 4096 7168
# CHECK: deepseek-v3 gemm2 bf16 f8E4M3FN block 257 7168 2048
# CHECK: kimi-fp8 gemm1 bf16 f8E4M3FN channel 385 4096 7168
# CHECK: kimi-fp8 gemm2 bf16 f8E4M3FN channel 385 7168 2048
# CHECK: mixtral-static gemm1 bf16 f8E4M3FN tensor 8 28672 4096
# CHECK: mixtral-static gemm2 bf16 f8E4M3FN tensor 8 4096 14336


def obeys_block_rules(config, block_m, gated):
    """convert-moe-to-gpu's rules for block-scaled fp8 weights, and the
    shared memory of the config's ring."""
    box_rows = config["block_n"] // 2 if gated else config["block_n"]
    ring = config["num_stages"] * (block_m + config["block_n"]) * 128
    return (config["block_k"] == 128 and config["block_n"] <= 128 and
            128 % box_rows == 0 and ring <= 227 * 1024)


# Unsplit, split (timed up to 256 tokens) and persistent (from 1024 tokens)
# candidates; from 128-row blocks with one and two warpgroups.
for block_m in (64, 128):
    configs = tune_space.candidates(block_m, "block")
    print(block_m, len(configs),
          len([c for c in configs if c["split_k"] == 1 and
               not c.get("persistent")]),
          len([c for c in configs if c["split_k"] > 1]),
          len([c for c in configs if c.get("persistent")]),
          len([c for c in configs if tune_space.timed_at(c, 1)]),
          len([c for c in configs if tune_space.timed_at(c, 4096)]),
          sorted({c["block_n"] for c in configs}),
          sorted({c["num_stages"] for c in configs}),
          all(obeys_block_rules(c, block_m, gated)
              for c in configs for gated in (True, False)))
# CHECK: 64 72 16 24 32 40 48 [64, 128] [3, 4, 6, 8] True
# CHECK: 128 132 28 48 56 76 84 [64, 128] [3, 4, 6, 8] True
# Channel scales allow 256 columns, where the ring fits.
channel = tune_space.candidates(64, "channel")
print(len(channel), sorted({c["block_n"] for c in channel}),
      max(c["num_stages"] for c in channel if c["block_n"] == 256))
# CHECK: 96 [64, 128, 256] 4

# Every block-scaled candidate of a small layer's two grouped matmuls
# compiles (8 K tiles: every split has its tiles), as moe-tune compiles
# them, and so does the heuristic.
sizes = "experts=8,hidden=1024,intermediate=1024,top_k=2"
small = tune_space.resolve_layer(compiler, sizes, "bf16", "block")
small_gemms = tune_space.gemms(small, "bf16", 64, "block")
device = "NVIDIA H100 80GB HBM3"
plans = tune_space.compile_all(tune_space.Compiler(compiler, work, device),
                               small_gemms, [1, 1024], 2)
# CHECK: # compiled 148 bundles
for key, plan in plans.items():
    print(key, len(plan["candidates"]), plan["rejected"],
          sorted(plan["heuristic"]))
# CHECK: ('e8-top2-h1024-i1024', 'gemm1', 64) 72 [] [1, 1024]
# CHECK: ('e8-top2-h1024-i1024', 'gemm2', 64) 72 [] [1, 1024]

# Entries as moe-tune writes them, recording the layer: the layer's fp8
# experts compile with both (no heuristic warning), and the benchmark finds
# each entry's grouped matmul again, with its quantization.
measured = {"us": 1.0, "layer": tune_space.layer_sizes(small)}
tuned = [tune_space.entry(gemm, device, 16,
                          {"block_n": 64, "block_k": 128, "num_stages": 6,
                           "split_k": 1}, measured)
         for gemm in small_gemms]
database = os.path.join(work, "fp8.json")
tune_space.write_database(database, tuned)
result = subprocess.run(
    [compiler, "--layer-sizes", sizes, "--part", "experts", "--quantization",
     "block", "--block-m", "64", "--tokens-max", "16", "--token-buckets",
     "max", "--config-db", database, "-o", os.path.join(work, "e.moeb")],
    capture_output=True, text=True, check=True)
print(repr(result.stderr))
# CHECK: ''
# A channel-scaled layer of the same shape has none.
result = subprocess.run(
    [compiler, "--layer-sizes", sizes, "--part", "experts", "--quantization",
     "channel", "--block-m", "64", "--tokens-max", "16", "--token-buckets",
     "max", "--config-db", database, "-o", os.path.join(work, "c.moeb")],
    capture_output=True, text=True, check=True)
for line in result.stderr.splitlines():
    if "warning" in line:
        print(line.split("warning: ")[1].split(" near")[0])
# CHECK-NEXT: moe-tile: no tuned config for E=8 N=2048 K=1024 f8E4M3FN quantization=channel block_m=64 on 'NVIDIA H100 80GB HBM3'
# CHECK-NEXT: moe-tile: no tuned config for E=8 N=1024 K=1024 f8E4M3FN quantization=channel block_m=64 on 'NVIDIA H100 80GB HBM3'
matched, unmatched = tune_space.entry_gemms(compiler, tuned,
                                            list_presets(compiler))
for gemm, item in matched:
    print(gemm["model"], gemm["part"], gemm["dtype"], gemm["quantization"],
          tune_space.gemm_pair(gemm)[gemm["part"]] == gemm)
print(unmatched)
# CHECK: e8-top2-h1024-i1024 gemm1 bf16 block True
# CHECK: e8-top2-h1024-i1024 gemm2 bf16 block True
# CHECK: []
