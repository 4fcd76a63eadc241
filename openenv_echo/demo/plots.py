"""The demo's figure: held-out curves of the three arms against the references, the λ sweep on validation, the
final held-out figures per seed, and the start checkpoint's training (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import ARM_LABELS

COLORS = {"grpo": "#7f7f7f", "grpo_echo": "#d62728", "direct_ce": "#1f77b4"}
REF_STYLE = {"uniform": "-", "unigram": ":", "bigram": "-.", "start": "--"}
REF_COLOR = {"uniform": "#bbbbbb", "unigram": "black", "bigram": "black", "start": "black"}


def _band(ax: Any, rows: list[dict[str, Any]], key: str, color: str | None, label: str) -> None:
    """Mean line and 95% band over seeds (no band with one seed)."""
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r[key]["mean"] for r in rows], marker="o", color=color, label=label)
    if all(r[key].get("ci95") is not None for r in rows):
        ax.fill_between(
            steps,
            [r[key]["ci95"][0] for r in rows],
            [r[key]["ci95"][1] for r in rows],
            color=color,
            alpha=0.18,
            linewidth=0,
        )


def plot_report(report: dict[str, Any], path: Path, dpi: int = 110) -> Path:
    """2x3 panels. Top: held-out (test) env CE and success per RL step (mean and 95% band over seeds; references
    as lines), the λ sweep on validation. Bottom: final test env CE change per seed, test success with binomial
    intervals, the start checkpoint's two training phases."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(15, 8))
    arms: dict[str, Any] = report["arms"]
    b = report["baselines"]
    for arm, data in arms.items():
        label = ARM_LABELS.get(arm, arm) + (f" (λ = {data['lambda']:g})" if arm == "grpo_echo" else "")
        _band(ax[0, 0], data["curve"], "env_ce", COLORS.get(arm), label)
        _band(ax[0, 1], data["curve"], "success", COLORS.get(arm), label)
    for name in ("start", "uniform", "unigram", "bigram"):
        ax[0, 0].axhline(
            b[name], color=REF_COLOR[name], linestyle=REF_STYLE[name], linewidth=1, label=f"{name} {b[name]:.2f}"
        )
    start_policy = report["start_checkpoint"]["after"]["test"]["policy"]
    ax[0, 1].axhline(start_policy["success"], color="black", linestyle="--", linewidth=1, label="start")
    ax[0, 0].legend(fontsize=7, ncol=2)
    ax[0, 1].legend(fontsize=7)

    sel = report["lambda_selection"]
    xs = list(range(len(sel["validation"])))
    ce = [r["env_ce"] for r in sel["validation"]]
    ax[0, 2].errorbar(
        xs, [c["mean"] for c in ce], yerr=_err(ce), marker="o", color="#d62728", capsize=3, label="validation env CE"
    )
    twin = ax[0, 2].twinx()
    succ_val = [r["success"] for r in sel["validation"]]
    twin.errorbar(
        xs,
        [s["mean"] for s in succ_val],
        yerr=_err(succ_val),
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
    ax[1, 0].axhline(0.0, color="black", linestyle=REF_STYLE["start"], linewidth=1, label=f"start {b['start']:.3f}")
    ax[1, 0].set_xticks(range(len(names)), [ARM_LABELS.get(a, a) for a in names], fontsize=8)
    ax[1, 0].legend(fontsize=7)
    succ = [arms[a]["summary"]["test_success"] for a in names]
    lo = [s["mean"] - s["binomial_ci95"][0] for s in succ]
    hi = [s["binomial_ci95"][1] - s["mean"] for s in succ]
    ax[1, 1].errorbar(range(len(names)), [s["mean"] for s in succ], yerr=[lo, hi], fmt="o", capsize=4, color="black")
    ax[1, 1].axhline(start_policy["success"], color="black", ls="--", lw=1)
    ax[1, 1].set_xticks(range(len(names)), [ARM_LABELS.get(a, a) for a in names], fontsize=8)
    ax[1, 1].set_ylim(-0.03, 1.03)
    sc = report["start_checkpoint"]
    gen = sc.get("generic_pretraining")
    offset = 0
    if gen:
        ax[1, 2].plot(
            range(1, len(gen["losses"]) + 1), gen["losses"], color="#9467bd", label="generic text, all tokens"
        )
        offset = len(gen["losses"])
    sft = sc["sft"]["losses"]
    ax[1, 2].plot(range(offset + 1, offset + len(sft) + 1), sft, color="black", label="SFT, action tokens")
    ax[1, 2].legend(fontsize=7)
    titles = [
        ("held-out env CE per RL step (test; 95% band over seeds)", "nats / env_output token", "RL step"),
        ("held-out success per RL step (test, greedy)", "share with reward 1", "RL step"),
        ("λ sweep of GRPO + ECHO (validation, final step)", "nats / env_output token", "λ (shaded: chosen)"),
        ("held-out env CE − start, final step (dots: seeds)", "Δ nats / env_output token", ""),
        ("held-out success (binomial 95% CI; dashed: start)", "share with reward 1", ""),
        ("start checkpoint: generic pretraining, then SFT", "NLL per target token", "training step"),
    ]
    for a, (t, y, x) in zip(ax.flat, titles, strict=True):
        a.set_title(t, fontsize=10)
        a.set_ylabel(y, fontsize=9)
        a.set_xlabel(x, fontsize=9)
        a.grid(alpha=0.3)
        a.tick_params(labelsize=8)
    ax[0, 1].set_ylim(-0.03, 1.03)
    m = report["model"]
    fig.suptitle(
        f"openenv-echo reference demo ({report['config']['mode']}, {report['environment']['name']} env): {m['kind']} "
        f"Llama {m['parameters'] / 1e6:.2f}M params, policy-sampled rollouts over HTTP/WS, "
        f"{len(arms['grpo']['seeds'])} RL seed(s), λ = {sel['chosen']:g} chosen on validation, wall "
        f"{report['timings_s']['total']:.0f} s",
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
