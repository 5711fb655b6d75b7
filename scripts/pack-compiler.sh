#!/usr/bin/env bash
# Builds the fully static moe-compile (build-static/, MOE_STATIC_LINK) and
# packs it, stripped and xz-compressed, into out/tools/moe-compile.xz: about
# 13 MB, small enough to carry to the GPU machine, which has no MLIR, so that
# moe-tune and the benchmarks compile there. gpu-run.sh unpacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build-static/build.ninja ]]; then
  MOE_STATIC_LINK=ON MOE_BUILD_DIR=build-static scripts/setup.sh
fi
ninja -C build-static moe-compile
mkdir -p out/tools
strip -o out/tools/moe-compile build-static/bin/moe-compile
xz -9 -T0 -f out/tools/moe-compile
ls -l out/tools/moe-compile.xz
