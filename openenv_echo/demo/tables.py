"""The README's demo tables, rendered from a ``report.json``: ``python -m openenv_echo.demo.tables REPORT``.

The README pastes this output between ``<!-- demo-tables:begin -->`` and ``<!-- demo-tables:end -->``; a test checks
that the two agree, so every number in that section comes from the committed report.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- demo-tables:begin -->", "<!-- demo-tables:end -->"


def _ci(x: dict[str, Any] | None, fmt: str = ".3f", scale: float = 1.0) -> str:
    """``mean [low, high]`` (``mean`` alone with one seed)."""
    if x is None:
        return "n/a"
    m = format(x["mean"] * scale, fmt)
    if x.get("ci95") is None:
        return m
    lo, hi = (format(v * scale, fmt) for v in x["ci95"])
    return f"{m} [{lo}, {hi}]"


def _pct(x: dict[str, Any] | None) -> str:
    """``41 % [30, 52]`` (a share as a percentage)."""
    if x is None:
        return "n/a"
    if x.get("ci95") is None:
        return f"{100 * x['mean']:.0f} %"
    lo, hi = x["ci95"]
    return f"{100 * x['mean']:.0f} % [{100 * lo:.0f}, {100 * hi:.0f}]"


def headline(report: dict[str, Any]) -> str:
    """The claims in words, against the references (each with its interval; nothing the data do not give)."""
    a = report["arms"]
    echo, grpo, direct = (a[k]["summary"] for k in ("grpo_echo", "grpo", "direct_ce"))
    comp = report["comparisons"]
    diff = comp["echo_minus_grpo"]
    n = len(a["grpo"]["seeds"])
    b = report["baselines"]
    st = report["warm_start"]["after"]["test"]["policy"]
    lam = a["grpo_echo"]["lambda"]
    n_test = int(st["episodes"])
    where = (
        "below the bigram reference"
        if b["start"] < b["bigram"]
        else "between the unigram and bigram references"
        if b["start"] < b["unigram"]
        else "above the unigram reference"
    )
    lines = [
        f"- The start checkpoint (every arm's step 0) scores {b['start']:.3f} nats/token on the held-out env tokens, "
        f"{where} (uniform {b['uniform']:.3f}, unigram {b['unigram']:.3f}, bigram {b['bigram']:.3f}); greedy, it "
        f"solves {round(st['success'] * n_test)} of {n_test} test machines (mean reward {st['mean_reward']:.3f}).",
        f"- RL updates: GRPO had a group with reward variance on {_ci(grpo['steps_with_reward_variance'], '.1f')} of "
        f"{grpo['rl_steps']} steps per seed (GRPO + ECHO: {_ci(echo['steps_with_reward_variance'], '.1f')}).",
    ]
    drop = comp.get("direct_ce_drop")
    chg = {k: _ci(s["test_env_ce_change"], "+.3f") for k, s in (("g", grpo), ("e", echo), ("d", direct))}
    if drop is not None and drop["established"] and echo.get("gap_closed") is not None:
        lines.append(
            f"- Direct CE lowers held-out env CE from the start by {_ci(drop, '.3f')} nats/token"
            f"{' (one seed: no interval, so no certainty either)' if drop.get('ci95') is None else ''}. GRPO + ECHO "
            f"(λ = {lam:g}, chosen on validation) closes {_pct(echo['gap_closed'])} of that gap; GRPO (λ = 0) closes "
            f"{_pct(grpo['gap_closed'])}."
        )
    else:
        lines.append(
            f"- Direct CE did not measurably lower held-out env CE from the start (change {chg['d']} nats/token; the "
            f"interval does not lie below 0), so there is no established start → direct-CE gap and *gap closed* is "
            f"not defined. Changes from the start: GRPO {chg['g']}, GRPO + ECHO (λ = {lam:g}) {chg['e']}."
        )
    lines.append(
        f"- ECHO − GRPO, paired by seed ({n} seed{'s' if n > 1 else ''}): held-out env CE "
        f"{_ci(diff['test_env_ce'], '+.3f')} nats/token, success {_ci(diff['test_success'], '+.3f')}, mean reward "
        f"{_ci(diff['test_mean_reward'], '+.3f')}."
    )
    return "\n".join(lines)


def references_table(report: dict[str, Any]) -> str:
    b = report["baselines"]
    d = report["data"]["env_ce_sets"]["test"]
    start = report["warm_start"]["after"]["test"]
    lines = [
        f"Held-out env CE in nats/token on the same {d['env_tokens']:,} env tokens of {d['episodes']} test machines "
        "(mean [95% interval] over RL seeds); *gap closed*: share of the start → direct-CE drop.",
        "",
        "| model | env CE | novel lines only | gap closed | success [binomial 95%] | mean reward | non-zero-gradient "
        "steps | steps with reward variance |",
        "|---|---|---|---|---|---|---|---|",
        f"| uniform over the vocabulary (ln {report['model']['vocab_size']}) | {b['uniform']:.3f} | | | | | | |",
        f"| unigram of training env text | {b['unigram']:.3f} | | | | | | |",
        f"| bigram of training env text | {b['bigram']:.3f} | | | | | | |",
        f"| start checkpoint (every arm's step 0) | {b['start']:.3f} | {start['env_ce']['novel_nats_per_token']:.3f} | "
        f"0 % | {start['policy']['success']:.3f} | {start['policy']['mean_reward']:.3f} | | |",
    ]
    for arm in ("grpo", "grpo_echo", "direct_ce"):
        a = report["arms"][arm]
        s = a["summary"]
        label = a["label"] + (f" (λ = {a['lambda']:g})" if arm == "grpo_echo" else "")
        succ = s["test_success"]
        lo, hi = succ["binomial_ci95"]
        lines.append(
            f"| {label} | {_ci(s['test_env_ce'])} | {_ci(s['test_novel_env_ce'])} | {_pct(s.get('gap_closed'))} | "
            f"{_ci(succ)} ({succ['successes']}/{succ['episodes']}, [{lo:.3f}, {hi:.3f}]) | "
            f"{_ci(s['test_mean_reward'])} | {_ci(s['nonzero_gradient_steps'], '.1f')} / {s['rl_steps']} | "
            f"{_ci(s['steps_with_reward_variance'], '.1f')} / {s['rl_steps']} |"
        )
    return "\n".join(lines)


def lambda_table(report: dict[str, Any]) -> str:
    sel = report["lambda_selection"]
    lines = [
        f"λ sweep of GRPO + ECHO on the **validation** split ({len(report['seeds']['validation'])} machine(s), final "
        f"step, RL seed(s) {sel['seeds']}; mean [95% interval] when more than one). Rule: {sel['rule']}. Chosen: "
        f"**λ = {sel['chosen']:g}**.",
        "",
        "| λ | validation env CE | validation success | validation mean reward | steps with reward variance |",
        "|---|---|---|---|---|",
    ]
    for r in sel["validation"]:
        mark = " ←" if r["lambda"] == sel["chosen"] else ""
        lines.append(
            f"| {r['lambda']:g}{mark} | {_ci(r['env_ce'])} | {_ci(r['success'])} | {_ci(r['mean_reward'])} | "
            f"{_ci(r['policy_updates'], '.1f')} |"
        )
    return "\n".join(lines)


def summary_markdown(report: dict[str, Any]) -> str:
    """Every demo table of the README, from a report."""
    t = report["timings_s"]
    parts = []
    if report.get("note"):
        parts.append(f"**{report['note']}**")
    st = report.get("status", {})
    if not st.get("complete", True):
        parts.append(
            f"**Partial run: RL seeds {st['rl_seeds_done']} of {st['rl_seeds_planned']} finished** (rerun the same "
            "command to resume from its checkpoints)."
        )
    parts += [
        headline(report),
        references_table(report),
        lambda_table(report),
        f"`{report['command']}`: wall time {t['total']:.0f} s ({t['total'] / 60:.1f} min).",
    ]
    return "\n\n".join(parts) + "\n"


def readme_block(readme: str) -> str:
    """The text between the README's markers (stripped)."""
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"README has no {BEGIN} ... {END} block")
    return readme.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m openenv_echo.demo.tables REPORT.json")
    sys.stdout.write(summary_markdown(json.loads(Path(args[0]).read_text())))


if __name__ == "__main__":
    main()
