"""The demo's figure: validation curves, the λ dose-response, and the test figures against the references
(matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import ARM_LABELS

COLORS = {"grpo": "#7f7f7f", "grpo_echo": "#d62728", "direct_ce": "#1f77b4"}
REF_STYLE = {"unigram": ":", "bigram": "-.", "start": "--"}


def _mean_curve(seeds: list[dict[str, Any]], get: Any) -> tuple[list[int], list[float]]:
    steps = [e["step"] for e in seeds[0]["evals"]]
    return steps, [sum(get(s["evals"][i]["val"]) for s in seeds) / len(seeds) for i in range(len(steps))]


def plot_report(report: dict[str, Any], path: Path, dpi: int = 110) -> Path:
    """2x3 panels: validation env CE and success per RL step (mean over seeds), λ dose-response on validation (top);
    test env CE and test success per arm with 95% intervals and the references, the start checkpoint's
    pretraining loss (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(14, 7.6))
    arms: dict[str, Any] = report["arms"]
    vref = report["baselines"]["validation"]
    v0 = vref["start"]  # the curves are changes from the start checkpoint: RL moves env CE by far less than the
    # distance between the references, which would flatten them to one line
    for arm, data in arms.items():
        kw = {"color": COLORS.get(arm), "label": ARM_LABELS.get(arm, arm)}
        for s in data["seeds"]:  # thin: each seed; thick: the mean
            st = [e["step"] for e in s["evals"]]
            ys = [e["val"]["env_ce"]["nats_per_token"] - v0 for e in s["evals"]]
            ax[0, 0].plot(st, ys, alpha=0.25, color=kw["color"])
        ax[0, 0].plot(*_mean_curve(data["seeds"], lambda v: v["env_ce"]["nats_per_token"] - v0), marker="o", **kw)
        ax[0, 1].plot(*_mean_curve(data["seeds"], lambda v: v["policy"]["success"]), marker="o", **kw)
    ax[0, 0].axhline(0.0, color="black", linestyle=REF_STYLE["start"], linewidth=1, label=f"start {v0:.3f}")
    sel = report["lambda_selection"]
    xs = list(range(len(sel["validation"])))
    ce = [r["env_ce"] for r in sel["validation"]]
    ax[0, 2].errorbar(
        xs,
        [c["mean"] for c in ce],
        yerr=_err(ce),
        marker="o",
        color="#d62728",
        capsize=3,
        label="validation env CE",
    )
    twin = ax[0, 2].twinx()
    twin.errorbar(
        xs,
        [r["success"]["mean"] for r in sel["validation"]],
        yerr=_err([r["success"] for r in sel["validation"]]),
        marker="s",
        color="#2ca02c",
        capsize=3,
        label="validation success",
    )
    twin.set_ylabel("success", fontsize=9)
    twin.set_ylim(-0.03, 1.03)
    ax[0, 2].set_xticks(xs, [f"{r['lambda']:g}" for r in sel["validation"]])
    ax[0, 2].axvline(xs[[r["lambda"] for r in sel["validation"]].index(sel["chosen"])], color="gray", alpha=0.4, lw=6)
    ax[0, 2].legend(fontsize=7, loc="upper left")
    twin.legend(fontsize=7, loc="upper right")

    names = list(arms)
    tce = [arms[a]["summary"]["test_env_ce_change"] for a in names]
    ax[1, 0].errorbar(range(len(names)), [c["mean"] for c in tce], yerr=_err(tce), fmt="o", capsize=4, color="black")
    for i, a in enumerate(names):
        ax[1, 0].scatter([i] * len(tce[i]["per_seed"]), tce[i]["per_seed"], color=COLORS.get(a), alpha=0.6, zorder=3)
    b = report["baselines"]
    refs = ", ".join(f"{name} {b[name]:.3f}" for name in ("start", "bigram", "unigram"))
    ax[1, 0].axhline(0.0, color="black", linestyle=REF_STYLE["start"], linewidth=1, label=refs)
    ax[1, 0].set_xticks(range(len(names)), [ARM_LABELS.get(a, a) for a in names], fontsize=8)
    ax[1, 0].legend(fontsize=7)
    succ = [arms[a]["summary"]["test_success"] for a in names]
    lo = [s["mean"] - s["binomial_ci95"][0] for s in succ]
    hi = [s["binomial_ci95"][1] - s["mean"] for s in succ]
    ax[1, 1].errorbar(range(len(names)), [s["mean"] for s in succ], yerr=[lo, hi], fmt="o", capsize=4, color="black")
    ax[1, 1].axhline(report["warm_start"]["after"]["test"]["policy"]["success"], color="black", ls="--", lw=1)
    ax[1, 1].set_xticks(range(len(names)), [ARM_LABELS.get(a, a) for a in names], fontsize=8)
    ax[1, 1].set_ylim(-0.03, 1.03)
    ws = report["warm_start"]["losses"]
    ax[1, 2].plot(range(1, len(ws) + 1), ws, color="black")
    titles = [
        ("validation env CE − start, per RL step (thin: seeds)", "Δ nats / env token", "RL step"),
        ("validation success per RL step (greedy)", "share with reward 1", "RL step"),
        ("λ sweep of GRPO + ECHO (validation, final step)", "nats / env token", "λ (shaded: chosen)"),
        ("test env CE − start, final checkpoint (95% CI over seeds)", "Δ nats / env token", ""),
        ("test success (binomial 95% CI; dashed: start)", "share with reward 1", ""),
        ("start checkpoint: LM pretraining (train seeds)", "NLL of action + env tokens", "pretraining step"),
    ]
    for a, (t, y, x) in zip(ax.flat, titles, strict=True):
        a.set_title(t, fontsize=10)
        a.set_ylabel(y, fontsize=9)
        a.set_xlabel(x, fontsize=9)
        a.grid(alpha=0.3)
        a.tick_params(labelsize=8)
    ax[0, 1].set_ylim(-0.03, 1.03)
    ax[0, 0].legend(fontsize=7)
    m = report["model"]
    fig.suptitle(
        f"openenv-echo reference demo ({report['config']['mode']}): {m['kind']} Llama {m['parameters'] / 1e6:.2f}M "
        f"params, terminal env over HTTP/WS, policy-sampled rollouts, {len(arms['grpo']['seeds'])} RL seed(s), "
        f"λ = {sel['chosen']:g} chosen on validation, wall {report['timings_s']['total']:.0f} s",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _err(xs: list[dict[str, Any]]) -> list[list[float]] | None:
    """Asymmetric error bars from ``ci95`` (none with a single seed)."""
    if any(x.get("ci95") is None for x in xs):
        return None
    return [[x["mean"] - x["ci95"][0] for x in xs], [x["ci95"][1] - x["mean"] for x in xs]]
