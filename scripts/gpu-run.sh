#!/usr/bin/env bash
# The GPU machine's part, in one go: build the runtime and the reference
# (no MLIR there), run the runtime's GPU tests, the routing tests against the
# reference and a compute-sanitizer pass, then the router benchmark. Bundles
# come prebuilt in out/gpu-bundles (scripts/make-gpu-bundles.sh, carried).
# Logs go to $OUT; every step has a timeout, since a lost wait hangs forever.
#
#   scripts/gpu-run.sh [tests|bench|all] [benchmark options]
set -uo pipefail
what=${1:-all}
shift || true
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-results}
mkdir -p "$OUT"
status=0
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local result=${PIPESTATUS[0]}
  [[ $result -eq 0 ]] || { echo "=== $name FAILED ($result)"; status=1; }
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv \
  | tee "$OUT/device.log"
step build 300 bash -c "cmake -G Ninja -S . -B build-runtime \
  -DMOE_ENABLE_COMPILER=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null && \
  ninja -C build-runtime"
if [[ $what != bench ]]; then
  step runtime-tests 300 build-runtime/bin/MoeRuntimeTests
  step routing-tests 400 python3 test/GPU/routing_test.py
  step layer-tests 400 python3 test/GPU/layer_test.py
  # The moe_mlir package (runtime only) for the python3 that has torch.
  step python-tests 400 bash -c "cmake -S . -B build-runtime \
    -DPython3_EXECUTABLE=\"\$(command -v python3)\" >/dev/null && \
    ninja -C build-runtime moe-python && \
    PYTHONPATH=build-runtime/python python3 test/GPU/python_test.py"
  step sanitizer 400 compute-sanitizer --tool memcheck --error-exitcode 1 \
    python3 test/GPU/routing_test.py --tokens 7,300 --only routing-deepseek
fi
if [[ $what != tests ]]; then
  step router-bench 500 python3 bench/router_bench.py "$@"
fi
exit $status
