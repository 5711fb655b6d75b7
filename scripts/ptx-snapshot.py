#!/usr/bin/python3
"""Snapshots what moe-compile emits, to show that a refactoring of the
lowering changes no kernel: the PTX and the launch plan (manifest) of every
bundle of test/GPU/bundles.json and of the four presets' whole layers at
--tokens-max 1 and 4096.

  scripts/ptx-snapshot.py --compiler build/bin/moe-compile --out out/ptx-after
  scripts/ptx-snapshot.py --compare out/ptx-before out/ptx-after

--compare prints one line per bundle (identical, or which files differ) and
exits non-zero when any file differs or is missing on one side. Take the
"before" snapshot with the compiler built from the commit before the change
(a `git worktree` of it builds quickly with ccache)."""

import argparse
import concurrent.futures
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "kimi-k2"]
KEPT = ["kernels.ptx", "manifest.txt"]


def bundles():
    """(name, moe-compile arguments) of every bundle snapshotted."""
    with open(os.path.join(ROOT, "test/GPU/bundles.json")) as file:
        for bundle in json.load(file)["bundles"]:
            # As scripts/make-gpu-bundles.sh compiles them.
            rows = (["--block-m", str(bundle["block_m"])]
                    if "block_m" in bundle and "--block-m" not in bundle["args"]
                    else [])
            yield bundle["name"], [*bundle["args"], *rows,
                                   "--tokens-max", "16384"]
    for preset in PRESETS:
        for tokens in (1, 4096):
            yield (f"layer-{preset}-t{tokens}",
                   ["--preset", preset, "--tokens-max", str(tokens)])


def snapshot(compiler, out, name, arguments):
    """Compiles one bundle into a scratch directory; keeps its KEPT files."""
    with tempfile.TemporaryDirectory() as scratch:
        bundle = os.path.join(scratch, "bundle")
        result = subprocess.run([compiler, *arguments, "-o", bundle],
                                cwd=ROOT, capture_output=True, text=True)
        if result.returncode != 0:
            return f"{name}: moe-compile failed: {result.stderr.strip()}"
        os.makedirs(os.path.join(out, name))
        for kept in KEPT:
            shutil.copy(os.path.join(bundle, kept), os.path.join(out, name))
    return None


def take(compiler, out, jobs):
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    compiler = os.path.abspath(compiler)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        errors = [error for error in pool.map(
            lambda item: snapshot(compiler, out, *item), bundles()) if error]
    for error in errors:
        print(error, file=sys.stderr)
    print(f"{len(os.listdir(out))} bundles snapshotted into {out}")
    return 1 if errors else 0


def compare(before, after):
    names = sorted(set(os.listdir(before)) | set(os.listdir(after)))
    differing = 0
    for name in names:
        different = []
        for kept in KEPT:
            a, b = (os.path.join(side, name, kept) for side in (before, after))
            if not (os.path.exists(a) and os.path.exists(b)
                    and filecmp.cmp(a, b, shallow=False)):
                different.append(kept)
        differing += bool(different)
        print(f"{name}: " + (", ".join(different) + " DIFFER" if different
                             else "identical"))
    print(f"{len(names) - differing} of {len(names)} bundles identical "
          f"(PTX and manifest)")
    return 1 if differing else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compiler", help="moe-compile to snapshot")
    parser.add_argument("--out", help="snapshot directory (replaced)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not (args.compiler and args.out):
        parser.error("give --compiler and --out, or --compare")
    return take(args.compiler, args.out, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
