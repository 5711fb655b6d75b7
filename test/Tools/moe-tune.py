# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s moe-compile %t | FileCheck %s
"""moe-tune's GPU-free half (moe_mlir.testing.tune_space): the grouped
matmuls of a preset as moe-compile --list-presets sizes them, the candidate
configs, and a database that merges entries by key and bucket and that
moe-compile reads: a split-K entry for Mixtral-8x7B's gemm2 at 1 token
gives its bundle the split grid and the reduction kernel, with no heuristic
warning."""

import json
import os
import subprocess
import sys

from moe_mlir.testing import tune_space
from moe_mlir.testing.compiler import list_presets

compiler, work = sys.argv[1:3]
presets = list_presets(compiler)
for gemm in tune_space.gemms(presets["deepseek-v3"]):
    print(gemm["part"], gemm["experts"], gemm["N"], gemm["K"], gemm["slots"])
# CHECK: gemm1 257 4096 7168 9
# CHECK: gemm2 257 7168 2048 9

configs = tune_space.candidates()
unsplit = [c for c in configs if c["split_k"] == 1 and "persistent" not in c]
split = [c for c in configs if c["split_k"] > 1]
persistent = [c for c in configs if c.get("persistent")]
print(len(configs), len(unsplit), len(split), len(persistent),
      tune_space.timed_at(split[-1], 256), tune_space.timed_at(split[-1], 1024),
      tune_space.timed_at(unsplit[0], 4096))
# CHECK: 154 32 90 32 True False True
# Persistent grids are timed only from 1024 tokens, never split.
print(tune_space.timed_at(persistent[0], 256),
      tune_space.timed_at(persistent[0], 1024),
      all(c["split_k"] == 1 for c in persistent))
# CHECK: False True True
assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs)
# From 128-row routing blocks every candidate comes with one and with two
# warpgroups, named explicitly.
wide = tune_space.candidates(128)
print(len(wide), sorted({c["num_warpgroups"] for c in wide}))
# CHECK: 308 [1, 2]
# Every candidate compiles to a bundle of its own name.
for block_m, configs in ((64, configs), (128, wide)):
    gemm = dict(tune_space.gemms(presets["mixtral-8x7b"], block_m=block_m)[0])
    names = {tune_space.config_name(gemm, c) for c in configs}
    print(block_m, len(names) == len(configs))
# CHECK: 64 True
# CHECK: 128 True

mixtral = {g["part"]: g for g in tune_space.gemms(presets["mixtral-8x7b"])}
device = "NVIDIA H100 80GB HBM3"
database = os.path.join(work, "db.json")
tune_space.write_database(database, [
    tune_space.entry(mixtral["gemm2"], device, 1,
                     {"block_n": 128, "num_stages": 4, "split_k": 8}),
    tune_space.entry(mixtral["gemm1"], device, 4096,
                     {"block_n": 256, "num_stages": 4, "split_k": 1})])
# A second run replaces the gemm2 bucket and keeps the gemm1 entry.
tune_space.write_database(database, tune_space.merge(
    tune_space.read_database(database),
    [tune_space.entry(mixtral["gemm2"], device, 1,
                      {"block_n": 128, "num_stages": 4, "split_k": 3},
                      {"us": 70.0})]))
for item in tune_space.read_database(database):
    print(item["N"], item["K"], item["tokens"], item["config"]["split_k"],
          item.get("measured"))
# CHECK: 4096 14336 1 3 {'us': 70.0}
# CHECK: 28672 4096 4096 1 None

bundle = os.path.join(work, "gemm2.moeb")
result = subprocess.run(
    [compiler, "--preset", "mixtral-8x7b", "--part", "gemm2", "--tokens-max",
     "1", "--config-db", database, "-o", bundle],
    capture_output=True, text=True, check=True)
print(repr(result.stderr))
# CHECK: ''
with open(os.path.join(bundle, "manifest.txt")) as file:
    for line in file:
        if line.startswith(("launch", "workspace")):
            print(" ".join(line.split()[:6]))
# CHECK: workspace gemm_partials f32 3 T*2
# CHECK: launch moe_grouped_matmul_wgmma_0 grid cdiv(T*2+504,64)*96 1 1
# CHECK: launch moe_grouped_matmul_reduce_1
