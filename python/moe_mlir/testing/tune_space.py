"""What moe-tune searches and writes, without a GPU: the grouped matmuls of a
preset, the #moe.gemm_config candidates of one, and the config database
(docs/CONFIG-DATABASE.md) the compiler reads."""

import itertools
import json
import os

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


def gemms(preset, dtype="bf16", block_m=64):
    """The two grouped matmuls of a preset (a moe-compile --list-presets
    object) as dicts: the key fields of the database (E, N, K, dtype) and
    the sizes the benchmark's and the tuner's cases take (gemm.py)."""
    shared = preset["shared"]
    common = {"model": preset["name"], "dtype": dtype, "block_m": block_m,
              "experts": preset["experts"] + shared,
              "slots": preset["top_k"] + shared, "shared": shared,
              "hidden": preset["hidden"],
              "intermediate": preset["intermediate"]}
    hidden, inter = preset["hidden"], preset["intermediate"]
    return [dict(common, part="gemm1", N=2 * inter, K=hidden),
            dict(common, part="gemm2", N=hidden, K=inter)]


def candidates(block_m=64):
    """The config fields tried for one grouped matmul routed in blocks of
    `block_m` rows, unsplit first; from 128 rows each also with two
    warpgroups (128-row tiles); each with and without a producer warpgroup
    (warp_specialized); the unsplit ones last again as persistent grids."""
    result = [{"block_n": n, "num_stages": s, "split_k": 1}
              for n, s in itertools.product(BLOCK_N, STAGES)]
    result += [{"block_n": n, "num_stages": s, "split_k": k}
               for k, n, s in itertools.product(SPLITS, SPLIT_BLOCK_N,
                                                SPLIT_STAGES)]
    if block_m >= 128:
        result = [dict(config, num_warpgroups=warpgroups)
                  for warpgroups in (1, 2) for config in result]
    result = [dict(config, warp_specialized=specialized)
              for specialized in (False, True) for config in result]
    return result + [dict(config, persistent=True) for config in result
                     if config["split_k"] == 1]


def config_name(gemm, config):
    """The bundle name of candidate `config` of `gemm`: distinct configs,
    distinct names (the bundles are compiled side by side)."""
    return (f"{gemm['model']}-{gemm['part']}-m{gemm['block_m']}"
            f"-n{config['block_n']}-s{config['num_stages']}"
            f"-k{config['split_k']}-w{config.get('num_warpgroups', 1)}"
            f"{'-ws' if config.get('warp_specialized') else ''}"
            f"{'-p' if config.get('persistent') else ''}")


def timed_at(config, tokens):
    """Whether a candidate is timed at `tokens` tokens."""
    if config.get("persistent"):
        return tokens >= PERSISTENT_MIN_TOKENS
    return config["split_k"] == 1 or tokens <= SPLIT_MAX_TOKENS


def entry(gemm, device, tokens, config, measured=None):
    """One database entry for `gemm` on `device` at the `tokens` bucket."""
    result = {"device": device, "dtype": gemm["dtype"],
              "E": gemm["experts"], "N": gemm["N"], "K": gemm["K"],
              "block_m": gemm["block_m"], "tokens": tokens,
              "config": dict(config)}
    if measured is not None:
        result["measured"] = measured
    return result


def entry_key(item):
    return (item["device"], item["dtype"], item["E"], item["N"], item["K"],
            item.get("block_m", 0), item["tokens"])


def merge(old_entries, new_entries):
    """`old_entries` with each key and bucket of `new_entries` replaced or
    added, sorted by device, shape and tokens."""
    merged = {entry_key(item): item for item in old_entries}
    merged.update((entry_key(item), item) for item in new_entries)
    return [merged[key] for key in sorted(merged)]


COMMENT = ("Tuned #moe.gemm_config fields per grouped matmul (E, N, K, dtype, "
           "device) and token bucket, written by tools/moe-tune "
           "(docs/CONFIG-DATABASE.md); compiled into moe-tile.")


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
