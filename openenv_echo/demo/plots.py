"""The demo's figure: held-out curves of the three arms against the references, the λ sweep on validation, direct
CE's flattening, the final held-out success, and the start checkpoint's training (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import ARM_LABELS, SFT_BAND
from .tables import echo_settings

COLORS = {"grpo": "#7f7f7f", "grpo_echo": "#d62728", "direct_ce": "#1f77b4"}
REF_STYLE = {"uniform": "-", "unigram": ":", "bigram": "-.", "trigram": (0, (3, 1, 1, 1, 1, 1)), "fourgram": "--"}
REF_COLOR = {"uniform": "#bbbbbb", "unigram": "black", "bigram": "black", "trigram": "#555555", "fourgram": "#555555"}


def _band(ax: Any, rows: list[dict[str, Any]], key: str, color: str | None, label: str) -> None:
    """Point line and 95% band (``[point, low, high]`` per row that has ``key``)."""
    rows = [r for r in rows if key in r]
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r[key][0] for r in rows], marker="o", color=color, label=label)
    ax.fill_between(steps, [r[key][1] for r in rows], [r[key][2] for r in rows], color=color, alpha=0.18, lw=0)


def plot_report(report: dict[str, Any], path: Path, dpi: int = 110) -> Path:
    """2x3 panels. Top: held-out (test) env CE and success per RL step (bootstrap 95% bands over worlds × seeds;
    references and the start as lines), the λ sweep on validation. Bottom: validation env CE per RL step (the λ
    sweep's means and direct CE: is it flat?), final held-out success per arm with the start, the start
    checkpoint's two training phases."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(15, 8))
    arms: dict[str, Any] = report["arms"]
    b = report["baselines"]
    start = report["comparisons"]["start"]
    for arm, data in arms.items():
        label = ARM_LABELS.get(arm, arm) + (f" (λ = {data['lambda']:g})" if arm == "grpo_echo" else "")
        _band(ax[0, 0], data["curve"], "env_ce", COLORS.get(arm), label)
        _band(ax[0, 1], data["curve"], "success", COLORS.get(arm), label)
    for name in REF_STYLE:
        ax[0, 0].axhline(b[name], color=REF_COLOR[name], ls=REF_STYLE[name], lw=1, label=f"{name} {b[name]:.2f}")
    ax[0, 0].axhline(start["env_ce"][0], color="green", ls="--", lw=1, label=f"start {start['env_ce'][0]:.2f}")
    ax[0, 1].axhline(start["success"][0], color="green", ls="--", lw=1, label="start")
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
        [x["mean"] for x in succ_val],
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

    for r in sel["validation"]:
        lam = r["lambda"]
        color = COLORS["grpo"] if lam == 0 else COLORS["grpo_echo"]
        alpha = 1.0 if lam in (0, sel["chosen"]) else 0.35
        ax[1, 0].plot(
            [p["step"] for p in r["curve"]],
            [p["env_ce"] for p in r["curve"]],
            marker=".",
            color=color,
            alpha=alpha,
            label=f"λ = {lam:g}",
        )
    flat = report["comparisons"]["direct_ce_flattening"]
    ax[1, 0].plot(
        [p["step"] for p in flat["validation_curve"]],
        [p["env_ce"] for p in flat["validation_curve"]],
        marker="o",
        color=COLORS["direct_ce"],
        label=f"direct CE ({'flat' if flat['flattened'] else 'not flat'})",
    )
    ax[1, 0].axhline(report["baselines"]["validation"]["fourgram"], color="#555555", ls="--", lw=1, label="4-gram")
    ax[1, 0].legend(fontsize=7, ncol=2)
    names = list(arms)
    succ = [arms[a]["summary"]["success"] for a in names]
    ax[1, 1].errorbar(
        range(len(names)),
        [x[0] for x in succ],
        yerr=[[x[0] - x[1] for x in succ], [x[2] - x[0] for x in succ]],
        fmt="o",
        capsize=4,
        color="black",
    )
    ax[1, 1].axhspan(start["success"][1], start["success"][2], color="green", alpha=0.15, label="start (95 %)")
    ax[1, 1].axhline(start["success"][0], color="green", ls="--", lw=1)
    ax[1, 1].set_xticks(range(len(names)), [ARM_LABELS.get(a, a) for a in names], fontsize=8)
    ax[1, 1].set_ylim(-0.03, 1.03)
    ax[1, 1].legend(fontsize=7)
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
    rec = ": recorded run's" if "recorded" in sel else ""
    titles = [
        ("held-out env CE per RL step (test; 95% band)", "nats / env_output token", "RL step"),
        ("held-out success per RL step (test, greedy; 95% band)", "share with reward 1", "RL step"),
        (f"λ sweep of GRPO + ECHO (validation, final step){rec}", "nats / env_output token", "λ (shaded: chosen)"),
        (f"validation env CE per RL step (sweep means{rec}, direct CE)", "nats / env_output token", "RL step"),
        ("held-out success, final step (95%; green: start)", "share with reward 1", ""),
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
        f"{len(arms['grpo']['seeds'])} RL seed(s), λ = {sel['chosen']:g} chosen on validation"
        + (f"\nGRPO + ECHO: {own}" if (own := echo_settings(report["config"])) else ""),
        fontsize=10,
    )
    return _save(fig, path, dpi)


def _err(xs: list[dict[str, Any]]) -> list[list[float]] | None:
    """Asymmetric error bars from ``ci95`` (none with a single seed)."""
    if any(x.get("ci95") is None for x in xs):
        return None
    return [[x["mean"] - x["ci95"][0] for x in xs], [x["ci95"][1] - x["mean"] for x in xs]]


def _save_single(fig: Any, ax: Any, path: Path, dpi: int) -> Path:
    """Grid, legend and a deterministic PNG (no software stamp) of a one-panel figure; the figure is closed."""
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return _save(fig, path, dpi)


def _save(fig: Any, path: Path, dpi: int, rect: tuple[float, float, float, float] = (0, 0, 1, 1)) -> Path:
    """A deterministic PNG (no software stamp) of the figure laid out within ``rect``; the figure is closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=rect)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, metadata={"Software": None})
    plt.close(fig)
    return path


def plot_tradeoff(tradeoff: dict[str, Any], env: str, path: Path, dpi: int = 110) -> Path:
    """What each GRPO + ECHO setting bought and paid on validation (``tables.tradeoff_points``): its share of the gap
    to direct CE against its greedy success, with the issue's target region (half the gap or more, success within
    0.05 of GRPO's) shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6.5))
    grpo, margin = tradeoff["grpo_success"], tradeoff["grpo_success"] - 0.05
    ax.axhline(grpo, color=COLORS["grpo"], lw=1.5, label=f"GRPO {grpo:.3f}")
    ax.axhline(margin, color=COLORS["grpo"], ls="--", lw=1, label="GRPO − 0.05 (the cost margin)")
    ax.axhline(tradeoff["start_success"], color="green", ls=":", lw=1, label=f"start {tradeoff['start_success']:.3f}")
    ax.axvline(0.5, color="black", ls="--", lw=1, label="half the gap")
    ax.fill_between([0.5, 1.0], margin, 1.0, color="#2ca02c", alpha=0.12, label="the target")
    for p in tradeoff["points"]:
        lam = p["kind"] == "λ"
        ax.plot(
            p["share"], p["success"], marker="o" if lam else "s", ls="", color=COLORS["grpo_echo"] if lam else "#ff7f0e"
        )
        ax.annotate(p["label"], (p["share"], p["success"]), fontsize=7, xytext=(5, -3), textcoords="offset points")
    shares = [p["share"] for p in tradeoff["points"]]
    ax.set_xlim(min([0.0, *shares]) - 0.05, max([1.0, *shares]) + 0.02)
    succ = [p["success"] for p in tradeoff["points"]] + [grpo, tradeoff["start_success"]]
    ax.set_ylim(max(min(succ) - 0.08, -0.02), min(max(succ) + 0.08, 1.02))
    ax.set_xlabel("share of the validation gap from the start to direct CE (world model)", fontsize=9)
    ax.set_ylabel("greedy validation success, mean of the sweep seeds (policy)", fontsize=9)
    ax.set_title(
        f"GRPO + ECHO on {env}: what the world term buys and what it costs\n(validation, final RL step; circles: λ on "
        "one AdamW; squares: probes, lr the world term's own AdamW rate (tensorwise: Adam with\none second moment "
        "per tensor; seq. mean: the paper's per-rollout normalization; PCGrad: gradient surgery against the policy "
        "term;\nvaried groups: the world term only where a group's rewards differ; first n steps: only on the first "
        "n RL steps), β its\naction-KL anchor, to the start or moving with the policy term)",
        fontsize=9,
    )
    return _save_single(fig, ax, path, dpi)


def plot_start_probes(
    probes: dict[str, dict[str, Any]], recorded: dict[str, Any] | None, env: str, path: Path, dpi: int = 110
) -> Path:
    """Each start probe's SFT checkpoints: greedy validation success against SFT step, with ``SFT_BAND`` shaded
    and the recorded start's checkpoints (its report's ``start_checkpoint.sft``) dashed; the chosen step circled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    lo, hi = SFT_BAND
    ax.axhspan(
        lo, hi, color="#2ca02c", alpha=0.12, label=f"the start's band ({100 * lo:.0f}–{100 * hi:.0f} %, SFT_BAND)"
    )
    rows = [(name, p["sft_checkpoints"], p["chosen_step"], "-") for name, p in probes.items()]
    if recorded is not None:
        ck = [{"step": c["step"], "val_success": c["val_policy"]["success"]} for c in recorded["sft"]["checkpoints"]]
        rows.insert(0, ("the recording's start", ck, recorded["sft"]["chosen_step"], "--"))
    if len(rows) > 10:  # past the default cycle's ten colours, two lines would share one
        ax.set_prop_cycle(color=[plt.get_cmap("tab20")(i) for i in range(20)])
    for name, ck, chosen, ls in rows:
        (line,) = ax.plot([c["step"] for c in ck], [c["val_success"] for c in ck], marker=".", ls=ls, label=name)
        pick = next(c for c in ck if c["step"] == chosen)
        ax.plot(chosen, pick["val_success"], marker="o", ms=11, mfc="none", color=line.get_color())
    ax.set_ylim(-0.02, max(0.65, *(c["val_success"] + 0.05 for _, ck, _, _ in rows for c in ck)))
    ax.set_xlabel("SFT step", fontsize=9)
    ax.set_ylabel("greedy success on the 64 validation worlds", fontsize=9)
    ax.set_title(
        f"{env}: the start's SFT checkpoints under each start probe (circled: the checkpoint SFT_RULE chose)",
        fontsize=9,
    )
    return _save_single(fig, ax, path, dpi)


def plot_held_out(points: list[dict[str, Any]], path: Path, dpi: int = 110) -> Path:
    """Every GRPO + ECHO setting evaluated on test (``tables.held_out_points``: a whole-split look as a star, on its
    unseen worlds), one panel per env: its share of the held-out gap to direct CE against ECHO − GRPO success, each
    with its 95 % interval. The target region is shaded:
    a setting meets both halves of the answer when its share is at least half and its whole success bar lies above
    −0.05."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    envs = list(dict.fromkeys(p["env"] for p in points))
    terms = list(dict.fromkeys(p["world_term"] for p in points))
    color = {t: plt.get_cmap("tab10")(1 + 2 * i) for i, t in enumerate(terms)}
    fig, axes = plt.subplots(1, len(envs), figsize=(6.5 * len(envs), 6.2), squeeze=False, sharey=True)
    shares = [v for p in points for v in p["gap_closed"]]
    costs = [v for p in points for v in p["echo_minus_grpo"]]
    xlim = (min(0.0, *shares) - 0.03, max(0.75, *shares) + 0.03)
    ylim = (min(-0.1, *costs) - 0.02, max(0.05, *costs) + 0.02)
    for ax, env in zip(axes[0], envs, strict=True):
        ax.fill_between([0.5, xlim[1]], -0.05, ylim[1], color="#2ca02c", alpha=0.12)
        ax.axvline(0.5, color="black", ls="--", lw=1)
        ax.axhline(-0.05, color=COLORS["grpo"], ls="--", lw=1)
        ax.axhline(0.0, color=COLORS["grpo"], lw=1)
        for p in (p for p in points if p["env"] == env):
            x, y = p["gap_closed"], p["echo_minus_grpo"]
            look = p["look"]
            ax.errorbar(
                x[0],
                y[0],
                xerr=[[x[0] - x[1]], [x[2] - x[0]]],
                yerr=[[y[0] - y[1]], [y[2] - y[0]]],
                marker="*" if look else "o" if p["chosen"] else "D",
                ms=12 if look else 7,
                capsize=3,
                ls="",
                color=color[p["world_term"]],
            )
            name = f"λ = {p['lambda']:g}" + (f", {look['rl_steps']} steps" if look else "")
            ax.annotate(name, (x[0], y[0]), fontsize=8, xytext=(6, 4), textcoords="offset points")
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        ax.set_title(env, fontsize=10)
        ax.set_xlabel("share of the held-out gap from the start to direct CE (world model)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("ECHO − GRPO held-out success (policy cost)", fontsize=9)
    handles = [
        Patch(color="#2ca02c", alpha=0.12, label="the target region"),
        Line2D([], [], color="black", ls="--", lw=1, label="half the gap"),
        Line2D([], [], color=COLORS["grpo"], ls="--", lw=1, label="−0.05, the policy-cost margin"),
        Line2D([], [], color=COLORS["grpo"], lw=1, label="GRPO's own success"),
        Line2D([], [], color="black", marker="o", ls="", label="λ chosen by the rule on validation"),
        Line2D([], [], color="black", marker="D", ls="", label="a second look, planned before its run"),
        Line2D([], [], color="black", marker="*", ms=10, ls="", label="a whole-split look, on its unseen test worlds"),
        *(Line2D([], [], color=c, marker="s", ls="", label=t) for t, c in color.items()),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
    sizes = " or ".join(sorted({f"{p['test_worlds']} worlds × {p['rl_seeds']} RL seeds" for p in points}))
    fig.suptitle(
        f"GRPO + ECHO on held-out worlds: every setting run on test ({sizes}), paired by world and seed with its "
        "recording's or look's own GRPO,\n95 % bootstrap intervals. Both halves of the answer are met where a point "
        "lies right of half the gap and its whole success bar above −0.05.",
        fontsize=9,
    )
    return _save(fig, path, dpi, rect=(0, 0.2, 1, 1))
