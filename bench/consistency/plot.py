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
