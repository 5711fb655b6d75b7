#!/usr/bin/env bash
# The GPU machine's part, in one go: build the runtime, the reference and
# the moe_mlir package (runtime only: no MLIR there), run the runtime's GPU
# tests, the routing, layer and grouped-matmul tests against the reference,
# the torch modules and ops (torch.compile, torch.export, CUDA graphs) and
# compute-sanitizer passes, then the router and grouped-matmul
# benchmarks. Bundles come prebuilt in out/gpu-bundles
# (scripts/make-gpu-bundles.sh, carried). Logs go to $OUT; every step has a
# timeout, since a lost wait hangs forever; ONLY=step1,step2 runs only
# those steps of the mode (`tests` takes longer than one call of the device
# tool: run it in parts). `gemm` runs only
# the grouped-matmul test, its sanitizer pass and its benchmark. `tune` runs
# moe-tune (the four presets at 64-row routing blocks unless told: --presets,
# --layer FILE, --sizes, --block-m 64,128, --tokens, --quantization
# tensor|channel|block for fp8 weights; the static moe-compile
# carried packed in out/tools, scripts/pack-compiler.sh) into
# $OUT/gemm-configs.json, merged over configs/gemm-configs.json, leaving out
# (and naming) the buckets its 470 s would not hold: tune the rest in another
# call, with that file copied over configs/gemm-configs.json first;
# `gemm-tuned` runs the grouped-matmul benchmark with one bundle per T (with
# --check-heuristic: each tuned entry of configs/gemm-configs.json, fp8 ones
# too, against moe-tile's heuristic) and `layer` the whole-layer benchmark
# (bench/layer_bench.py, its options after the mode: `layer --tokens
# 1,2,4,8,16,32,64 --dependent-launch both` times decode with programmatic
# dependent launches and without; `--routing own|uniform` one routing of
# the two), both
# compiled there against $CONFIG_DB when set (else the shipped configs);
# `variants` times the default bundle of a layer (a variant per range of
# token counts) against a bundle for each T alone; `hf-bench` times
# transformers' MoE blocks with their experts through moe-mlir against
# transformers' grouped_mm and batched_mm (bench/transformers_bench.py, its
# options after the mode); `fp8` runs only the FP8 tests (the CPU test of
# their comparison, the experts bundles, and FusedMoE/FusedExperts with fp8
# weights) and their sanitizer pass (also part of `tests`); `fp8-bench` the
# FP8 benchmark (bench/fp8_bench.py, its options after the mode); `mxfp4`
# the MXFP4 experts test and its sanitizer pass (also part of `tests`),
# `mxfp4-bench` the MXFP4 benchmark (bench/mxfp4_bench.py); `config-bench`
# times chosen configs of one grouped matmul against the heuristic's
# (bench/config_bench.py, its options after the mode); `compiler-ab` times
# whole layers compiled by several moe-compile builds against each other,
# out/ab/<name>/moe-compile.xz each (scripts/pack-compiler.sh in each tree,
# carried), the first name in sort order the baseline
# (bench/compiler_ab.py, its options after the mode: --cells). `tp` runs the
# tensor-parallel test (test/GPU/tp_test.py) and `tp-bench` its benchmark
# (bench/tp_bench.py, its options after the mode; it measures the device
# and NVLink bandwidths its floors count at), `ep` the expert-parallel test
# (test/GPU/ep_dist_test.py) and `ep-bench` its benchmark
# (bench/ep_bench.py, its options after the mode; it measures the same
# bandwidths), each as two processes under torchrun, on a machine with two
# GPUs (the nvidia-h200-x2 kind).
#
#   scripts/gpu-run.sh [tests|bench|all|gemm|tune|gemm-tuned|layer|variants|hf-bench|fp8|fp8-bench|mxfp4|mxfp4-bench|config-bench|compiler-ab|tp|tp-bench|ep|ep-bench] [router benchmark options]
set -uo pipefail
what=${1:-all}
shift || true
modes="tests|bench|all|gemm|tune|gemm-tuned|layer|variants|hf-bench|fp8|fp8-bench|mxfp4|mxfp4-bench|config-bench|compiler-ab|tp|tp-bench|ep|ep-bench"
if [[ ! $what =~ ^($modes)$ ]]; then
  echo "usage: $0 [$modes] [router benchmark options]" >&2
  exit 2
fi
# NVLink multicast must stay off on the multi-GPU machines: NCCL's NVLS
# algorithms, torch's symmetric memory and NVSHMEM would each use it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-results}
mkdir -p "$OUT"
status=0
step() {
  local name=$1 limit=$2
  shift 2
  # ONLY=a,b runs only those steps of the mode (and the build): the whole
  # `tests` mode outlasts one device call.
  if [[ -n ${ONLY:-} && $name != build && ",$ONLY," != *",$name,"* ]]; then
    return
  fi
  echo "=== $name"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local result=${PIPESTATUS[0]}
  [[ $result -eq 0 ]] || { echo "=== $name FAILED ($result)"; status=1; }
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv \
  | tee "$OUT/device.log"
gpus=$(nvidia-smi --list-gpus | wc -l)
# The modes that run two processes under torchrun, a GPU each.
two_gpus="tp|tp-bench|ep|ep-bench"
if [[ $what =~ ^($two_gpus)$ ]] && (( gpus < 2 )); then
  echo "=== $what needs two GPUs (the nvidia-h200-x2 kind); this machine" \
    "has $gpus" | tee "$OUT/$what.log"
  exit 1
fi
# The moe_mlir package, for the python3 that has torch: every Python step
# runs bundles through moe_mlir.Bundle.
step build 300 bash -c "cmake -G Ninja -S . -B build-runtime \
  -DMOE_ENABLE_COMPILER=OFF -DCMAKE_BUILD_TYPE=Release \
  -DPython3_EXECUTABLE=\"\$(command -v python3)\" >/dev/null && \
  ninja -C build-runtime all moe-python"
export PYTHONPATH=$PWD/build-runtime/python${PYTHONPATH:+:$PYTHONPATH}
if [[ $what =~ ^($two_gpus)$ ]]; then
  export PYTHONUNBUFFERED=1
  torchrun=(python3 -m torch.distributed.run --standalone --nproc-per-node 2)
  if [[ $what == tp ]]; then
    step tp-tests 420 "${torchrun[@]}" test/GPU/tp_test.py "$@"
  elif [[ $what == ep ]]; then
    step ep-dist-tests 420 "${torchrun[@]}" test/GPU/ep_dist_test.py "$@"
  elif [[ $what == ep-bench ]]; then
    step ep-bench 480 "${torchrun[@]}" bench/ep_bench.py "$@"
  else
    step tp-bench 450 "${torchrun[@]}" bench/tp_bench.py "$@"
  fi
  exit $status
fi
if [[ $what == hf-bench ]]; then
  step hf-bench 500 python3 bench/transformers_bench.py "$@"
  exit $status
fi
# The static moe-compile packed in $1 (scripts/pack-compiler.sh), unpacked
# to the executable $2.
unpack_compiler() {
  python3 -c "import lzma, shutil; shutil.copyfileobj(
    lzma.open('$1'), open('$2', 'wb'))"
  chmod +x "$2"
}
if [[ $what == compiler-ab ]]; then
  compilers=()
  for packed in out/ab/*/moe-compile.xz; do
    name=$(basename "$(dirname "$packed")")
    unpack_compiler "$packed" "/tmp/moe-compile-$name"
    compilers+=("$name=/tmp/moe-compile-$name")
  done
  step compiler-ab 560 env PYTHONUNBUFFERED=1 python3 bench/compiler_ab.py \
    --compilers "$(IFS=,; echo "${compilers[*]}")" "$@"
  exit $status
fi
if [[ $what == tune || $what == gemm-tuned || $what == layer ||
      $what == variants || $what == fp8-bench || $what == mxfp4-bench ||
      $what == config-bench ]]; then
  compiler=/tmp/moe-compile
  unpack_compiler out/tools/moe-compile.xz $compiler
  export PYTHONUNBUFFERED=1
fi
if [[ $what == tune ]]; then
  cp configs/gemm-configs.json "$OUT/gemm-configs.json"
  step tune 470 python3 tools/moe-tune/moe-tune.py --compiler $compiler \
    --output "$OUT/gemm-configs.json" --time-limit-s 430 "$@"
  exit $status
fi
db=()
[[ -n ${CONFIG_DB:-} ]] && db=(--config-db "$CONFIG_DB")
if [[ $what == gemm-tuned ]]; then
  step gemm-bench-tuned 500 python3 bench/gemm_bench.py --compiler $compiler \
    "${db[@]}" "$@"
  exit $status
fi
if [[ $what == layer ]]; then
  step layer-bench 500 python3 bench/layer_bench.py --compiler $compiler \
    "${db[@]}" --json "$OUT/layer-bench.json" "$@"
  exit $status
fi
if [[ $what == fp8-bench ]]; then
  step fp8-bench 560 python3 bench/fp8_bench.py --compiler $compiler \
    "${db[@]}" "$@"
  exit $status
fi
if [[ $what == config-bench ]]; then
  step config-bench 560 python3 bench/config_bench.py --compiler $compiler "$@"
  exit $status
fi
if [[ $what == mxfp4-bench ]]; then
  step mxfp4-bench 560 python3 bench/mxfp4_bench.py --compiler $compiler \
    "${db[@]}" "$@"
  exit $status
fi
if [[ $what == variants ]]; then
  step variants-bench 540 python3 bench/variants_bench.py \
    --compiler $compiler "${db[@]}" "$@"
  exit $status
fi
if [[ $what == tests || $what == all || $what == fp8 ]]; then
  step fp8-check-tests 120 python3 test/GPU/fp8_check_test.py
  step fp8-tests 420 python3 test/GPU/fp8_test.py
  step fp8-torch-tests 300 python3 test/GPU/fp8_torch_test.py
  step fp8-sanitizer 300 compute-sanitizer --tool memcheck --error-exitcode 1 \
    python3 test/GPU/fp8_test.py --tokens 7,300 --reference-device cpu \
    --only fp8-block-experts,fp8-block-experts-cluster,fp8-block-experts-stream-k
fi
[[ $what == fp8 ]] && exit $status
if [[ $what == tests || $what == all || $what == mxfp4 ]]; then
  step mxfp4-tests 300 python3 test/GPU/mxfp4_test.py
  step mxfp4-sanitizer 300 compute-sanitizer --tool memcheck --error-exitcode 1 \
    python3 test/GPU/mxfp4_test.py --tokens 7,300 --only mxfp4-experts
fi
[[ $what == mxfp4 ]] && exit $status
if [[ $what == tests || $what == all ]]; then
  step runtime-tests 300 build-runtime/bin/MoeRuntimeTests
  step routing-tests 400 python3 test/GPU/routing_test.py
  step layer-tests 400 python3 test/GPU/layer_test.py
  step gpt-oss-tests 540 python3 test/GPU/layer_test.py \
    --only layer-gpt-oss-20b-full,layer-gpt-oss-120b-full
  step python-tests 400 python3 test/GPU/python_test.py
  step torch-tests 400 python3 test/GPU/torch_test.py
  step transformers-tests 400 python3 test/GPU/transformers_test.py
  step gpt-oss-torch-tests 540 python3 test/GPU/gpt_oss_torch_test.py
  # Expert parallelism's kernels, every rank of a simulated world on this
  # GPU; memcheck over one world, since they store through peer tables.
  step ep-tests 300 python3 test/GPU/ep_test.py
  step ep-sanitizer 300 compute-sanitizer --tool memcheck --error-exitcode 1 \
    python3 test/GPU/ep_test.py --only deepseek-v3:4
  step sanitizer 400 compute-sanitizer --tool memcheck --error-exitcode 1 \
    python3 test/GPU/routing_test.py --tokens 7,300 --only routing-deepseek
  step experts-sanitizer 400 compute-sanitizer --tool memcheck \
    --error-exitcode 1 python3 test/GPU/layer_test.py --tokens 7,300 \
    --only experts-splitk-bf16,experts-deepseek-f16
fi
if [[ $what != bench ]]; then
  step gemm-tests 400 python3 test/GPU/gemm_test.py
  step gemm-sanitizer 300 compute-sanitizer --tool memcheck --error-exitcode 1 \
    python3 test/GPU/gemm_test.py --cases 1:uniform,7:uniform,300:skewed \
    --only gemm1-odd-f16,gemm2-odd-f16,gemm1-tail-bf16,gemm2-tail-f16,gemm1-splitk-bf16,gemm2-splitk-f16,gemm1-qwen3-f16,gemm2-deepseek-bf16,gemm1-mixtral-wg2-bf16,gemm2-deepseek-wg2-f16,gemm1-mixtral-ws-bf16,gemm2-deepseek-wg2-ws-f16,gemm1-deepseek-ws-splitk-bf16,gemm1-mixtral-persistent-bf16,gemm2-mixtral-persistent-bf16,gemm1-deepseek-persistent-splitk-bf16,gemm1-gpt-oss-bf16,gemm1-gpt-oss-splitk-bf16,gemm2-gpt-oss-ws-bf16,gemm1-gpt-oss-reduced-bf16,gemm1-mixtral-cluster-bf16,gemm2-deepseek-wg2-cluster-f16,gemm1-stream-k-plain-bf16,gemm2-stream-k-ws-bf16
  # Clusters (the peers' barriers and multicast stages), the staged
  # epilogues (in the ring, plain and warp-specialized; behind it, over a
  # persistent block's tiles, and with rows of 12 chunks) and stream-K's
  # (after a shared tile's sums), for shared-memory races.
  step gemm-racecheck 400 compute-sanitizer --tool racecheck \
    --error-exitcode 1 python3 test/GPU/gemm_test.py --cases 7:uniform,300:skewed \
    --only gemm1-mixtral-cluster-bf16,gemm2-deepseek-wg2-cluster-f16,gemm2-deepseek-wg2-f16,gemm2-deepseek-wg2-ws-f16,gemm1-many-tiles-wg2-persistent-bf16,gemm1-wide-tiles-bf16,gemm1-stream-k-plain-bf16,gemm2-stream-k-ws-bf16
fi
if [[ $what == bench || $what == all ]]; then
  step router-bench 500 python3 bench/router_bench.py "$@"
  step flush-bench 120 python3 bench/flush_bench.py
fi
if [[ $what != tests ]]; then
  step gemm-bench 450 python3 bench/gemm_bench.py
fi
exit $status
