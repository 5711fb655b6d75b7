# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %s %moe_src_root moe-compile %t | FileCheck %s
"""moe_mlir.testing's torch-free half, as it runs where the compiler is and
torch is not: the GPU bundles' specs and where their bundles go; moe-compile
run as a program, returning moe-tile's heuristic warnings and raising
CompileError with its last diagnostic when it fails; a tuning's entries
merged into a database, where the heuristic's wins retire older entries;
the presets written out for the GPU machine, as the compiler's; none of
it, nor the package, imports torch."""

import os
import sys

from moe_mlir.testing import bundles, compiler, distributed, presets
from moe_mlir.testing import tune_space

root, moe_compile, work = sys.argv[1:4]

specs = bundles.load_specs(os.path.join(root, "test", "GPU"))
print(sorted({spec["kind"] for spec in specs}))
# CHECK: ['experts', 'fp8-experts', 'gemm', 'layer', 'mxfp4-experts', 'router', 'routing']
print(bundles.bundle_path("out/gpu-bundles", specs[0]))
# CHECK: out/gpu-bundles/routing-mixtral.moeb

# A reduced layer's grouped matmul has no tuned config: one warning.
gemm2 = ["--preset", "qwen3-30b-a3b", "--part", "gemm2"]
path = os.path.join(work, "gemm2.moeb")
for line in compiler.compile_bundle(moe_compile, gemm2 + ["--reduced"], path):
    print(line.split("warning: ")[1].split(" near")[0])
# CHECK: moe-tile: no tuned config for E=128 N=64 K=24 bf16 block_m=128 on 'NVIDIA H100 80GB HBM3'
print(os.path.exists(os.path.join(path, "manifest.txt")))
# CHECK: True
# The full-size one has, for the shipped device; another device has none.
print(compiler.compile_bundle(moe_compile, gemm2 + ["--tokens-max", "64"],
                              path))
# CHECK: []
print(len(compiler.compile_bundle(moe_compile, gemm2 + ["--tokens-max", "64"],
                                  path, device="NVIDIA H200")))
# CHECK: 1

try:
    compiler.compile_bundle(moe_compile, ["--preset", "no-such-layer"], path)
except compiler.CompileError as error:
    print(str(error).split(": ", 1)[1])
# CHECK: moe-compile: unknown preset 'no-such-layer' (mixtral-8x7b, qwen3-30b-a3b, deepseek-v3, kimi-k2, gpt-oss-20b, gpt-oss-120b)

print(sorted(compiler.list_presets(moe_compile)))
# CHECK: ['deepseek-v3', 'gpt-oss-120b', 'gpt-oss-20b', 'kimi-k2', 'mixtral-8x7b', 'qwen3-30b-a3b']
print(len(tune_space.candidates()), "torch" in sys.modules)
# CHECK: 186 False

# Merging a tuning: a new entry replaces its key's, one where the heuristic
# won says so (moe-tile then takes the heuristic there rather than a
# neighbouring bucket's entry), other keys stay.
gemm = {"experts": 8, "N": 64, "K": 32, "block_m": 64, "dtype": "bf16",
        "quantization": None}
device = "NVIDIA H100 80GB HBM3"
old = [tune_space.entry(gemm, device, tokens, {"block_n": 128})
       for tokens in (1, 16, 64)]
merged = tune_space.merge(old, [
    tune_space.entry(gemm, device, 16, {"block_n": 64}),
    tune_space.entry(gemm, device, 64, tune_space.HEURISTIC)])
print([(item["tokens"], item["config"]) for item in merged])
# CHECK: [(1, {'block_n': 128}), (16, {'block_n': 64}), (64, 'heuristic')]

# The layers the multi-GPU scripts take, written out since the GPU machine
# has no compiler, are the compiler's presets.
presets.check_full_presets()
presets.check_reduced_presets()
print(sorted(presets.FULL_PRESETS),
      distributed.MULTICAST_OFF["NCCL_NVLS_ENABLE"], "torch" in sys.modules)
# CHECK: ['deepseek-v3', 'mixtral-8x7b', 'qwen3-30b-a3b'] 0 False
