"""The bundles the GPU tests and benchmarks run: test/GPU/bundles.json says
how moe-compile makes each (its arguments) and what a test needs to know of
it (kind, sizes, routing); scripts/make-gpu-bundles.sh compiles them into a
directory, with a copy of the file."""

import json
import os


def load_specs(directory):
    """The bundle specs of `directory`'s bundles.json (test/GPU, or the
    directory make-gpu-bundles.sh fills)."""
    with open(os.path.join(directory, "bundles.json")) as file:
        return json.load(file)["bundles"]


def bundle_path(directory, spec):
    """Where make-gpu-bundles.sh puts the bundle of `spec` in `directory`."""
    return os.path.join(directory, spec["name"] + ".moeb")
