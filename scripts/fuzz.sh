#!/usr/bin/env bash
# Runs the two fuzzers of a MOE_FUZZ build side by side for a bounded time:
# moe-ir-fuzzer (parse, verify, moe-cpu-pipeline, moe-gpu-pipeline) seeded
# with every MLIR input of the tests and examples, one seed per
# `// -----` split, and moe-manifest-fuzzer seeded with the manifests the
# lit tests' moe-compile runs wrote (run check-moe in that build first); the
# findings not fixed yet (test/Fuzz/pending) are no seeds.
# Each keeps its corpus in $MOE_FUZZ_OUT/<fuzzer>/corpus, so a re-run goes
# on from it. An input that crashes, trips a sanitizer, hangs for 30 s or
# takes 4 GB is written to $MOE_FUZZ_OUT/<fuzzer>/ and fails the script:
# keep it in test/Fuzz/regressions/<ir|manifest>/ (test/Fuzz/regressions.test).
#
#   scripts/fuzz.sh [build dir (build-san)] [seconds per fuzzer (60)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-san}
seconds=${2:-60}
out=${MOE_FUZZ_OUT:-$build/fuzz}

seed_ir() {
  local corpus=$1
  /usr/bin/python3 - "$corpus" test examples <<'PY'
import hashlib, pathlib, sys
corpus = pathlib.Path(sys.argv[1])
for root in sys.argv[2:]:
    for path in sorted(pathlib.Path(root).rglob("*.mlir")):
        if "pending" in path.parts:
            continue
        for seed in path.read_text().split("// -----"):
            name = hashlib.sha1(seed.encode()).hexdigest()
            (corpus / name).write_text(seed)
PY
}

seed_manifest() {
  local corpus=$1
  find "$build/test" -name manifest.txt -print0 |
    while IFS= read -r -d '' manifest; do
      cp "$manifest" "$corpus/$(sha1sum <"$manifest" | cut -c1-40)"
    done
}

run() {
  local kind=$1
  local dir=$out/moe-$kind-fuzzer
  mkdir -p "$dir/corpus"
  "seed_$kind" "$dir/corpus"
  echo "fuzz: moe-$kind-fuzzer, $(ls "$dir/corpus" | wc -l) inputs in its corpus, ${seconds}s"
  "$build/bin/moe-$kind-fuzzer" "$dir/corpus" \
    -dict="test/Fuzz/moe-$kind.dict" -max_total_time="$seconds" \
    -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$dir/" >"$dir/log" 2>&1
}

mkdir -p "$out"
status=0
run ir &
ir=$!
run manifest &
manifest=$!
wait $ir || status=1
wait $manifest || status=1
for kind in ir manifest; do
  dir=$out/moe-$kind-fuzzer
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$dir/log" |
    grep -o '[0-9]*$' || echo "?")
  found=$(find "$dir" -maxdepth 1 -type f \
    \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \
       -o -name 'leak-*' \) | wc -l)
  echo "fuzz: moe-$kind-fuzzer ran $runs inputs, found $found"
  if ((found)); then
    grep -m1 -A30 -E '==ERROR|ALARM|out-of-memory|Assertion|SUMMARY' \
      "$dir/log" || tail -40 "$dir/log"
  fi
done
exit $status
