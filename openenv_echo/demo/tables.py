"""The demo's tables and sentences, rendered from ``report.json``: ``python -m openenv_echo.demo.tables REPORT``.

``summary_markdown`` is ``summary.md`` and the block between ``<!-- demo-tables:begin -->`` and
``<!-- demo-tables:end -->`` of ``examples/echo_world_model/README.md``; ``readme_section`` is the block between
``<!-- demo-readme:begin -->`` and ``<!-- demo-readme:end -->`` of the top-level README (from the terminal run's
report and the sql run's). Tests check that both READMEs agree with their reports, so every number there comes
from a committed report. A sentence claims an effect only where its 95% interval excludes 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- demo-tables:begin -->", "<!-- demo-tables:end -->"
README_BEGIN, README_END = "<!-- demo-readme:begin -->", "<!-- demo-readme:end -->"


def _ci(x: dict[str, Any] | None, fmt: str = ".3f", scale: float = 1.0) -> str:
    """``mean [low, high]`` (``mean`` alone with one seed)."""
    if x is None:
        return "n/a"
    m = format(x["mean"] * scale, fmt)
    if x.get("ci95") is None:
        return m
    lo, hi = (format(v * scale, fmt) for v in x["ci95"])
    return f"{m} [{lo}, {hi}]"


def _int_pct(v: float) -> str:
    return format(round(100 * v) + 0, "d")  # + 0: no "-0"


def _pct(x: dict[str, Any] | None) -> str:
    """``41 % [30, 52]`` (a share as a percentage)."""
    if x is None:
        return "n/a"
    if x.get("ci95") is None:
        return f"{_int_pct(x['mean'])} %"
    lo, hi = x["ci95"]
    return f"{_int_pct(x['mean'])} % [{_int_pct(lo)}, {_int_pct(hi)}]"


def sign(x: dict[str, Any]) -> int:
    """+1 / -1 when the 95% interval lies above / below 0, else 0 (no interval, e.g. one seed: 0)."""
    ci = x.get("ci95")
    if ci is None:
        return 0
    return 1 if ci[0] > 0 else -1 if ci[1] < 0 else 0


def _where(report: dict[str, Any]) -> str:
    b = report["baselines"]
    s = b["start"]
    if s > b["uniform"]:
        return "above the uniform reference"
    if s > b["unigram"]:
        return "between the uniform and unigram references"
    if s > b["bigram"]:
        return "between the unigram and bigram references"
    return "below the bigram reference"


def _start_sentence(report: dict[str, Any]) -> str:
    sc = report["start_checkpoint"]
    b = report["baselines"]
    st = sc["after"]["test"]["policy"]
    n_test = int(st["episodes"])
    gen = sc.get("generic_pretraining")
    how = (
        f"pretrained on {gen['corpus']['chars']:,} characters of Python standard-library docstrings "
        f"({gen['corpus']['tokens']:,} tokens, {gen['steps']} steps; held-out env CE after it "
        f"{gen['after']['test_env_ce']['nats_per_token']:.3f}), then SFT'd on expert actions only "
        f"({sc['sft']['steps']} steps)"
        if gen
        else f"SFT'd on expert actions only ({sc['sft']['steps']} steps)"
    )
    return (
        f"- **Start** (every arm's step 0): {how}. Held-out env CE {b['start']:.3f} nats/token, {_where(report)} "
        f"(uniform {b['uniform']:.3f}, unigram {b['unigram']:.3f}, bigram {b['bigram']:.3f} of the training env "
        f"text); greedy, it solves {round(st['success'] * n_test)} of {n_test} test worlds (mean reward "
        f"{st['mean_reward']:.3f})."
    )


def _comparison_sentences(report: dict[str, Any]) -> list[str]:
    a = report["arms"]
    echo, grpo = a["grpo_echo"]["summary"], a["grpo"]["summary"]
    lam = a["grpo_echo"]["lambda"]
    comp = report["comparisons"]
    diff = comp["echo_minus_grpo"]
    n = len(a["grpo"]["seeds"])
    drop = comp["direct_ce_drop"]
    lines = []
    if drop["established"] and echo.get("gap_closed") is not None:
        lines.append(
            f"- **The gap**: direct CE lowers held-out env CE from the start by {_ci(drop, '.3f')} nats/token in "
            f"{echo['rl_steps']} RL steps ({'one seed, no interval; ' if n == 1 else ''}validation: "
            f"{_ci(comp['direct_ce_drop_validation'], '.3f')}). GRPO + ECHO (λ = {lam:g}, chosen on validation) closes "
            f"{_pct(echo['gap_closed'])} of that gap; GRPO (λ = 0) closes {_pct(grpo['gap_closed'])}."
        )
    else:
        chg = {k: _ci(s["test_env_ce_change"], "+.3f") for k, s in (("g", grpo), ("e", echo))}
        lines.append(
            f"- **No established gap**: direct CE changed held-out env CE from the start by "
            f"{_ci(a['direct_ce']['summary']['test_env_ce_change'], '+.3f')} nats/token, an interval that does not "
            f"lie below 0, so *gap closed* is not defined. Changes from the start: GRPO {chg['g']}, GRPO + ECHO "
            f"(λ = {lam:g}) {chg['e']}."
        )
    d_ce = diff["test_env_ce"]
    one = "one seed: no interval, so no claim"
    verdict = {
        -1: "ECHO's policy predicts held-out env tokens better than GRPO's",
        1: "ECHO's policy predicts held-out env tokens worse than GRPO's",
        0: "no measurable difference in held-out env CE" if n > 1 else one,
    }[sign(d_ce)]
    lines.append(
        f"- **ECHO − GRPO**, paired by seed ({n} seed{'s' if n > 1 else ''}): held-out env CE "
        f"{_ci(d_ce, '+.3f')} nats/token ({verdict}); novel lines only {_ci(diff['test_novel_env_ce'], '+.3f')}."
    )
    d_s, d_r = diff["test_success"], diff["test_mean_reward"]
    policy = (
        one
        if n == 1
        else "no measurable difference in either"
        if sign(d_s) == 0 and sign(d_r) == 0
        else "a difference whose interval excludes 0"
    )
    lines.append(
        f"- **What it costs the policy**: success ECHO − GRPO {_ci(d_s, '+.3f')}, mean reward {_ci(d_r, '+.3f')} "
        f"({policy}); success {echo['test_success']['successes']}/{echo['test_success']['episodes']} (ECHO) vs "
        f"{grpo['test_success']['successes']}/{grpo['test_success']['episodes']} (GRPO) test episodes."
    )
    moves = {
        k: (a[k]["summary"]["test_success_change"], name)
        for k, name in (("grpo", "GRPO"), ("grpo_echo", "GRPO + ECHO"), ("direct_ce", "direct CE"))
    }
    went = {-1: "fell", 1: "rose", 0: "did not measurably change" if n > 1 else "one seed"}
    lines.append(
        "- **Success against the start**: "
        + "; ".join(f"{name} {_ci(c, '+.3f')} ({went[sign(c)]})" for c, name in moves.values())
        + " (final RL step − start on test; intervals over RL seeds, from one evaluation of the start)."
    )
    share = echo.get("gap_closed")
    if share is None or share["mean"] < 0.5:
        sel = report["lambda_selection"]
        chosen = next(r for r in sel["validation"] if r["lambda"] == sel["chosen"])
        costly = [
            format(r["lambda"], "g")
            for r in sel["validation"]
            if r["lambda"] > sel["chosen"]
            and r["env_ce"]["mean"] < chosen["env_ce"]["mean"]
            and r["lambda"] not in sel["qualified"]
        ]
        why = (
            f" Larger λ ({', '.join(costly)}) reached a lower validation env CE but a validation reward below the "
            "rule's bar, so the rule rejected them."
            if costly
            else ""
        )
        lines.append(
            f"- **ECHO does not close half of the gap** ({_pct(share)}). Tried: λ ∈ "
            f"{{{', '.join(format(x, 'g') for x in sel['values'])}}} on validation, {echo['rl_steps']} RL steps of "
            f"{report['config']['rl_prompts']} × {report['config']['rl_group']} episodes; every choice made on "
            f"validation only.{why}"
        )
    return lines


def headline(report: dict[str, Any]) -> str:
    """The claims in words (each with its interval; nothing the data do not give)."""
    a = report["arms"]
    grpo, echo = a["grpo"]["summary"], a["grpo_echo"]["summary"]
    lines = [
        _start_sentence(report),
        f"- **RL updates**: GRPO had a group with reward variance on {_ci(grpo['steps_with_reward_variance'], '.1f')}"
        f" of {grpo['rl_steps']} steps per seed (GRPO + ECHO: {_ci(echo['steps_with_reward_variance'], '.1f')}); a "
        "step without any is a step GRPO skips and the report counts.",
        *_comparison_sentences(report),
    ]
    return "\n".join(lines)


def references_table(report: dict[str, Any]) -> str:
    b = report["baselines"]
    d = report["data"]["env_ce_sets"]["test"]
    start = report["start_checkpoint"]["after"]["test"]
    ce = start["env_ce"]
    lines = [
        f"Held-out env CE in nats/token on the same {d['env_tokens']:,} env_output tokens of {d['episodes']} test "
        f"worlds (*all*: with their {d['warning_tokens']:,} warning tokens; *novel*: env_output tokens on lines never "
        "seen in training), mean [95% interval] over RL seeds; *gap closed*: share of the start → direct-CE drop.",
        "",
        "| model | env CE | all env | warning | novel lines | gap closed | success [binomial 95%] | mean reward | "
        "steps with reward variance |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| uniform over the vocabulary (ln {report['model']['vocab_size']}) | {b['uniform']:.3f} | | | | | | | |",
        f"| unigram of training env text | {b['unigram']:.3f} | | | | | | | |",
        f"| bigram of training env text | {b['bigram']:.3f} | | | | | | | |",
        f"| start checkpoint (every arm's step 0) | {ce['nats_per_token']:.3f} | {ce['all_nats_per_token']:.3f} | "
        f"{ce['warning_nats_per_token']:.3f} | {ce['novel_nats_per_token']:.3f} | 0 % | "
        f"{start['policy']['success']:.3f} | {start['policy']['mean_reward']:.3f} | |",
    ]
    for arm in ("grpo", "grpo_echo", "direct_ce"):
        a = report["arms"][arm]
        s = a["summary"]
        label = a["label"] + (f" (λ = {a['lambda']:g})" if arm == "grpo_echo" else "")
        succ = s["test_success"]
        lo, hi = succ["binomial_ci95"]
        lines.append(
            f"| {label} | {_ci(s['test_env_ce'])} | {_ci(s['test_all_env_ce'])} | {_ci(s['test_warning_env_ce'])} | "
            f"{_ci(s['test_novel_env_ce'])} | {_pct(s.get('gap_closed'))} | {succ['mean']:.3f} "
            f"({succ['successes']}/{succ['episodes']}, [{lo:.3f}, {hi:.3f}]) | {_ci(s['test_mean_reward'])} | "
            f"{_ci(s['steps_with_reward_variance'], '.1f')} / {s['rl_steps']} |"
        )
    lines += [
        "",
        "Change from the start (final RL step − start, test), mean [95% interval] over RL seeds:",
        "",
        "| arm | env CE | all env | warning | novel lines | success | mean reward |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in ("grpo", "grpo_echo", "direct_ce"):
        a = report["arms"][arm]
        s = a["summary"]
        lines.append(
            f"| {a['label']} | {_ci(s['test_env_ce_change'], '+.3f')} | {_ci(s['test_all_env_ce_change'], '+.3f')} | "
            f"{_ci(s['test_warning_env_ce_change'], '+.3f')} | {_ci(s['test_novel_env_ce_change'], '+.3f')} | "
            f"{_ci(s['test_success_change'], '+.3f')} | {_ci(s['test_mean_reward_change'], '+.3f')} |"
        )
    return "\n".join(lines)


def lambda_table(report: dict[str, Any]) -> str:
    sel = report["lambda_selection"]
    larger = [format(x, "g") for x in sel["values"] if x > sel["chosen"]]
    edge = (
        f"swept and rejected above it: λ = {', '.join(larger)}"
        if larger
        else "the largest value swept: a larger λ was not tried"
    )
    lines = [
        f"λ sweep of GRPO + ECHO on the **validation** split ({len(report['seeds']['validation'])} worlds, final "
        f"step, RL seed(s) {sel['seeds']}; mean [95% interval] when more than one). Rule: {sel['rule']}. Chosen: "
        f"**λ = {sel['chosen']:g}** ({edge}).",
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


def timing_line(report: dict[str, Any]) -> str:
    t = report["timings_s"]
    load = report.get("load_average")
    under = (
        f", load average {load['start'][0]:.1f} at the start, {load['mean_1min_at_laps']:.1f} mean and "
        f"{load['max_1min_at_laps']:.1f} max (1-minute figure, sampled per phase) on {load['cores']} cores"
        if load
        else ""
    )
    return f"`{report['command']}`: wall time {t['total']:.0f} s ({t['total'] / 60:.1f} min){under}."


def summary_markdown(report: dict[str, Any]) -> str:
    """Every demo table of the example's README, from a report."""
    parts = []
    if report.get("note"):
        parts.append(f"**{report['note']}**")
    st = report.get("status", {})
    if not st.get("complete", True):
        parts.append(
            f"**Partial run: RL seeds {st['rl_seeds_done']} of {st['rl_seeds_planned']} finished** (rerun the same "
            "command to resume from its checkpoints)."
        )
    parts += [headline(report), references_table(report), lambda_table(report), timing_line(report)]
    return "\n\n".join(parts) + "\n"


def default_run_line(first_seed: dict[str, Any]) -> str:
    """The default one-seed run's wall time, from the report a multi-seed run wrote after its first RL seed (every
    arm, the sweep and the references: exactly what ``openenv-echo demo`` runs)."""
    if first_seed["status"]["rl_seeds_done"] != first_seed["seeds"]["rl"][:1]:
        raise ValueError("not the report written after the first RL seed")
    t = first_seed["timings_s"]["total"]
    load = first_seed["load_average"]
    return (
        f"The default `openenv-echo demo` (one seed, every arm, the λ sweep and the references) is that run's first "
        f"seed: {t:.0f} s ({t / 60:.1f} min), load average {load['start'][0]:.1f} at the start, "
        f"{load['mean_1min_at_laps']:.1f} mean and {load['max_1min_at_laps']:.1f} max on {load['cores']} cores."
    )


def readme_section(report: dict[str, Any], sql: dict[str, Any], first_seed: dict[str, Any]) -> str:
    """The top-level README's short demo block: the terminal run's claims, its one-seed wall time, and one line for
    the sql run."""
    a = report["arms"]
    n = len(a["grpo"]["seeds"])
    t = report["timings_s"]["total"]
    lines = [
        f"In the recorded run (`{report['command']}`, {n} RL seeds, {t / 60:.1f} min on the shared 2-core machine):",
        "",
        _start_sentence(report),
        *_comparison_sentences(report),
        f"- **Wall time**: {default_run_line(first_seed)}",
    ]
    s = sql["arms"]
    ce = {k: s[k]["summary"]["test_env_ce"]["mean"] for k in ("grpo", "grpo_echo", "direct_ce")}
    succ = {k: s[k]["summary"]["test_success"] for k in ("grpo", "grpo_echo")}
    lines.append(
        f"- **sql env**, one seed (`{sql['command']}`, {sql['timings_s']['total'] / 60:.1f} min): held-out env CE "
        f"start {sql['baselines']['start']:.3f}, GRPO {ce['grpo']:.3f}, GRPO + ECHO (λ = {s['grpo_echo']['lambda']:g}) "
        f"{ce['grpo_echo']:.3f}, direct CE {ce['direct_ce']:.3f} nats/token; success "
        f"{succ['grpo']['successes']}/{succ['grpo']['episodes']} (GRPO), "
        f"{succ['grpo_echo']['successes']}/{succ['grpo_echo']['episodes']} (ECHO). One seed: no intervals, so no claim."
    )
    return "\n".join(lines)


def block(text: str, begin: str = BEGIN, end: str = END) -> str:
    """The text between a README's markers (stripped)."""
    if begin not in text or end not in text:
        raise ValueError(f"README has no {begin} ... {end} block")
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def readme_block(readme: str) -> str:
    """The example README's tables block (stripped)."""
    return block(readme)


USAGE = "usage: python -m openenv_echo.demo.tables REPORT.json [--readme SQL_REPORT.json FIRST_SEED_REPORT.json]"


def main(argv: list[str] | None = None) -> None:
    """``python -m openenv_echo.demo.tables REPORT.json`` prints the example's tables; with ``--readme SQL.json
    FIRST_SEED.json`` after it, the top-level README's block."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 1:
        sys.stdout.write(summary_markdown(json.loads(Path(args[0]).read_text())))
    elif len(args) == 4 and args[1] == "--readme":
        report, sql, first = (json.loads(Path(p).read_text()) for p in (args[0], args[2], args[3]))
        sys.stdout.write(readme_section(report, sql, first) + "\n")
    else:
        raise SystemExit(USAGE)


if __name__ == "__main__":
    main()
