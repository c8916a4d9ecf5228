"""Draw a grouped bar chart (PNG) of TPC-H query times per engine.

`foam bench tpch --compare` gathers every engine's time per query into a
results file and then runs

    python3 bench/chart.py results.json out.png

The results file looks like

    {"title": "TPC-H SF1, 2 cores",
     "engines": ["FoamDB 4 nodes", "FoamDB 1 node", "DataFusion", "DuckDB", ...],
     "queries": [{"query": 1, "ms": {"FoamDB 4 nodes": 123.0, "DuckDB": 45.0}}, ...]}

One group of bars per query, one colour per engine (in the order of
"engines"), log-scale y axis in milliseconds. An engine missing from a query
(or with a list of runs that is empty, or a time <= 0) gets no bar; a list of
runs is drawn as its median. Install with: pip install -r bench/requirements.txt
"""

import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402


def ms_value(value):
    if isinstance(value, list):
        value = statistics.median(value) if value else None
    return value if isinstance(value, (int, float)) and value > 0 else None


def main() -> int:
    if len(sys.argv) != 3:
        sys.exit("usage: chart.py results.json out.png")
    with open(sys.argv[1]) as f:
        results = json.load(f)
    engines = results["engines"]
    queries = sorted(results["queries"], key=lambda q: q["query"])

    fig, ax = plt.subplots(figsize=(16, 6), dpi=100)
    width = 0.8 / len(engines)
    colours = plt.get_cmap("tab10").colors
    for e, engine in enumerate(engines):
        xs, ys = [], []
        for i, q in enumerate(queries):
            ms = ms_value(q["ms"].get(engine))
            if ms is not None:
                xs.append(i - 0.4 + width * (e + 0.5))
                ys.append(ms)
        ax.bar(xs, ys, width, label=engine, color=colours[e % len(colours)])

    ax.set_xticks(range(len(queries)), [f"Q{q['query']}" for q in queries])
    ax.set_xlim(-0.6, len(queries) - 0.4)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.set_ylabel("time (ms, log scale)")
    ax.grid(axis="y", which="major", alpha=0.4)
    ax.set_axisbelow(True)
    ax.set_title(results.get("title", "TPC-H"), fontsize=14, pad=34)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(engines), frameon=False)
    fig.tight_layout()
    fig.savefig(sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
