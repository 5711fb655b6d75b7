# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s moe-compile %t %moe_src_root | FileCheck %s
"""moe-tune's GPU-free half (moe_mlir.testing.tune_space): the grouped
matmuls of a preset as moe-compile --list-presets sizes them, the candidate
configs, and a database that merges entries by key and bucket and that
moe-compile reads: a split-K entry for Mixtral-8x7B's gemm2 at 1 token
gives its bundle the split grid and the reduction kernel, with no heuristic
warning. Then a layer given as a file and one given as sizes (or as a
moe_mlir.Layer): their grouped matmuls, the candidates' and the heuristic's
bundles as moe-tune compiles them, and entries keyed as moe-tile looks them
up: the file's whole layer compiles with them and no heuristic warning; the
benchmark finds each entry's grouped matmul again."""

import json
import os
import subprocess
import sys

from moe_mlir.testing import tune_space
from moe_mlir.testing.compiler import compile_bundle, list_presets

import moe_mlir

compiler, work, root = sys.argv[1:4]
presets = list_presets(compiler)
for gemm in tune_space.gemms(presets["deepseek-v3"]):
    print(gemm["part"], gemm["experts"], gemm["N"], gemm["K"], gemm["slots"])
# CHECK: gemm1 257 4096 7168 9
# CHECK: gemm2 257 7168 2048 9

configs = tune_space.candidates()
unsplit = [c for c in configs if c["split_k"] == 1 and not c["persistent"]]
split = [c for c in configs if c["split_k"] > 1]
persistent = [c for c in configs if c.get("persistent")]
print(len(configs), len(unsplit), len(split), len(persistent),
      tune_space.timed_at(split[-1], 256), tune_space.timed_at(split[-1], 1024),
      tune_space.timed_at(unsplit[0], 4096))
# CHECK: 186 32 90 64 True False True
# Every candidate states `persistent`: an entry without it would follow the
# heuristic.
print(all(isinstance(c["persistent"], bool) for c in configs))
# CHECK-NEXT: True
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
# CHECK: 372 [1, 2]
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
# CHECK: launch moe_grouped_matmul_wgmma_0 grid cdiv(T*2+min(T*2,8)*63,64)*96 1 1
# CHECK: launch moe_grouped_matmul_reduce_1

# A layer as a file (DeepSeek-V3's sizes, 256 experts and no shared one): its
# sizes, router and dtype from moe-compile --describe, named after the file.
file_path = os.path.join(root, "bench", "Inputs", "e256-top8-no-shared.mlir")
e256 = tune_space.resolve_layer(compiler, file_path)
print(e256["name"], e256["experts"], e256["top_k"], e256["shared"],
      e256["dtype"], e256["bias"])
# CHECK: e256-top8-no-shared 256 8 0 bf16 True
e256_gemms = {g["part"]: g for g in tune_space.gemms(e256)}
for gemm in e256_gemms.values():
    print(gemm["part"], gemm["experts"], gemm["N"], gemm["K"], gemm["slots"],
          gemm["sizes"])
# CHECK: gemm1 256 4096 7168 8 experts=256,hidden=7168,intermediate=2048,top_k=8,shared=0
# CHECK: gemm2 256 7168 2048 8 experts=256,hidden=7168,intermediate=2048,top_k=8,shared=0

# A layer as sizes, as text or as a moe_mlir.Layer: named after its sizes,
# in the dtype asked for.
sizes = "experts=64,hidden=2048,intermediate=1408,top_k=6,shared=2"
small = tune_space.resolve_layer(compiler, sizes, "f16")
print(small["name"], small["dtype"], "router" in small)
# CHECK: e64-top6-h2048-i1408-shared2 f16 False
layer = moe_mlir.Layer(2048, 1408, 64, moe_mlir.Router("softmax", 6,
                                                       num_shared_experts=2))
print(tune_space.resolve_layer(compiler, layer, "f16") == small)
# CHECK: True
small_gemms = {g["part"]: g for g in tune_space.gemms(small, "f16", 128)}
print([(g["experts"], g["N"], g["K"]) for g in small_gemms.values()])
# CHECK: [(66, 2816, 2048), (66, 2048, 1408)]
print(tune_space.resolve_layer(compiler, "deepseek-v3")["name"])
# CHECK: deepseek-v3
# A preset whose experts have biases and the clamped SwiGLU (gpt-oss's):
# its grouped matmuls compile as the preset, with that epilogue, which the
# cases give them (the biases after the routing operands); every other
# layer compiles as its sizes.
gpt_oss = tune_space.resolve_layer(compiler, "gpt-oss-120b")
for gemm in tune_space.gemms(gpt_oss, block_m=128):
    print(gemm["part"], gemm["source"], gemm["expert_biases"],
          gemm["swiglu"])
# CHECK: gemm1 ['--preset', 'gpt-oss-120b'] True (1.702, 7.0)
# CHECK: gemm2 ['--preset', 'gpt-oss-120b'] True (1.702, 7.0)
print(tune_space.gemms(tune_space.resolve_layer(compiler, "deepseek-v3"))[0]
      ["source"], "expert_biases" in e256_gemms["gemm1"])
# CHECK: ['--layer-sizes', 'experts=256,hidden=7168,intermediate=2048,top_k=8,shared=1'] False
# A file's layer with that epilogue compiles as the file.
swiglu_file = os.path.join(root, "test", "Tools", "Inputs",
                           "e8-top2-clamped-swiglu.mlir")
swiglu_gemm2 = tune_space.gemms(tune_space.resolve_layer(compiler,
                                                         swiglu_file))[1]
print(swiglu_gemm2["source"] == [swiglu_file], swiglu_gemm2["expert_biases"],
      swiglu_gemm2["swiglu"])
# CHECK: True True (1.702, 7.0)
# A moe_mlir.Layer with that epilogue compiles as its own MLIR.
biased = moe_mlir.Layer(128, 128, 8, moe_mlir.Router("softmax", 2),
                        swiglu=(1.702, 7.0), expert_biases=True)
biased_gemms = tune_space.gemms(tune_space.resolve_layer(compiler, biased))
print(biased_gemms[0]["model"], biased_gemms[0]["source"][0].endswith(".mlir"),
      biased_gemms[0]["expert_biases"], biased_gemms[0]["swiglu"])
# CHECK: e8-top2-h128-i128 True True (1.702, 7.0)
for bad in ("gpt-5", "experts=8,hidden=64", os.path.join(work, "no.mlir")):
    try:
        tune_space.resolve_layer(compiler, bad)
    except tune_space.CompileError as error:
        print(str(error).split(" moe-compile: ")[-1])
# CHECK: unknown preset 'gpt-5' (mixtral-8x7b, qwen3-30b-a3b, deepseek-v3, kimi-k2, gpt-oss-20b, gpt-oss-120b)
# CHECK: --layer-sizes: no 'intermediate'
# CHECK: cannot open input file {{.*}}no.mlir{{.*}}

# The candidates and the heuristic, compiled as moe-tune compiles them: a
# candidate finds its one-entry database (no warning); the heuristic is
# compiled for a device no database has, and moe-tile's warning names the
# key it looked up, which is the entry's.
device = "NVIDIA H100 80GB HBM3"
tuning = tune_space.Compiler(compiler, work, device)
for gemm, tokens in ((e256_gemms["gemm1"], 16), (small_gemms["gemm2"], 256)):
    config = [c for c in tune_space.candidates(gemm["block_m"])
              if c["split_k"] > 1][0]
    name = tune_space.config_name(gemm, config)
    path, warnings = tuning.compile(gemm, name, tokens, config)
    print(os.path.basename(path), warnings,
          os.path.exists(os.path.join(path, "manifest.txt")))
    path, warnings = tuning.compile(gemm, "heuristic", tokens)
    print(warnings[0].split("warning: ")[1].split(" near")[0])
    key = tune_space.entry(gemm, device, tokens, config)
    print(key["E"], key["N"], key["K"], key["dtype"], key["block_m"])
# CHECK: e256-top8-no-shared-gemm1-m64-n64-s3-k2-w1.moeb [] True
# CHECK: moe-tile: no tuned config for E=256 N=4096 K=7168 bf16 block_m=64 on 'moe-tune: no device (the heuristic)'
# CHECK: 256 4096 7168 bf16 64
# CHECK: e64-top6-h2048-i1408-shared2-gemm2-m128-n64-s3-k2-w1.moeb [] True
# CHECK: moe-tile: no tuned config for E=66 N=2048 K=1408 f16 block_m=128 on 'moe-tune: no device (the heuristic)'
# CHECK: 66 2048 1408 f16 128
for name, gemm, tokens in (("gpt-oss-gemm2",
                             tune_space.gemms(gpt_oss, block_m=128)[1], 2048),
                            ("swiglu-file-gemm2", swiglu_gemm2, 16)):
    path, warnings = tuning.compile(gemm, name, tokens)
    with open(os.path.join(path, "manifest.txt")) as manifest:
        print(", ".join(" ".join(line.split()[1:4]) for line in manifest
                        if line.startswith("tensor arg")))
# CHECK: arg0 input bf16, arg1 input bf16, arg2 input i32, arg3 input i32, arg4 input i32, arg5 input f32, arg6 input bf16
# CHECK: arg0 input bf16, arg1 input bf16, arg2 input i32, arg3 input i32, arg4 input i32, arg5 input f32, arg6 input bf16
print(tuning.compile(e256_gemms["gemm1"], "too-deep", 16,
                     {"block_n": 256, "num_stages": 8, "split_k": 1}))
# CHECK: (None, '{{.*}}moe-compile: {{.*}}')

# What compile_all plans, with a compiler that only records: every
# candidate once, split-K ones sized for at most 256 tokens, the heuristic
# at each bucket, rejected candidates kept apart.
class Recorder:
    def compile(self, gemm, name, tokens_max, config=None):
        if config is not None and config["num_stages"] == 6:
            return None, "ring too deep"
        return f"{name}@{tokens_max}", []


plans = tune_space.compile_all(Recorder(), [*e256_gemms.values(),
                                            *small_gemms.values()],
                               [1, 16, 1024], 2)
# CHECK: # compiled 1128 bundles
for key, plan in plans.items():
    sized = {path.split("@")[1] for _, path in plan["candidates"]}
    print(key, len(plan["candidates"]), len(plan["rejected"]),
          sorted(plan["heuristic"]), sorted(sized))
# CHECK: ('e256-top8-no-shared', 'gemm1', 64) 132 54 [1, 16, 1024] ['1024', '256']
# CHECK: ('e256-top8-no-shared', 'gemm2', 64) 132 54 [1, 16, 1024] ['1024', '256']
# CHECK: ('e64-top6-h2048-i1408-shared2', 'gemm1', 128) 264 108 [1, 16, 1024] ['1024', '256']
# CHECK: ('e64-top6-h2048-i1408-shared2', 'gemm2', 128) 264 108 [1, 16, 1024] ['1024', '256']

# The entries moe-tune writes for the file's layer, each recording the
# layer's sizes: the whole layer compiled with them takes both (no
# heuristic warning), and the benchmark's --check-heuristic finds each
# entry's grouped matmul again, and the presets' for entries without a
# record (named after the sizes it records).
measured = {"us": 1.0, "layer": tune_space.layer_sizes(e256)}
tuned = [tune_space.entry(gemm, device, 16,
                          {"block_n": 128, "num_stages": 4, "split_k": 1},
                          measured) for gemm in e256_gemms.values()]
database = os.path.join(work, "e256.json")
tune_space.write_database(database, tuned)
print(compile_bundle(compiler, [file_path, "--tokens-max", "16",
                                "--token-buckets", "max", "--block-m", "64"],
                     os.path.join(work, "e256.moeb"), database))
# CHECK: []
others = [tune_space.entry(mixtral["gemm1"], device, 64, {"block_n": 64}),
          dict(tuned[0], E=255)]
matched, unmatched = tune_space.entry_gemms(compiler, tuned + others,
                                            presets)
for gemm, item in matched:
    print(gemm["model"], gemm["part"], gemm["slots"], item["tokens"],
          tune_space.gemm_pair(gemm)[gemm["part"]] == gemm)
print([item["E"] for item in unmatched])
# CHECK: e256-top8-h7168-i2048 gemm1 8 16 True
# CHECK: e256-top8-h7168-i2048 gemm2 8 16 True
# CHECK: mixtral-8x7b gemm1 2 64 True
# CHECK: [255]
