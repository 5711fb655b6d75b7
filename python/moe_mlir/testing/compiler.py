"""moe-compile as the benchmarks and moe-tune run it on the GPU machine (the
static binary that travels packed in out/tools): a bundle per call, the
presets' sizes, and the sizes of any layer."""

import json
import subprocess


class CompileError(RuntimeError):
    """moe-compile failed; the message is its last line of diagnostics."""


def compile_bundle(compiler, arguments, path, config_db="", device=""):
    """Compiles `arguments` (a preset part or a file, sizes, block_m) into
    the bundle `path`, with a tuned config database and device name when
    given; returns moe-compile's warnings (moe-tile's heuristic fallbacks)."""
    command = [compiler, *arguments, "-o", path]
    if config_db:
        command += ["--config-db", config_db]
    if device:
        command += ["--device", device]
    result = _run(command)
    return [line for line in result.stderr.splitlines() if "warning" in line]


def _run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or ["(no message)"]
        raise CompileError(f"{' '.join(command)}: {lines[-1]}")
    return result


def list_presets(compiler):
    """{name: the preset's sizes and router} from moe-compile --list-presets."""
    result = subprocess.run([compiler, "--list-presets"], check=True,
                            capture_output=True, text=True)
    return {preset["name"]: preset for preset in json.loads(result.stdout)}


def describe_layer(compiler, arguments):
    """The layer that `arguments` name (a file, --preset NAME or
    --layer-sizes TEXT, with --dtype) as moe-compile --describe gives it:
    {"experts", "hidden", "intermediate", "top_k", "shared", "dtype"} and,
    where there are, "name", "router" and "bias"."""
    return json.loads(_run([compiler, *arguments, "--describe"]).stdout)
