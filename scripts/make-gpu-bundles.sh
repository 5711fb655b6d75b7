#!/usr/bin/env bash
# Compiles the bundles of test/GPU/bundles.json with moe-compile into
# out/gpu-bundles/ (here, where MLIR is), to be carried to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
compiler=${MOE_COMPILE:-build/bin/moe-compile}
# The bundles come from the tree as it is: moe-compile for bundles.json,
# and the Python package's compiler module (PYTHONPATH=build/python) for
# the tests' preparations below, which building moe-compile alone leaves
# stale.
if [[ -z ${MOE_COMPILE:-} ]]; then
  ninja -C build moe-compile MoePythonCompiler
fi
rm -rf out/gpu-bundles
mkdir -p out/gpu-bundles
/usr/bin/python3 - "$compiler" <<'PY'
import json, subprocess, sys
compiler = sys.argv[1]
for bundle in json.load(open("test/GPU/bundles.json"))["bundles"]:
    # Routing the tests compute themselves must use the bundle's block_m.
    rows = (["--block-m", str(bundle["block_m"])]
            if "block_m" in bundle and "--block-m" not in bundle["args"]
            else [])
    command = [compiler, *bundle["args"], *rows, "--tokens-max", "16384",
               "-o", f"out/gpu-bundles/{bundle['name']}.moeb"]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)
PY
cp test/GPU/bundles.json out/gpu-bundles/
/usr/bin/python3 test/GPU/python_test.py --prepare
/usr/bin/python3 test/GPU/torch_test.py --prepare
/usr/bin/python3 test/GPU/fp8_torch_test.py --prepare
/usr/bin/python3 test/GPU/transformers_test.py --prepare
/usr/bin/python3 test/GPU/gpt_oss_torch_test.py --prepare
/usr/bin/python3 bench/transformers_bench.py --prepare
/usr/bin/python3 test/GPU/ep_test.py --prepare
/usr/bin/python3 test/GPU/ep_dist_test.py --prepare
/usr/bin/python3 test/GPU/tp_test.py --prepare
/usr/bin/python3 bench/tp_bench.py --prepare
