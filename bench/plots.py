"""Small PNG plots for the fleet benchmarks: latency distributions (as CDFs, which
show the tail that a histogram hides) and how a figure scales with fleet size.

matplotlib is the `bench` extra; without it the benchmarks still print and write JSON,
and say that no plot was drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.fleet_common import RESULTS_DIR

_SIZE = (5.6, 3.4)
_DPI = 90


def _pyplot() -> Any | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def cdf(
    name: str,
    title: str,
    series: Mapping[str, Sequence[float]],
    xlabel: str = "latency (ms)",
    log_x: bool = True,
) -> Path | None:
    """One CDF line per series (label → samples); written to bench/results/<name>.png."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=_SIZE, dpi=_DPI)
    for label, values in series.items():
        ordered = sorted(v for v in values if v > 0 or not log_x)
        if not ordered:
            continue
        ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
        ax.step(ordered, ys, where="post", label=f"{label} (n={len(ordered)})")
    if log_x:
        _plain_log_x(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction ≤ x")
    ax.set_ylim(0, 1.01)
    ax.axhline(0.99, color="grey", linewidth=0.6, linestyle=":")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, plt, name)


def scaling(
    name: str,
    title: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    xlabel: str,
    ylabel: str,
    log_x: bool = False,
    target: float | None = None,
) -> Path | None:
    """One line per series (label → (x, y) points), with an optional target line."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=_SIZE, dpi=_DPI)
    for label, points in series.items():
        if points:
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", label=label)
    if target is not None:
        ax.axhline(target, color="red", linewidth=0.8, linestyle="--", label="target")
    if log_x:
        _plain_log_x(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, plt, name)


def _plain_log_x(ax: Any) -> None:
    """A log x axis labelled 1, 3, 10, 30… rather than in powers of ten."""
    from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 3.0)))
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _save(fig: Any, plt: Any, name: str) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
