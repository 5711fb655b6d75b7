"""What moe-tune searches, compiles and writes, without a GPU: the layer to
tune (a preset, a file or sizes, as moe-compile describes it), its grouped
matmuls, the #moe.gemm_config candidates of one compiled side by side, and
the config database (docs/CONFIG-DATABASE.md) the compiler reads."""

import concurrent.futures
import hashlib
import itertools
import json
import os
import tempfile
import time

from ..layers import Layer, weight_scaling
from .compiler import CompileError, compile_bundle, describe_layer

# Accumulator columns per block, ring depths and K splits tried. The compiler
# is the judge of what is valid (block_n against the gate/up halves, the ring
# against shared memory, splits against the K tiles): a candidate it rejects
# is dropped and counted.
BLOCK_N = (64, 128, 192, 256)
STAGES = (3, 4, 5, 6)
SPLITS = (2, 3, 4, 6, 8)
SPLIT_BLOCK_N = (64, 128, 256)
SPLIT_STAGES = (3, 4, 6)
# K splits pay off only while the tiles cannot fill the GPU: they are timed
# up to this many tokens (and compiled for it, which sizes their workspace).
SPLIT_MAX_TOKENS = 256
# A persistent grid pays off only with many tiles per block (bench/RESULTS.md:
# up to 9 % faster at 1024 and 4096 tokens, slower at 256): unsplit
# candidates are also timed persistent from this many tokens.
PERSISTENT_MIN_TOKENS = 1024
# The token buckets tuned unless told.
DEFAULT_TOKENS = (1, 16, 64, 256, 1024, 4096)
# A device name no database has: compiling for it gives moe-tile's heuristic.
HEURISTIC_DEVICE = "moe-tune: no device (the heuristic)"

# FP8 (e4m3) weights, by the rules of convert-moe-to-gpu rather than by
# brute force. block_k is 128 elements: the 128-byte swizzle, and the scale
# block that block scales require. Block scales allow block_n up to 128 (the
# promotion holds a second set of accumulators) with weight boxes that tile
# the 128-row scale blocks (block_n / 2 rows for gemm1's gate and up halves,
# block_n for gemm2): 64 and 128 (32 and below tile them too, but halve the
# wgmma again); channel and tensor scales allow 256 as well.
FP8 = "f8E4M3FN"
FP8_BLOCK_K = 128
FP8_BLOCK_N = {"block": (64, 128), "channel": (64, 128, 256),
               "tensor": (64, 128, 256)}
# A stage holds block_m + block_n rows of 128 bytes: rings of 3 to 8 stages
# are four blocks per multiprocessor down to one deep ring (one warpgroup);
# rings over a block's 227 KiB are not tried.
FP8_STAGES = (3, 4, 6, 8)
# K splits (the weights' K tiles: 56 for H = 7168, 16 for I = 2048) for
# when the tiles cannot fill the GPU, at the shallow rings that let several
# blocks share a multiprocessor.
FP8_SPLITS = (2, 3, 4)
FP8_SPLIT_STAGES = (3, 4)
SHARED_MEMORY_BYTES = 227 * 1024
#: An entry's config where moe-tile's heuristic measured fastest: moe-tile
#: then takes the heuristic's (not a neighbouring bucket's entry).
HEURISTIC = "heuristic"


def layer_sizes(layer):
    """moe-compile --layer-sizes' text for `layer` (a --list-presets or
    --describe object): "experts=E,hidden=H,intermediate=I,top_k=K,shared=X"."""
    return ",".join(f"{key}={layer[key]}" for key in
                    ("experts", "hidden", "intermediate", "top_k", "shared"))


def sizes_name(layer):
    """A layer's name from its sizes: "e256-top8-h7168-i2048", with
    "-shared1" for one shared expert."""
    name = (f"e{layer['experts']}-top{layer['top_k']}-h{layer['hidden']}-"
            f"i{layer['intermediate']}")
    return name + (f"-shared{layer['shared']}" if layer["shared"] else "")


def resolve_layer(compiler, layer, dtype="bf16", quantization=None):
    """The layer to tune as moe-compile --describe gives it, with a "name":
    `layer` is a moe_mlir.Layer (its sizes; with the experts' biases or the
    clamped SwiGLU, its MLIR in a file of the temporary directory), a path
    to an MLIR file with one moe.fused_moe (an os.PathLike, or a str that
    ends in .mlir or names a file; named after the file, in the file's own
    dtype and quantization), a
    --layer-sizes text ("experts=256,hidden=7168,intermediate=2048,top_k=8")
    or a preset name. Presets and sizes take `dtype` and `quantization`
    (None, or fp8 weights scaled per "tensor", "channel" or "block", which
    the result then names as "quantization"; a file's static activation
    scales are named by their weights' scaling, since they reach the GEMMs
    as per-token ones do and the database keys the weights'). Raises
    CompileError with moe-compile's message when it names no layer."""
    if isinstance(layer, Layer):
        text = layer_sizes({"experts": layer.num_experts,
                            "hidden": layer.hidden_size,
                            "intermediate": layer.intermediate_size,
                            "top_k": layer.router.top_k,
                            "shared": layer.router.num_shared_experts})
        if quantization or not (layer.expert_biases or layer.swiglu):
            return resolve_layer(compiler, text, dtype, quantization)
        # Its epilogue (compile_source) needs its own MLIR: a file named by
        # its text, so that equal layers share it.
        source = layer.source(dtype)
        path = os.path.join(tempfile.gettempdir(), "moe-tune-layer-" +
                            hashlib.sha256(source.encode()).hexdigest()[:16]
                            + ".mlir")
        if not os.path.exists(path):
            temporary = f"{path}.{os.getpid()}.tmp"
            with open(temporary, "w") as file:
                file.write(source)
            os.replace(temporary, path)
        described = resolve_layer(compiler, path)
        return dict(described, name=sizes_name(described))
    text = os.fspath(layer)
    if (isinstance(layer, os.PathLike) or text.endswith(".mlir") or
            os.path.isfile(text)):
        described = describe_layer(compiler, [text])
        stem = os.path.splitext(os.path.basename(text))[0]
        if described.get("quantization"):
            described["quantization"] = weight_scaling(
                described["quantization"])
        return dict(described, name=stem, file=text)
    source = ["--layer-sizes" if "=" in text else "--preset", text,
              "--dtype", dtype]
    if quantization:
        source += ["--quantization", quantization]
    described = describe_layer(compiler, source)
    if "=" not in text:
        described["preset"] = text
    return dict(described, name=described.get("name") or sizes_name(described))


def swiglu_fields(text):
    """(alpha, limit) of a #moe.swiglu's text ("alpha = 1.702, limit =
    7.0", as --describe gives it)."""
    fields = dict(item.split(" = ") for item in text.split(", "))
    return float(fields["alpha"]), float(fields["limit"])


def compile_source(layer, quantization=None):
    """moe-compile's arguments that name the grouped matmuls of `layer` (a
    resolve_layer object) and the epilogue fields of their specs: a bf16 or
    f16 preset or file whose experts have biases or the clamped SwiGLU
    (gpt-oss's) compiles as itself, with them, since its sizes would drop
    them and the epilogue changes which config is fastest; every other
    layer (fp8 weights' `quantization` too) as its sizes."""
    named = (["--preset", layer["preset"]] if layer.get("preset") else
             [layer["file"]] if layer.get("file") else None)
    if not quantization and named and (layer.get("expert_biases") or
                                       layer.get("swiglu")):
        swiglu = layer.get("swiglu")
        return named, {"expert_biases": bool(layer.get("expert_biases")),
                       "swiglu": swiglu_fields(swiglu) if swiglu else None}
    return ["--layer-sizes", layer_sizes(layer)], {}


def gemms(layer, dtype="bf16", block_m=64, quantization=None):
    """The two grouped matmuls of a layer (a moe-compile --list-presets or
    resolve_layer object) as dicts: the key fields of the database (E, N,
    K; dtype, the activations', and quantization, None or the fp8 weights'
    scaling, which give the key's dtype: weight_dtype), the sizes the
    benchmark's and the tuner's cases take (gemm.py), the layer's
    --layer-sizes text, and the moe-compile arguments that compile them with
    the epilogue fields they imply (compile_source)."""
    shared = layer["shared"]
    source, epilogue = compile_source(layer, quantization)
    common = {"model": layer["name"], "dtype": dtype,
              "quantization": quantization, "block_m": block_m,
              "experts": layer["experts"] + shared,
              "slots": layer["top_k"] + shared, "shared": shared,
              "hidden": layer["hidden"],
              "intermediate": layer["intermediate"],
              "sizes": layer_sizes(layer), "source": source, **epilogue}
    hidden, inter = layer["hidden"], layer["intermediate"]
    return [dict(common, part="gemm1", N=2 * inter, K=hidden),
            dict(common, part="gemm2", N=hidden, K=inter)]


def _grid(block_n, stages, splits, split_block_n, split_stages):
    """Unsplit configs of each block_n and ring depth, then split ones."""
    result = [{"block_n": n, "num_stages": s, "split_k": 1}
              for n, s in itertools.product(block_n, stages)]
    return result + [{"block_n": n, "num_stages": s, "split_k": k}
                     for k, n, s in itertools.product(splits, split_block_n,
                                                      split_stages)]


def weight_dtype(gemm):
    """The database's dtype of a gemms() dict: its weights' element type."""
    return FP8 if gemm["quantization"] else gemm["dtype"]


def candidates(block_m=64, quantization=None):
    """The config fields tried for one grouped matmul routed in blocks of
    `block_m` rows, unsplit first; from 128 rows each also with two
    warpgroups (128-row tiles); each with and without a producer warpgroup
    (warp_specialized); the unsplit ones last again as persistent grids,
    without and with their last round split along K (stream_k).
    With fp8 weights scaled per `quantization`, the FP8_* fields (block_k
    128), rings that fit a block's shared memory only."""
    if quantization:
        block_n = FP8_BLOCK_N[quantization]
        result = [dict(config, block_k=FP8_BLOCK_K) for config in _grid(
            block_n, FP8_STAGES, FP8_SPLITS, block_n, FP8_SPLIT_STAGES)]
    else:
        result = _grid(BLOCK_N, STAGES, SPLITS, SPLIT_BLOCK_N, SPLIT_STAGES)
    if block_m >= 128:
        result = [dict(config, num_warpgroups=warpgroups)
                  for warpgroups in (1, 2) for config in result]
    if quantization:
        # fp8 tiles are one byte per element: block_k bytes per row.
        result = [config for config in result
                  if config["num_stages"] * (block_m + config["block_n"]) *
                  FP8_BLOCK_K <= SHARED_MEMORY_BYTES]
    result = [dict(config, warp_specialized=specialized)
              for specialized in (False, True) for config in result]
    # `persistent` stated either way: an entry that left it out would take
    # whatever the heuristic chooses later.
    return ([dict(config, persistent=False) for config in result] +
            [dict(config, persistent=True, stream_k=stream_k)
             for stream_k in (False, True) for config in result
             if config["split_k"] == 1])


def config_name(gemm, config):
    """The bundle name of candidate `config` of `gemm`: distinct configs,
    distinct names (the bundles are compiled side by side)."""
    return (f"{gemm['model']}-{gemm['part']}-m{gemm['block_m']}"
            f"-n{config['block_n']}-s{config['num_stages']}"
            f"-k{config['split_k']}-w{config.get('num_warpgroups', 1)}"
            f"{'-ws' if config.get('warp_specialized') else ''}"
            f"{'-p' if config.get('persistent') else ''}"
            f"{'-sk' if config.get('stream_k') else ''}")


def timed_at(config, tokens):
    """Whether a candidate is timed at `tokens` tokens."""
    if config.get("persistent"):
        return tokens >= PERSISTENT_MIN_TOKENS
    return config["split_k"] == 1 or tokens <= SPLIT_MAX_TOKENS


def entry(gemm, device, tokens, config, measured=None):
    """One database entry for `gemm` on `device` at the `tokens` bucket."""
    result = {"device": device, "dtype": weight_dtype(gemm)}
    if gemm["quantization"]:
        result["quantization"] = gemm["quantization"]
    result.update({"E": gemm["experts"], "N": gemm["N"], "K": gemm["K"],
                   "block_m": gemm["block_m"], "tokens": tokens,
                   "config": (HEURISTIC if config == HEURISTIC
                              else dict(config))})
    if measured is not None:
        result["measured"] = measured
    return result


def entry_key(item):
    return (item["device"], item["dtype"], item.get("quantization", ""),
            item["E"], item["N"], item["K"], item.get("block_m", 0),
            item["tokens"])


def merge(old_entries, new_entries):
    """`old_entries` with each key and bucket of `new_entries` replaced or
    added, sorted by device, shape and tokens."""
    merged = {entry_key(item): item for item in old_entries}
    merged.update((entry_key(item), item) for item in new_entries)
    return [merged[key] for key in sorted(merged)]


COMMENT = ("Tuned #moe.gemm_config fields per grouped matmul (E, N, K, dtype, "
           "fp8 quantization, device) and token bucket, written by "
           "tools/moe-tune (docs/CONFIG-DATABASE.md); compiled into "
           "moe-tile.")


def read_database(path):
    """The entries of the database at `path` ([] when there is none)."""
    if not os.path.exists(path):
        return []
    with open(path) as file:
        return json.load(file)["entries"]


def write_database(path, entries):
    """Writes `entries` as a database, one entry per line group."""
    lines = [json.dumps(item, sort_keys=False) for item in entries]
    text = ('{\n "comment": ' + json.dumps(COMMENT) + ',\n "entries": [\n  '
            + ",\n  ".join(lines) + "\n ]\n}\n")
    temporary = path + ".tmp"
    with open(temporary, "w") as file:
        file.write(text)
    os.replace(temporary, path)


class Compiler:
    """moe-compile, run for one grouped matmul (a gemms() dict) into the
    directory `work`: with a candidate config (a database of that one entry
    for `device`), or with moe-tile's heuristic (compiled for
    HEURISTIC_DEVICE, which no database has)."""

    def __init__(self, path, work, device):
        self.path, self.work, self.device = path, work, device

    def compile(self, gemm, name, tokens_max, config=None):
        """(bundle path, moe-compile's warnings) or (None, its message);
        `config` None compiles the heuristic's config."""
        bundle = os.path.join(self.work, name + ".moeb")
        arguments = [*gemm["source"], "--part", gemm["part"],
                     "--dtype", gemm["dtype"], "--block-m",
                     str(gemm["block_m"]), "--tokens-max", str(tokens_max),
                     "--token-buckets", "max"]
        if gemm["quantization"]:
            arguments += ["--quantization", gemm["quantization"]]
        database, device = "", HEURISTIC_DEVICE
        if config is not None:
            database = os.path.join(self.work, name + ".json")
            device = self.device
            write_database(database, [entry(gemm, self.device, 1, config)])
        try:
            return bundle, compile_bundle(self.path, arguments, bundle,
                                          database, device)
        except CompileError as error:
            return None, str(error)


def plan_key(gemm):
    """compile_all's key of a grouped matmul: (layer name, part, block_m)."""
    return gemm["model"], gemm["part"], gemm["block_m"]


def compile_all(compiler, gemms_list, tokens_list, jobs):
    """{plan_key(gemm): {"candidates": [(config, bundle)], "heuristic": {T:
    bundle}, "rejected": [(config, why)]}}: every candidate of each grouped
    matmul (split-K ones sized for at most SPLIT_MAX_TOKENS tokens) and the
    heuristic's bundle for each T, compiled by `compiler` (a Compiler) in
    `jobs` threads. Raises RuntimeError when a heuristic bundle does not
    compile."""
    plans = {}
    work = []  # (plan, Compiler.compile's arguments)
    for gemm in gemms_list:
        plan = plans.setdefault(plan_key(gemm), {"candidates": [],
                                                 "heuristic": {},
                                                 "rejected": []})
        for config in candidates(gemm["block_m"], gemm["quantization"]):
            tokens_max = (max(tokens_list) if config["split_k"] == 1 else
                          min(max(tokens_list), SPLIT_MAX_TOKENS))
            work.append((plan, (gemm, config_name(gemm, config), tokens_max,
                                config)))
        for tokens in tokens_list:
            name = (f"{gemm['model']}-{gemm['part']}-m{gemm['block_m']}-"
                    f"heuristic-{tokens}")
            work.append((plan, (gemm, name, tokens, None)))
    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [(plan, job, pool.submit(compiler.compile, *job))
                   for plan, job in work]
        for plan, (_, name, tokens_max, config), future in futures:
            bundle, message = future.result()
            if config is None:
                if bundle is None:
                    raise RuntimeError(f"the heuristic config of {name} does "
                                       f"not compile: {message}")
                plan["heuristic"][tokens_max] = bundle
            elif bundle is None:
                plan["rejected"].append((config, message))
            else:
                plan["candidates"].append((config, bundle))
    print(f"# compiled {len(work)} bundles in {time.time() - started:.0f} s "
          f"with {jobs} jobs", flush=True)
    return plans


def entry_gemms(compiler, entries, presets):
    """([(gemm, entry)], [entries matching none]): the grouped matmul (a
    gemms() dict at the entry's dtype, quantization and block_m; an fp8
    entry's with bf16 activations, which its key does not name) whose
    database key each of `entries` has, from the layer its "measured"
    records (moe-tune writes the layer's --layer-sizes text there) or else
    from `presets` (a list_presets() dict)."""
    described = {}  # --layer-sizes text -> resolve_layer object

    def layers_of(item):
        recorded = item.get("measured", {}).get("layer")
        if recorded is None:
            return presets.values()
        if recorded not in described:
            named = [preset for preset in presets.values()
                     if layer_sizes(preset) == recorded]
            described[recorded] = (named[0] if named else
                                   resolve_layer(compiler, recorded))
        return [described[recorded]]

    matched, unmatched = [], []
    for item in entries:
        quantization = item.get("quantization")
        dtype = "bf16" if quantization else item["dtype"]
        found = [gemm for layer in layers_of(item) if "block_m" in item
                 for gemm in gemms(layer, dtype, item["block_m"],
                                   quantization)
                 if entry_key(entry(gemm, item["device"], item["tokens"],
                                    {})) == entry_key(item)]
        if found:
            matched.append((found[0], item))
        else:
            unmatched.append(item)
    return matched, unmatched


def gemm_pair(gemm):
    """{part: gemm} of both grouped matmuls of `gemm`'s layer, at its dtype,
    quantization and block_m (what model_cases takes)."""
    shared = gemm["shared"]
    layer = {"name": gemm["model"], "experts": gemm["experts"] - shared,
             "top_k": gemm["slots"] - shared, "shared": shared,
             "hidden": gemm["hidden"], "intermediate": gemm["intermediate"]}
    return {pair["part"]: pair
            for pair in gemms(layer, gemm["dtype"], gemm["block_m"],
                              gemm["quantization"])}
