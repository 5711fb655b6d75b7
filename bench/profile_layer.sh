#!/usr/bin/env bash
# Nsight Compute's throughputs of whole layers' grouped matmuls and combine:
#   bench/profile_layer.sh PRESET:T [PRESET:T ...]
# For each cell, on the GPU machine after `scripts/gpu-run.sh layer` has
# unpacked the compiler to /tmp/moe-compile (or MOE_COMPILE=...): the
# preset's bundle for T tokens, run three times on random inputs (logits
# N(0, 1), a correction bias, weights and hidden states N(0, 0.02): each
# token's scores differ by far more than the bias, so the routing is
# near-uniform), and the second call's kernels profiled. Prints, per kernel, µs (at the clocks ncu
# fixes) and DRAM, L2, tensor-pipe and issue throughput as % of peak, and
# the DRAM bytes; bench/RESULTS.md ("Where the missed cells' time goes").
set -uo pipefail
cd "$(dirname "$0")/.."
compiler=${MOE_COMPILE:-/tmp/moe-compile}
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_issued.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for cell in "$@"; do
  preset=${cell%%:*} tokens=${cell##*:}
  bundle=$work/$preset-$tokens.moeb
  if ! "$compiler" --preset "$preset" --tokens-max "$tokens" -o "$bundle"; then
    echo "profile_layer: cannot compile $cell" >&2
    exit 1
  fi
  echo "##### $preset T=$tokens"
  timeout 300 ncu --csv --print-units base --kernel-name regex:"wgmma|combine" \
    --launch-skip 3 --launch-count 3 --metrics "$metrics" \
    python3 - "$bundle" "$tokens" > "$work/profile.csv" <<'PY'
import sys
import torch
from moe_mlir import Bundle
bundle, tokens = Bundle(sys.argv[1]), int(sys.argv[2])
dtypes = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
# The logits are the f32 [T, E] input; with scores as close as their bias
# (N(0, 0.02) too), a sigmoid router would pick by the bias alone.
tensors = [torch.randn(info.shape, device="cuda", dtype=dtypes[info.dtype])
           * (1.0 if info.dtype == "f32" and len(info.shape) == 2 else 0.02)
           for info in bundle.tensors(tokens)]
for _ in range(3):
    bundle.run(tokens, tensors)
torch.cuda.synchronize()
PY
  grep -v "^==" "$work/profile.csv" | python3 -c '
import csv, sys
names = {"gpu__time_duration.sum": ("us", 1e-3),
         "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("DRAM %", 1),
         "lts__throughput.avg.pct_of_peak_sustained_elapsed": ("L2 %", 1),
         "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed": ("tensor %", 1),
         "sm__inst_issued.avg.pct_of_peak_sustained_elapsed": ("issue %", 1),
         "dram__bytes.sum": ("DRAM MB", 1e-6)}
kernels = {}
for row in csv.DictReader(sys.stdin):
    kernels.setdefault((row["ID"], row["Kernel Name"]), {})[row["Metric Name"]] = \
        float(row["Metric Value"].replace(",", ""))
if not kernels:
    sys.exit("profile_layer: ncu profiled no kernel")
for (_, name), values in kernels.items():
    print(f"  {name[:32]:32} " + "  ".join(
        f"{label} {values[metric] * scale:8.1f}"
        for metric, (label, scale) in names.items()))
' || exit 1
done
