"""The demo's figure: held-out curves of the three arms next to their train curves (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import ARM_LABELS

COLORS = {"grpo": "#7f7f7f", "grpo_echo": "#d62728", "verifier_free": "#1f77b4"}


def plot_report(report: dict[str, Any], path: Path, dpi: int = 110) -> Path:
    """2x3 panels: held-out env CE (nats/token), held-out success, held-out mean reward (top); train env CE on
    the rollout batch, train mean reward, warm-start action NLL (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(13.5, 7.2))
    arms: dict[str, Any] = report["arms"]
    for arm, data in arms.items():
        # dashed: with no reward variance, verifier-free ECHO and GRPO + ECHO take identical steps and overlap
        kw = {
            "color": COLORS.get(arm),
            "label": ARM_LABELS.get(arm, arm),
            "linestyle": "--" if arm == "verifier_free" else "-",
        }
        ev = data["evals"]
        steps = [e["step"] for e in ev]
        ax[0, 0].plot(steps, [e["test"]["env_ce"]["nats_per_token"] for e in ev], marker="o", **kw)
        ax[0, 0].plot(
            steps,
            [e["test"]["env_ce"]["novel_nats_per_token"] for e in ev],
            marker=".",
            alpha=0.5,
            color=kw["color"],
            linestyle=":",
        )
        ax[0, 1].plot(steps, [e["test"]["policy"]["success"] for e in ev], marker="o", **kw)
        ax[0, 2].plot(steps, [e["test"]["policy"]["mean_reward"] for e in ev], marker="o", **kw)
        tr = data["train"]
        ts = [t["step"] for t in tr]
        ax[1, 0].plot(ts, [t["env_ce"] for t in tr], **kw)
        ax[1, 1].plot(ts, [t["reward_mean"] for t in tr], **kw)
        sel = data.get("selected")
        if sel is not None:
            ax[0, 0].scatter(
                [sel["step"]],
                [sel["test"]["env_ce"]["nats_per_token"]],
                s=140,
                facecolors="none",
                edgecolors=kw["color"],
                linewidths=1.5,
            )
    ws = report["warm_start"]["losses"]
    ax[1, 2].plot(range(1, len(ws) + 1), ws, color="black")
    titles = [
        ("held-out env CE (test seeds, teacher-forced)", "nats / env token"),
        ("held-out success (test seeds, greedy)", "share with reward 1"),
        ("held-out mean reward (test seeds, greedy)", "reward (0.5 = right kind)"),
        ("train env CE (own rollouts, before update)", "nats / env token"),
        ("train mean reward (sampled rollouts)", "reward"),
        ("warm start: SFT on expert actions (train seeds)", "action NLL (nats/token)"),
    ]
    for a, (t, y) in zip(ax.flat, titles):
        a.set_title(t, fontsize=10)
        a.set_ylabel(y, fontsize=9)
        a.set_xlabel("SFT step" if a is ax[1, 2] else "RL step", fontsize=9)
        a.grid(alpha=0.3)
        a.tick_params(labelsize=8)
    for a in (ax[0, 1], ax[0, 2]):
        a.set_ylim(-0.03, 1.03)
    ax[0, 0].legend(
        fontsize=8,
        title="open circle: checkpoint chosen on validation\ndotted: novel lines only (never in training)",
        title_fontsize=7,
    )
    m = report["model"]
    fig.suptitle(
        f"openenv-echo reference demo ({report['config']['mode']}): {m['kind']} Llama {m['parameters'] / 1e6:.1f}M "
        f"params, terminal env over HTTP/WS, policy-sampled rollouts, λ={report['config']['world_model_coeff']:g}, "
        f"wall {report['timings_s']['total']:.0f}s",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
