"""The lab's plot: one panel per fault class, stale-read ratio (log) and stale keys left."""

from __future__ import annotations

from pathlib import Path

from bench.common import log

ZERO_FLOOR = 1e-6    # where a zero ratio sits on the log axis (labelled "0")


def draw(table: dict[str, dict[str, dict]], labels: dict[str, str], out: Path,
         title: str) -> Path | None:
    """Write the figure to ``out``; None (and a log line) when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("consistency: matplotlib missing (pip install -e '.[bench]'); no plot written")
        return None
    classes = list(table)
    fig, axes = plt.subplots(2, len(classes), figsize=(3.2 * len(classes), 7.5),
                             sharey="row", squeeze=False)
    for i, fault in enumerate(classes):
        _ratio_panel(axes[0][i], table[fault], fault)
        _keys_panel(axes[1][i], table[fault], labels)
    axes[0][0].set_ylabel("stale reads beyond the lag window (ratio, log)")
    axes[1][0].set_ylabel("stale keys left after writes stop")
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _colors(names):
    return ["#2e7d32" if n.startswith("cachesync") else "#c0504d" for n in names]


def _ratio_panel(ax, cells: dict, fault: str) -> None:
    names = list(cells)
    ratios = [cells[n]["stale_read_ratio"] or 0 for n in names]
    ax.barh(names, [r or ZERO_FLOOR for r in ratios], color=_colors(names))
    ax.set_xscale("log")
    ax.set_xlim(ZERO_FLOOR / 2, 1)
    ax.set_title(fault)
    ax.invert_yaxis()
    for y, r in enumerate(ratios):
        ax.annotate(f"{r:.2g}" if r else "0", (max(r, ZERO_FLOOR), y), va="center",
                    fontsize=7, xytext=(2, 0), textcoords="offset points")


def _keys_panel(ax, cells: dict, labels: dict) -> None:
    names = list(cells)
    left = [cells[n]["stale_keys_after"] for n in names]
    ax.barh(names, left, color=_colors(names))
    ax.invert_yaxis()
    for y, v in enumerate(left):
        ax.annotate(f"{v:g}", (v, y), va="center", fontsize=7, xytext=(2, 0),
                    textcoords="offset points")


NINES_CAP = 9.0      # where "none failed" would sit; drawn at the 95 % bound instead


def draw_nines(classes: dict[str, dict[str, dict]], labels: dict[str, str],
               out: Path) -> Path | None:
    """The large cells: per fault class, each strategy's nines of changes applied within 1 s
    and of reads not stale beyond the lag (hatched: none failed, the bar is the 95 % bound
    3/n); stale keys left in the label. None (logged) when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("consistency: matplotlib missing (pip install -e '.[bench]'); no plot written")
        return None
    fig, axes = plt.subplots(1, len(classes), figsize=(4.6 * len(classes), 4.2), sharey=True,
                             squeeze=False)
    for ax, (fault, cells) in zip(axes[0], classes.items()):
        columns = _nines_columns(cells, list(labels))
        for j, (what, get) in enumerate((("changes within 1 s", _change_share),
                                         ("reads within the lag", _read_share))):
            for i, (name, _, cell) in enumerate(columns):
                value, bounded = _nines_of(get(cell))
                x = i + (j - 0.5) * 0.38
                ax.bar(x, value, 0.36, color=_colors([name])[0], alpha=1.0 if j == 0 else 0.55,
                       hatch="//" if bounded else None, edgecolor="black", linewidth=0.4)
                ax.annotate(f"{'≥' if bounded else ''}{value:.1f}", (x, value), ha="center",
                            fontsize=7, xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(range(len(columns)))
        ax.set_xticklabels([label for _, label, _ in columns], fontsize=7)
        ax.set_title(fault)
    axes[0][0].set_ylabel("nines (dark: changes applied within 1 s; light: reads not\n"
                          "stale beyond the lag; hatched: none failed, 95 % bound)")
    fig.suptitle("cachesync consistency lab, large cells: 10^7 reads, 10^5 writes per cell")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _nines_columns(cells: dict, names: list[str]) -> list[tuple[str, str, dict]]:
    """(strategy, tick label, figures) per column: each strategy's cell, and for cachesync in
    the kill class also its figures outside the outage windows (its own faults delay its
    invalidations; the application strategies do not depend on those processes)."""
    columns = []
    for name in names:
        cell = cells[name]
        columns.append((name, f"{name}\n{cell['stale_keys_after']} stale keys left", cell))
        apart = cell.get("outside_outages")
        if name == "cachesync" and apart:
            columns.append((name, f"{name}\noutside the outages", apart))
    return columns


def _change_share(cell: dict) -> dict:
    return cell["per_change"]["within"]["1s"]


def _read_share(cell: dict) -> dict:
    return cell["per_read"]["beyond_lag"]


def _nines_of(s: dict) -> tuple[float, bool]:
    """(nines, whether it is the 95 % bound because none failed)."""
    if s["nines"] is not None:
        return s["nines"], False
    return (s["nines_at_least"] or 0.0), True


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.consistency.plot <results.json> [out.png]``: draw the large cells'
    plot again from a committed ``consistency_nines`` results file (default: the docs' one)."""
    import argparse
    import json

    from bench.consistency.strategies import BY_NAME

    parser = argparse.ArgumentParser(prog="python -m bench.consistency.plot",
                                     description=main.__doc__)
    parser.add_argument("results", type=Path, help="a results JSON with consistency_nines")
    parser.add_argument("out", type=Path, nargs="?", default=Path("docs/consistency-lab.png"))
    args = parser.parse_args(argv)
    nines = json.loads(args.results.read_text())["benchmarks"]["consistency_nines"]
    classes = nines["classes"]
    names = [s for s in nines["strategies"] if all(s in cells for cells in classes.values())]
    return 0 if draw_nines(classes, {s: BY_NAME[s].label for s in names}, args.out) else 1


if __name__ == "__main__":
    raise SystemExit(main())
