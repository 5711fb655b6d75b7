#!/usr/bin/env bash
# Installs what moe-mlir needs on Debian 12 (LLVM/MLIR 22, CMake, Ninja,
# clang/lld, GoogleTest, pybind11 and numpy), then configures and builds into
# build/ (or $MOE_BUILD_DIR) and makes the Python package importable.
# Safe to re-run: it installs only missing packages and rebuilds incrementally.
#
#   scripts/setup.sh                      # development build (libMLIR.so)
#   MOE_STATIC_LINK=ON MOE_BUILD_DIR=build-static scripts/setup.sh
#   MOE_SANITIZE=ON MOE_BUILD_DIR=build-san scripts/setup.sh
#
# MOE_SANITIZE=ON is the sanitizer build (ASan, UBSan, assertions) with the
# libFuzzer targets (scripts/fuzz.sh); it needs clang's sanitizer runtimes.
set -euo pipefail

cd "$(dirname "$0")/.."
build_dir=${MOE_BUILD_DIR:-build}
static_link=${MOE_STATIC_LINK:-OFF}
sanitize=${MOE_SANITIZE:-OFF}

packages=(
  cmake ninja-build g++ clang-22 lld-22
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  zlib1g-dev libzstd-dev libgtest-dev
  pybind11-dev python3-dev python3-numpy
)
if [[ $sanitize == ON ]]; then
  packages+=(libclang-rt-22-dev)
fi

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null |
    grep -q "install ok installed" || missing+=("$package")
done
sudo=""
[[ $(id -u) -eq 0 ]] || sudo=sudo
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

cmake -G Ninja -S . -B "$build_dir" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
  -DLLVM_USE_LINKER=lld \
  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
  -DMOE_STATIC_LINK="$static_link" \
  -DMOE_SANITIZE="$sanitize" -DMOE_FUZZ="$sanitize"
ninja -C "$build_dir"

# The Python package: a .pth file in the site-packages of the interpreter it
# was built for (build/python/interpreter.txt, normally /usr/bin/python3)
# puts the build's package on that interpreter's path. Rewritten only when
# it changes; left alone by builds without the package (the static one) and
# by the sanitizer build, whose extensions load only with the ASan runtime
# preloaded (its lit tests do that).
python_dir="$(cd "$build_dir" && pwd)/python"
if [[ -d "$python_dir/moe_mlir" && $sanitize != ON ]]; then
  python=$(cat "$python_dir/interpreter.txt")
  site=$("$python" -c 'import site; print(site.getsitepackages()[0])')
  if [[ "$(cat "$site/moe_mlir.pth" 2>/dev/null)" != "$python_dir" ]]; then
    echo "setup: $site/moe_mlir.pth -> $python_dir"
    $sudo mkdir -p "$site"
    echo "$python_dir" | $sudo tee "$site/moe_mlir.pth" >/dev/null
  fi
fi
