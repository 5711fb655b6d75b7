#!/usr/bin/env python3
"""Plots layer_bench.py --json rows: per preset and routing, the layer's µs
for ours, the torch composition and the floor against T (log-log), a row
of panels per routing (rows written before layer_bench had --routing count
as `own`), into a PNG (needs matplotlib: apt-get install
python3-matplotlib).

  bench/plot_layer_bench.py layer-bench.json bench/layer_bench.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    rows_path, image_path = sys.argv[1:3]
    with open(rows_path) as file:
        rows = json.load(file)
    for row in rows:
        row.setdefault("routing", "own")
    layers = list(dict.fromkeys(row["layer"] for row in rows))
    routings = list(dict.fromkeys(row["routing"] for row in rows))
    figure, axes = plt.subplots(len(routings), len(layers),
                                figsize=(4.2 * len(layers),
                                         4 * len(routings)),
                                squeeze=False)
    for panels, routing in zip(axes, routings):
        for axis, layer in zip(panels, layers):
            mine = [row for row in rows if row["layer"] == layer and
                    row["routing"] == routing]
            tokens = [row["tokens"] for row in mine]
            for key, label, style in (("ours", "moe-mlir", "o-"),
                                      ("torch", "torch + F.grouped_mm",
                                       "s--"),
                                      ("floor", "floor", ":")):
                axis.plot(tokens, [row[key] for row in mine], style,
                          label=label)
            for row in mine:
                if row["ours"]:
                    axis.annotate(f"{row['torch'] / row['ours']:.2f}x",
                                  (row["tokens"], row["ours"]),
                                  textcoords="offset points",
                                  xytext=(0, -12), ha="center", fontsize=7)
            axis.set_xscale("log", base=2)
            axis.set_yscale("log")
            axis.set_title(f"{layer}, {routing} routing")
            axis.set_xlabel("tokens")
            axis.grid(True, which="both", alpha=0.3)
        panels[0].set_ylabel("µs per layer (CUDA graph, L2 flushed)")
    axes[0][0].legend(fontsize=8)
    figure.suptitle(f"Whole MoE layer on {rows[0]['device']}: speed-up "
                    "torch / ours under each point", fontsize=10)
    figure.tight_layout()
    figure.savefig(image_path, dpi=110)


if __name__ == "__main__":
    main()
