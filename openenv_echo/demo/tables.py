"""The demo's tables and sentences, rendered from ``report.json``: ``python -m openenv_echo.demo.tables REPORT``.

``summary_markdown`` is ``summary.md`` and the block between ``<!-- demo-tables:begin -->`` and
``<!-- demo-tables:end -->`` of ``examples/echo_world_model/README.md``; ``readme_section`` is the block between
``<!-- demo-readme:begin -->`` and ``<!-- demo-readme:end -->`` of the top-level README (from the terminal run's
report, its one-seed report and the sql run's); ``probes_table`` is an env's RL probes block (from its run's
``rl-probes.json``, between ``probes_markers(env)``). ``python -m openenv_echo.demo.render`` writes all of them;
tests check that the committed files are exactly its output. A sentence claims an effect only where its 95% interval excludes 0.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from statistics import mean
from typing import Any

from .config import SFT_BAND
from .ngram import REFERENCES
from .stats import gap_closed
from .summarize import SUCCESS_MARGIN, kinds_of_val_worlds

BEGIN, END = "<!-- demo-tables:begin -->", "<!-- demo-tables:end -->"
README_BEGIN, README_END = "<!-- demo-readme:begin -->", "<!-- demo-readme:end -->"
SQL_BEGIN, SQL_END = "<!-- demo-tables-sql:begin -->", "<!-- demo-tables-sql:end -->"
ANCHORED_BEGIN, ANCHORED_END = "<!-- demo-tables-anchored:begin -->", "<!-- demo-tables-anchored:end -->"
HELD_OUT_BEGIN, HELD_OUT_END = "<!-- held-out-tradeoff:begin -->", "<!-- held-out-tradeoff:end -->"
DESIGN_BEGIN, DESIGN_END = "<!-- held-out-design:begin -->", "<!-- held-out-design:end -->"
GRPO_DESIGN_BEGIN, GRPO_DESIGN_END = "<!-- held-out-design-grpo:begin -->", "<!-- held-out-design-grpo:end -->"


def probes_markers(env: str) -> tuple[str, str]:
    """The example README's markers around an env's RL probes table."""
    return f"<!-- rl-probes-{env}:begin -->", f"<!-- rl-probes-{env}:end -->"


def start_probes_markers(env: str) -> tuple[str, str]:
    """The example README's markers around an env's start probes table."""
    return f"<!-- start-probes-{env}:begin -->", f"<!-- start-probes-{env}:end -->"


def second_lambda_markers(env: str) -> tuple[str, str]:
    """The example README's markers around an env's second-λ table."""
    return f"<!-- second-lambda-{env}:begin -->", f"<!-- second-lambda-{env}:end -->"


def whole_split_markers(env: str) -> tuple[str, str]:
    """The example README's markers around a recording's whole-split table."""
    return f"<!-- whole-split-{env}:begin -->", f"<!-- whole-split-{env}:end -->"


def start_rl_probes_markers(env: str) -> tuple[str, str]:
    """The example README's markers around an env's tables of RL probes from its start probes."""
    return f"<!-- start-rl-probes-{env}:begin -->", f"<!-- start-rl-probes-{env}:end -->"


ARM_ORDER = ("grpo", "grpo_echo", "direct_ce")


def _iv(x: list[float] | None, fmt: str = ".3f") -> str:
    """``point [low, high]`` of a ``[point, low, high]`` triple."""
    if x is None:
        return "n/a"
    p, lo, hi = (format(v + 0.0, fmt) for v in x)
    return f"{p} [{lo}, {hi}]"


def _pct(x: list[float] | None) -> str:
    if x is None:
        return "n/a"
    p, lo, hi = (format(round(100 * v) + 0, "d") for v in x)
    return f"{p} % [{lo}, {hi}]"


def sign(x: list[float]) -> int:
    """+1 / -1 when the interval lies above / below 0, else 0."""
    return 1 if x[1] > 0 else -1 if x[2] < 0 else 0


def echo_settings(config: dict[str, Any]) -> str:
    """GRPO + ECHO's own settings where they are not the defaults, in words ("" for one AdamW and no anchor)."""
    parts = []
    if config.get("echo_world_lr") is not None:
        how = (
            "Adam with one second moment per tensor"
            if config.get("echo_world_optimizer") == "adam_tensorwise"
            else "AdamW"
        )
        parts.append(f"world term on its own {how} at {config['echo_world_lr']:g}")
    if config.get("echo_normalization", "token_mean") != "token_mean":
        parts.append("world term normalised per rollout (the paper's sequence mean)")
    if config.get("echo_world_surgery"):
        parts.append("PCGrad against the policy term")
    if config.get("echo_world_varied_only"):
        parts.append("world term only where a group's rewards differ")
    if config.get("echo_world_steps") is not None:
        parts.append(f"world term on the first {config['echo_world_steps']} RL steps only")
    if config.get("echo_action_kl") is not None:
        to = "moving with the policy term" if config.get("echo_anchor") == "policy_term" else "to the start"
        parts.append(f"action-KL anchor β = {config['echo_action_kl']:g} {to}")
    return ", ".join(parts)


def _label(report: dict[str, Any], arm: str) -> str:
    a = report["arms"][arm]
    if arm != "grpo_echo":
        return str(a["label"])
    own = echo_settings(report["config"])
    return f"{a['label']} (λ = {a['lambda']:g}{'; ' + own if own else ''})"


def _across_seeds(report: dict[str, Any]) -> str:
    n = len(report["status"]["rl_seeds_done"])
    return f"{n} RL seeds" if n > 1 else "one RL seed (so world sampling only: no seed variance)"


def _seeds_phrase(report: dict[str, Any]) -> str:
    return f"{report['data']['env_ce_sets']['test']['episodes']} test worlds × {_across_seeds(report)}"


def _where(report: dict[str, Any]) -> str:
    b = report["baselines"]
    above = [k for k in REFERENCES if b["start"] > b[k]]
    return f"above the {above[0]} reference" if above else "below every n-gram reference"


def start_sentence(report: dict[str, Any]) -> str:
    sc = report["start_checkpoint"]
    b = report["baselines"]
    c = report["comparisons"]["start"]
    gen = sc.get("generic_pretraining")
    sft = sc["sft"]
    replay = sft.get("generic_replay_chunks_per_step", 0)
    how = (
        f"pretrained on {gen['corpus']['chars']:,} characters of Python standard-library docstrings "
        f"({gen['steps']} steps; held-out env CE after it {gen['after']['test_env_ce']['nats_per_token']:.3f}), then "
        if gen
        else ""
    ) + (
        f"SFT'd with the expert's action tokens as the only targets ({sft['chosen_step']} of {sft['steps']} steps, "
        f"lr {sft['lr']:g}"
        + (f", {replay} generic-text chunks of LM replay per step" if replay else "")
        + (
            f", KL to the frozen pretrained model on every other target, weight {sft['teacher_kl_weight']:g}"
            if sft.get("teacher_kl_weight")
            else ""
        )
        + ")"
    )
    val = sc["after"]["val"]["policy"]
    return (
        f"- **Start** (every arm's step 0): {how}. Held-out env CE {b['start']:.3f} nats/token, {_where(report)} "
        f"({', '.join(f'{k} {b[k]:.3f}' for k in REFERENCES)}). Greedy success {_iv(c['success'])} on test, "
        f"{val['success']:.3f} on validation."
    )


def comparison_sentences(report: dict[str, Any]) -> list[str]:
    a = {k: v["summary"] for k, v in report["arms"].items()}
    c = report["comparisons"]
    lam = report["arms"]["grpo_echo"]["lambda"]
    flat = c["direct_ce_flattening"]
    diff = c["echo_minus_grpo"]
    went = {-1: "fell", 1: "rose", 0: "no measurable change"}
    own = echo_settings(report["config"])
    own = f"; {own}" if own else ""
    lines = [
        "- **Policy (RL)**: held-out success change from the start: "
        + "; ".join(
            f"{_label(report, k)} {_iv(a[k]['success_vs_start'], '+.3f')} ({went[sign(a[k]['success_vs_start'])]})"
            for k in ARM_ORDER
        )
        + ".",
        f"- **World model**: direct CE (on the GRPO run's rollouts) lowers held-out env CE from the start by "
        f"{_iv(c['direct_ce_drop'])} nats/token in {a['direct_ce']['rl_steps']} steps; its validation curve "
        f"{'has' if flat['flattened'] else 'has not'} flattened (last-quarter fall {flat['last_quarter_fall']:.3f} of "
        f"{flat['total_fall']:.3f}). GRPO + ECHO (λ = {lam:g}, chosen on validation{own}) closes "
        f"{_pct(a['grpo_echo']['gap_closed'])} of that gap, GRPO {_pct(a['grpo']['gap_closed'])}; GRPO + ECHO ends at "
        f"{_iv(a['grpo_echo']['env_ce'])} nats/token (unigram {report['baselines']['unigram']:.3f}).",
        f"- **ECHO − GRPO** (paired): held-out env CE {_iv(diff['env_ce'], '+.3f')}, structurally novel lines "
        f"{_iv(diff['novel_structural_env_ce'], '+.3f')}; success {_iv(diff['success'], '+.3f')} (the target: lower "
        f"end ≥ −0.05), mean reward {_iv(diff['mean_reward'], '+.3f')}.",
    ]
    return lines


def targets_lines(report: dict[str, Any]) -> str:
    rows = ["| target | met |", "|---|---|"]
    rows += [f"| {t['target']} | {'yes' if t['met'] else '**no**'} |" for t in report["targets"]]
    return "\n".join(rows)


def headline(report: dict[str, Any]) -> str:
    return "\n".join([start_sentence(report), *comparison_sentences(report)])


def references_table(report: dict[str, Any]) -> str:
    b = report["baselines"]
    d = report["data"]["env_ce_sets"]["test"]
    start = report["comparisons"]["start"]
    lines = [
        f"Held-out env CE in nats/token on the same {d['env_tokens']:,} env_output tokens of {d['episodes']} test "
        f"worlds (*warning*: the {d['warning_tokens']:,} harness tokens; *novel*: env_output tokens on lines never "
        f"seen verbatim in training ({d['novel_line_tokens']:,}); *novel structure*: on lines whose structure, "
        f"digits, hex and hostnames masked, was never seen ({d['novel_structural_tokens']:,})). Final RL step; "
        f"[point, 95 % interval] of a bootstrap over {_seeds_phrase(report)}, paired by world; the start is one "
        "evaluation on the same worlds.",
        "",
        "| model | env CE | warning | novel | novel structure | gap closed | success | mean reward |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k in REFERENCES:
        what = f"uniform over the vocabulary (ln {report['model']['vocab_size']})" if k == "uniform" else k
        lines.append(f"| {what}{'' if k == 'uniform' else ' of training env text'} | {b[k]:.3f} | | | | | | |")
    lines.append(
        f"| start checkpoint (every arm's step 0) | {_iv(start['env_ce'])} | {_iv(start['warning_env_ce'])} | "
        f"{_iv(start['novel_env_ce'])} | {_iv(start['novel_structural_env_ce'])} | | {_iv(start['success'])} | "
        f"{_iv(start['mean_reward'])} |"
    )
    for arm in ARM_ORDER:
        s = report["arms"][arm]["summary"]
        lines.append(
            f"| {_label(report, arm)} | {_iv(s['env_ce'])} | {_iv(s['warning_env_ce'])} | {_iv(s['novel_env_ce'])} | "
            f"{_iv(s['novel_structural_env_ce'])} | {_pct(s.get('gap_closed'))} | {_iv(s['success'])} | "
            f"{_iv(s['mean_reward'])} |"
        )
    lines += [
        "",
        "Change from the start (final RL step − start, same test worlds, paired bootstrap):",
        "",
        "| arm | env CE | novel structure | success | mean reward | steps with a group with reward variance |",
        "|---|---|---|---|---|---|",
    ]
    for arm in ARM_ORDER:
        s = report["arms"][arm]["summary"]
        var = s["steps_with_reward_variance"]
        lines.append(
            f"| {_label(report, arm)} | {_iv(s['env_ce_vs_start'], '+.3f')} | "
            f"{_iv(s['novel_structural_env_ce_vs_start'], '+.3f')} | {_iv(s['success_vs_start'], '+.3f')} | "
            f"{_iv(s['mean_reward_vs_start'], '+.3f')} | "
            f"{'n/a (no policy term)' if arm == 'direct_ce' else format(var['mean'], '.1f')} / {s['rl_steps']} |"
        )
    return "\n".join(lines)


def kind_table(report: dict[str, Any]) -> str:
    """Held-out success per task kind (none when the run drew from the env's own distribution)."""
    rows = report["comparisons"]["success_by_kind"]
    if not rows:
        return ""
    lines = [
        "Held-out success by task kind: the start's, and each arm's change from it (final RL step − start, same "
        f"test worlds, paired bootstrap over that kind's worlds × {_across_seeds(report)}). The "
        "intervals are not corrected for the many comparisons: they show where a change comes from, not claims.",
        "",
        "| task kind | test worlds | start | " + " | ".join(_label(report, a) for a in ARM_ORDER) + " |",
        "|---|---|---|" + "---|" * len(ARM_ORDER),
    ]
    for r in rows:
        arms = " | ".join(_iv(r[f"{a}_vs_start"], "+.3f") for a in ARM_ORDER)
        lines.append(f"| {r['kind']} | {r['worlds']} | {_iv(r['start'])} | {arms} |")
    return "\n".join(lines)


def _setting(settings: dict[str, Any]) -> str:
    return ", ".join(f"`{k}` = {v}" for k, v in settings.items()) or "none (the defaults)"


def _share(x: float | None) -> str:
    """A gap share as a whole percent (n/a where there was no gap)."""
    return "n/a" if x is None else f"{round(100 * x) + 0:d} %"


def _probe_echo(p: dict[str, Any]) -> str:
    e = p.get("grpo_echo")
    if e is None:
        return "not run"
    succ = mean(r["val_success"] for r in e["runs"])
    return f"λ = {e['lambda']:g}: {e['val_env_ce']:.3f}, {succ:.3f}; {_share(e['val_gap_closed'])}"


def probes_table(probes: dict[str, dict[str, Any]]) -> str:
    """The README's table of a probes file (``openenv_echo.demo.probe``): a row per probe, the defaults first; the
    GRPO + ECHO column only where some probe ran it."""
    echo = any("grpo_echo" in p for p in probes.values())
    lines = [
        "| probe | setting changed | RL seeds | steps | GRPO's greedy validation success at the last step | groups "
        "with reward variance per step | direct CE: validation env CE at the last step; the share of its fall in the "
        "last quarter |"
        + (
            " GRPO + ECHO: validation env CE and success at the last step (mean); its share of the gap from the start "
            "to direct CE |"
            if echo
            else ""
        ),
        "|---|---|---|---|---|---|---|" + ("---|" if echo else ""),
    ]
    for name, p in _defaults_first(probes):
        runs = p["grpo"]
        succ = ", ".join(f"{r['val_success']:.3f}" for r in runs)
        avg = mean(r["val_success"] for r in runs)
        var = sum(r["groups_with_reward_variance"] for r in runs) / len(runs)
        d = p.get("direct_ce")
        flat = (
            "not run"
            if d is None
            else f"{d['validation_curve'][-1]['env_ce']:.3f}; {round(100 * d['last_quarter_fall'] / d['total_fall'])} % "
            f"({'' if d['flattened'] else 'not '}flat)"
        )
        lines.append(
            f"| {name} | {_setting(p['settings'])}{_against(p)} | {', '.join(map(str, p['seeds']))} | {p['rl_steps']} "
            f"| {succ} "
            f"(mean {avg:.3f}; start {p['start_val_success']:.3f}) | {var:.1f} | {flat} |"
            + (f" {_probe_echo(p)} |" if echo else "")
        )
    return "\n".join(lines)


def _against(p: dict[str, Any]) -> str:
    """Where a probe's GRPO and direct CE columns come from when it trained GRPO + ECHO alone (``probe --against``)."""
    return f" (GRPO + ECHO alone; GRPO and direct CE are the runs of `{p['against']}`)" if "against" in p else ""


def _defaults_first(probes: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return sorted(probes.items(), key=lambda kv: bool(kv[1]["settings"]))


def kinds_table(start: dict[str, Any], probes: dict[str, dict[str, Any]]) -> str:
    """Solved validation worlds by task kind: the start probe's chosen checkpoint's, and each RL probe's at its last
    step per RL seed (which kinds RL gains or loses, and which it never learns); "" without named kinds."""
    kinds = kinds_of_val_worlds(start["start_key"])
    if not kinds:
        return ""
    names = list(dict.fromkeys(kinds))

    def solved(per_world: list[float]) -> list[int]:
        return [sum(r == 1.0 for r, k in zip(per_world, kinds) if k == kind) for kind in names]

    lines = [
        "| solved validation worlds by task kind (per RL seed) | "
        + " | ".join(f"`{k}` (of {kinds.count(k)})" for k in names)
        + " |",
        "|---|" + "---|" * len(names),
        "| the start | " + " | ".join(map(str, solved(start["after"]["val"]["per_world_reward"]))) + " |",
    ]
    for name, p in _defaults_first(probes):
        runs = [solved(r["val_per_world_reward"]) for r in p["grpo"]]
        lines.append(f"| {name} | " + " | ".join(", ".join(str(r[i]) for r in runs) for i in range(len(names))) + " |")
    return "\n".join(lines)


def start_rl_probes_tables(
    starts: dict[str, dict[str, Any]] | None, probes: dict[str, dict[str, dict[str, Any]]]
) -> str:
    """A ``probes_table`` per start probe that RL probes ran from (``probes``: start probe name → its RL probes),
    each under a line naming the start. Given the start probes' records (``starts``), a probe's settings are shown
    without its start's (the start's rerun of the RL defaults then comes first), the line names them, and a second
    table gives each run's solved validation worlds by task kind (``kinds_table``)."""
    blocks = []
    for start, runs in probes.items():
        if starts is None:
            blocks.append(f"From the start probe `{start}`:\n\n{probes_table(runs)}")
            continue
        own = starts[start]["settings"]
        shown = {
            n: {**p, "settings": {k: v for k, v in p["settings"].items() if k not in own}} for n, p in runs.items()
        }
        kinds = kinds_table(starts[start], shown)
        blocks.append(
            f"From the start probe `{start}` ({_setting(own)}):\n\n{probes_table(shown)}"
            + (f"\n\n{kinds}" if kinds else "")
        )
    return "\n\n".join(blocks)


def start_probes_table(probes: dict[str, dict[str, Any]]) -> str:
    """The README's table of a start probes file (``openenv_echo.demo.probe start``): a row per start, with its SFT
    checkpoints' greedy validation success, the ones in ``SFT_BAND``, and the chosen one's figures."""
    lo, hi = SFT_BAND
    gaps = {
        b["step"] - a["step"] for p in probes.values() for a, b in zip(p["sft_checkpoints"], p["sft_checkpoints"][1:])
    }
    every = "at each start's checkpoints"
    if len(gaps) == 1:
        (gap,) = gaps
        every = "every step" if gap == 1 else f"every {gap} steps"
    lines = [
        f"| start probe | setting changed | SFT checkpoints' greedy validation success ({every}) | checkpoints in "
        f"the {100 * lo:.0f}–{100 * hi:.0f} % band | chosen step: validation success, env CE | test success |",
        "|---|---|---|---|---|---|",
    ]
    for name, p in probes.items():
        ck = p["sft_checkpoints"]
        band = [c["step"] for c in ck if lo <= c["val_success"] <= hi]
        v, t = p["after"]["val"], p["after"]["test"]
        curve = ", ".join(format(c["val_success"], ".2f") for c in ck)
        lines.append(
            f"| {name} | {_setting(p['settings'])} | {curve} | "
            f"{', '.join(map(str, band)) or 'none'} | {p['chosen_step']}: {v['success']:.3f}, {v['env_ce']:.3f} | "
            f"{t['success']:.3f} |"
        )
    return "\n".join(lines)


def start_probes_kinds_table(probes: dict[str, dict[str, Any]]) -> str:
    """Solved validation worlds by task kind per start probe: at the chosen SFT checkpoint, and the most at any of
    its checkpoints (which kinds a start could do at some step, and which no start ever learned); "" without named
    kinds."""
    kinds = {name: kinds_of_val_worlds(p["start_key"]) for name, p in probes.items()}
    names = list(dict.fromkeys(k for ks in kinds.values() for k in ks))
    if not names:
        return ""
    lines = [
        "| solved validation worlds by task kind: chosen checkpoint (most at any checkpoint) | "
        + " | ".join(f"`{k}`" for k in names)
        + " |",
        "|---|" + "---|" * len(names),
    ]
    for name, p in probes.items():

        def solved(per_world: list[float], kind: str, ks: list[str] = kinds[name]) -> int:
            return sum(r == 1.0 for r, k in zip(per_world, ks, strict=True) if k == kind)

        cells = [
            f"{solved(p['after']['val']['per_world_reward'], k)} "
            f"({max(solved(c['val_per_world_reward'], k) for c in p['sft_checkpoints'])}) of {kinds[name].count(k)}"
            for k in names
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _tci(x: dict[str, Any], fmt: str = ".3f") -> str:
    m = format(x["mean"], fmt)
    return m if x.get("ci95") is None else f"{m} [{format(x['ci95'][0], fmt)}, {format(x['ci95'][1], fmt)}]"


def validation_direct_ce(report: dict[str, Any]) -> tuple[list[int], float] | None:
    """Direct CE's final validation env CE, mean over the sweep seeds it ran on (the λ sweep's reference line; a
    recorded sweep's is the recording's); None if it ran on none of them."""
    sel = report["lambda_selection"]
    if "recorded" in sel:
        line = sel["recorded"]["direct_ce_validation"]
        return None if line is None else (list(line[0]), float(line[1]))
    sweep = set(sel["seeds"])
    runs = [r for r in report["arms"]["direct_ce"]["seeds"] if r["seed"] in sweep]
    if not runs:
        return None
    return sorted(r["seed"] for r in runs), mean([r["evals"][-1]["val_env_ce"]["nats_per_token"] for r in runs])


def _lambda_share(row: dict[str, Any], direct_ce: float) -> float | None:
    """A λ sweep row's share of the validation gap from the start to direct CE (mean over the sweep seeds)."""
    return gap_closed(row["curve"][0]["env_ce"], row["env_ce"]["mean"], direct_ce)


SHORT = {
    "echo_world_lr": "lr {:g}",
    "echo_world_optimizer": "{}",
    "echo_normalization": "{}",
    "echo_world_surgery": "PCGrad",
    "echo_world_varied_only": "varied groups",
    "echo_world_steps": "first {} steps",
    "echo_action_kl": "β {:g}",
    "echo_anchor": "{}",
}
"""Short labels of GRPO + ECHO's own settings on the trade-off plot (its title says what each stands for)."""
SHORT_VALUES = {"policy_term": "moving", "adam_tensorwise": "tensorwise", "sequence_mean": "seq. mean"}
"""Short labels of those settings' string values on the same plot."""


def tradeoff_points(report: dict[str, Any], probes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What GRPO + ECHO bought and paid on validation at the run's budget, one point per setting tried on the sweep
    seeds: the share of the gap from the start to direct CE (world model) against mean greedy success (policy).
    The λ sweep's points (one AdamW) and every probe that ran GRPO + ECHO at the run's RL steps (other budgets have
    another reference, so they are left out); GRPO's own success is the line a cost is read from."""
    sel = report["lambda_selection"]
    direct = validation_direct_ce(report)
    grpo = next(r for r in sel["validation"] if r["lambda"] == 0)
    points = []
    if direct is not None:
        for r in sel["validation"]:
            if r["lambda"] > 0:
                share = _lambda_share(r, direct[1])
                points.append(
                    {"label": f"λ = {r['lambda']:g}", "kind": "λ", "share": share, "success": r["success"]["mean"]}
                )
    for _, p in sorted(probes.items()):
        e = p.get("grpo_echo")
        if e is None or e["val_gap_closed"] is None or p["rl_steps"] != report["config"]["rl_steps"]:
            continue
        label = ", ".join(SHORT.get(k, k + " {}").format(SHORT_VALUES.get(v, v)) for k, v in p["settings"].items())
        success = mean(r["val_success"] for r in e["runs"])
        seeds = "" if len(e["runs"]) == len(sel["seeds"]) else f"; {len(e['runs'])} seed(s)"
        points.append(
            {
                "label": f"{label} (λ = {e['lambda']:g}{seeds})",
                "kind": "probe",
                "share": e["val_gap_closed"],
                "success": success,
            }
        )
    start = report["start_checkpoint"]["after"]["val"]["policy"]["success"]
    return {"grpo_success": grpo["success"]["mean"], "start_success": start, "points": points}


def lambda_table(report: dict[str, Any]) -> str:
    """The λ sweep on validation, each λ's share of the validation gap from the start to direct CE beside it: what
    the rule chose from, and how far any λ of the grid got."""
    sel = report["lambda_selection"]
    where = "interior to the grid" if sel["interior"] else "**the largest value swept: not interior**"
    direct = validation_direct_ce(report)
    gap_note = (
        ""
        if direct is None
        else f" Gap closed: (start − λ) / (start − direct CE) of mean validation env CE, direct CE "
        f"{direct[1]:.3f} (RL seeds {direct[0]})."
    )
    recorded = (
        f"**The recorded run's sweep** (`{sel['recorded']['report']}`), not rerun: this run's λ is pre-registered as "
        "its choice. "
        if "recorded" in sel
        else ""
    )
    lines = [
        f"{recorded}λ sweep of GRPO + ECHO on the **validation** split ({len(report['seeds']['validation'])} worlds, "
        f"final RL step, RL seeds {sel['seeds']}; mean [t 95 % interval] over those seeds). Rule: {sel['rule']}. "
        f"Chosen: **λ = {sel['chosen']:g}** ({where}).{gap_note}",
        "",
        "| λ | validation env CE | its bootstrap SE | validation gap closed | validation success | validation mean "
        "reward | steps with reward variance |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sel["validation"]:
        mark = " ←" if r["lambda"] == sel["chosen"] else ""
        se = "n/a (an earlier rule)" if "env_ce_se" not in r else f"{r['env_ce_se']:.4f}"
        share = None if direct is None else _lambda_share(r, direct[1])
        lines.append(
            f"| {r['lambda']:g}{mark} | {_tci(r['env_ce'])} | {se} | {_share(share)} | {_tci(r['success'])} | "
            f"{_tci(r['mean_reward'])} | {_tci(r['policy_updates'], '.1f')} |"
        )
    return "\n".join(lines)


def _lambda_rows(report: dict[str, Any], seconds: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The recording's chosen λ (marked ``chosen``) in the shape of ``summarize.second_lambda``, then its second λs
    in λ order."""
    chosen = report["arms"]["grpo_echo"]["summary"]
    return [
        {
            "lambda": report["lambda_selection"]["chosen"],
            "chosen": True,
            **{k: chosen[k] for k in ("env_ce", "gap_closed", "success_vs_start")},
            "echo_minus_grpo": report["comparisons"]["echo_minus_grpo"],
            "success_design": report["comparisons"]["success_design"]["echo_minus_grpo"],
            "targets": [t for t in report["targets"] if "ECHO" in t["target"]],
        },
        *sorted(seconds.values(), key=lambda r: r["lambda"]),
    ]


def second_lambda_table(report: dict[str, Any], seconds: dict[str, dict[str, Any]]) -> str:
    """The recording's chosen λ beside GRPO + ECHO at second λs (``summarize.second_lambda`` of each record) on the
    same test worlds and RL seeds, each against the recording's GRPO and direct-CE runs: the policy cost and the
    share of the gap at each λ, with the targets about GRPO + ECHO."""
    chosen = report["arms"]["grpo_echo"]["summary"]
    rows = _lambda_rows(report, seconds)
    lines = [
        f"GRPO + ECHO on the {len(report['seeds']['test'])} test worlds × RL seeds {chosen['seeds']}, each λ against "
        "the recording's GRPO and direct-CE runs (paired bootstrap by world and seed). Targets: below unigram / half "
        "the gap / the policy cost.",
        "",
        "| λ | held-out env CE | share of the gap | ECHO − GRPO env CE | ECHO − GRPO success | success vs start | "
        "targets met |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = r["echo_minus_grpo"]
        met = " / ".join("yes" if t["met"] else "no" for t in r["targets"])
        lines.append(
            f"| {r['lambda']:g}{' (chosen)' if r.get('chosen') else ''} | {_iv(r['env_ce'])} | {_pct(r['gap_closed'])} | "
            f"{_iv(d['env_ce'])} | {_iv(d['success'])} | {_iv(r['success_vs_start'])} | {met} |"
        )
    lines += [
        "",
        *(f"λ = {r['lambda']:g}'s plan, fixed before its run ({r['registered']}): {r['plan']}" for r in rows[1:]),
    ]
    return "\n".join(lines)


ARM_LABELS_SHORT = {"grpo": "GRPO", "grpo_echo": "GRPO + ECHO", "direct_ce": "direct CE"}


def _same(agreements: list[dict[str, Any]]) -> str:
    same, cells = (sum(a[k] for a in agreements) for k in ("same_reward", "worlds"))
    return f"{same} of {cells} ({max(a['max_nats_difference'] for a in agreements):.2g} nats)"


def whole_split_table(records: dict[str, dict[str, Any]]) -> str:
    """Whole-split records (``summarize.whole_split`` of each, by λ and budget): per record, its figures on every
    world of the record and on the worlds no look had seen when its plan was fixed, the targets it decides, how far the
    start's and the retrained runs' results are from the recording's on the recording's worlds, and its plan."""
    lines = [
        "| λ | RL steps | test worlds | start success | GRPO − start success | GRPO + ECHO env CE | share of the gap | "
        "ECHO − GRPO success | RL gain / below the unigram / half the gap / direct CE flat / policy cost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for r in sorted(records.values(), key=lambda r: (r["lambda"], r["rl_steps"])):
        for name, look in (("every", r["every"]), ("unseen", r["fresh"])):
            a = look["arms"]
            met = " / ".join("**yes**" if t["met"] else "no" for t in look["targets"])
            lines.append(
                f"| {r['lambda']:g} | {r['rl_steps']} | {look['worlds']} ({name}) | {_iv(look['start']['success'])} | "
                f"{_iv(a['grpo']['success_vs_start'], '+.3f')} | {_iv(a['grpo_echo']['env_ce'])} | "
                f"{_pct(a['grpo_echo']['gap_closed'])} | {_iv(look['echo_minus_grpo']['success'], '+.3f')} | {met} |"
            )
        agree = r["agreement"]
        same = "; ".join(
            f"{ARM_LABELS_SHORT.get(name, name)}, {_same(a if isinstance(a, list) else [a])}"
            for name, a in agree.items()
        )
        notes.append(
            f"λ = {r['lambda']:g}, {r['rl_steps']} RL steps, RL seeds {r['seeds']}. On the recording's "
            f"{agree['start']['worlds']} test worlds, the same reward as the recording's (world × seed cells; the "
            "largest per-world env CE difference): "
            f"{same}. Its plan, fixed before its run ({r['registered']}): {r['plan']}"
        )
    return "\n".join([*lines, "", *notes])


Recording = tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]
"""A report with its second λs and its whole-split looks (``summarize.second_lambda`` and ``summarize.whole_split``
of each record, by key)."""


def held_out_points(recordings: list[Recording]) -> list[dict[str, Any]]:
    """Every GRPO + ECHO setting evaluated on test, one point each: each recording's chosen λ and second looks on its
    own test worlds, then its whole-split looks on the worlds past the recording's, which no look had seen when their
    plans were fixed (``look``: what the point's plan read, its RL steps). A point is the setting's held-out env CE,
    share of the gap to direct CE and ECHO − GRPO success (``[point, lo, hi]``, paired by world and seed against the
    same recording's or look's GRPO), with the unigram line and the three targets about GRPO + ECHO (below unigram,
    half the gap, the policy cost) met or not; ``success_design`` (a recording's worlds only) is None for a look."""
    points = []
    for report, seconds, wholes in recordings:
        base = {
            "env": report["config"]["env"],
            "world_term": echo_settings(report["config"]) or "one AdamW with the policy term",
            "rl_seeds": len(report["arms"]["grpo_echo"]["summary"]["seeds"]),
        }
        for r in sorted(_lambda_rows(report, seconds), key=lambda r: r["lambda"]):
            points.append(
                {
                    **base,
                    "unigram": report["baselines"]["unigram"],
                    "test_worlds": len(report["seeds"]["test"]),
                    "lambda": r["lambda"],
                    "chosen": r.get("chosen", False),
                    "look": None,
                    **{k: r[k] for k in ("env_ce", "gap_closed")},
                    "echo_minus_grpo": r["echo_minus_grpo"]["success"],
                    "success_design": r["success_design"],
                    "met": [t["met"] for t in r["targets"]],
                }
            )
        for w in sorted(wholes.values(), key=lambda w: (w["lambda"], w["rl_steps"])):
            fresh = w["fresh"]
            points.append(
                {
                    **base,
                    "unigram": w["unigram"],
                    "test_worlds": fresh["worlds"],
                    "lambda": w["lambda"],
                    "chosen": False,
                    "look": {"rl_steps": w["rl_steps"], "worlds": fresh["worlds"]},
                    **{k: fresh["arms"]["grpo_echo"][k] for k in ("env_ce", "gap_closed")},
                    "echo_minus_grpo": fresh["echo_minus_grpo"]["success"],
                    "success_design": None,
                    "met": [t["met"] for t in fresh["targets"] if "ECHO" in t["target"]],
                }
            )
    return points


def _from(p: dict[str, Any]) -> str:
    """Where a held-out point's λ came from, and for a whole-split look what it read."""
    if p["look"] is not None:
        return (
            f"a whole-split look, planned before its run: {p['look']['rl_steps']} RL steps, its "
            f"{p['look']['worlds']} unseen test worlds"
        )
    return "the rule, on validation" if p["chosen"] else "a second look, planned before its run"


def held_out_table(points: list[dict[str, Any]]) -> str:
    """``held_out_points`` as the example README's answer table: what each setting bought and cost on test."""
    lines = [
        "| env | GRPO + ECHO's world term | λ | λ from | held-out env CE (unigram) | share of the gap to direct CE | "
        "ECHO − GRPO success | below unigram / half the gap / policy cost |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        met = " / ".join("**yes**" if m else "no" for m in p["met"])
        lines.append(
            f"| {p['env']} | {p['world_term']} | {p['lambda']:g} | {_from(p)} | "
            f"{_iv(p['env_ce'])} ({p['unigram']:.3f}) | {_pct(p['gap_closed'])} | {_iv(p['echo_minus_grpo'], '+.3f')} | "
            f"{met} |"
        )
    return "\n".join(lines)


def _draw_label(draw: list[float], worlds: int, seeds: int) -> str:
    w, s = draw
    if s == 0:
        return "the world draw alone"
    if w == 0:
        return "the seed draw alone"
    return f"{round(w * worlds)} worlds × {round(s * seeds)} seeds"


def _design_table(
    head: list[str],
    rows: list[tuple[list[str], list[float], list[dict[str, Any]]]],
    size: tuple[int, int],
    clears: Callable[[float], bool],
) -> str:
    """Rows of ``head`` cells, a recorded success difference and its ``summarize.success_design``, as a table with
    a column per draw; an interval whose lower end ``clears`` the target the difference is read against is bold."""
    worlds, seeds = size
    labels = [_draw_label(d["draw"], worlds, seeds) for d in rows[0][2]]

    def cell(x: list[float]) -> str:
        text = f"[{x[1] + 0.0:+.3f}, {x[2] + 0.0:+.3f}]"
        return f"**{text}**" if clears(x[1]) else text

    lines = [
        f"| {' | '.join(head[:-1])} | {head[-1]}, {worlds} worlds × {seeds} seeds (recorded) | "
        + " | ".join(labels)
        + " |",
        "|" + "---|" * (len(head) + len(labels)),
    ]
    for cells_, recorded, design in rows:
        lines.append(
            f"| {' | '.join(cells_)} | {_iv(recorded, '+.3f')} | "
            + " | ".join(cell(d["success"]) for d in design)
            + " |"
        )
    return "\n".join(lines)


def _one_size(sizes: set[tuple[int, int]]) -> tuple[int, int]:
    if len(sizes) != 1:
        raise ValueError("the design table's columns need one recording size")
    return sizes.pop()


def held_out_design_table(points: list[dict[str, Any]]) -> str:
    """Each held-out point's ECHO − GRPO success interval on its recording's worlds, with each source's part of its
    width (the world draw alone, the seed draw alone) and what larger recordings would make of the same figures
    (``summarize.success_design``); an interval whose lower end clears the policy-cost margin is bold. A whole-split
    look, which is that larger recording, has no row."""
    points = [p for p in points if p["success_design"] is not None]
    size = _one_size({(p["test_worlds"], p["rl_seeds"]) for p in points})
    rows = [
        ([p["env"], p["world_term"], f"{p['lambda']:g}"], p["echo_minus_grpo"], p["success_design"]) for p in points
    ]
    return _design_table(
        ["env", "GRPO + ECHO's world term", "λ", "ECHO − GRPO success"], rows, size, lambda lo: lo >= -SUCCESS_MARGIN
    )


def grpo_design_table(reports: list[dict[str, Any]]) -> str:
    """GRPO's held-out success change from the start, per env (its first recording's GRPO runs), as recorded and
    under each draw of ``summarize.success_design``; an interval above 0 (RL raised success) is bold."""
    first: dict[str, dict[str, Any]] = {}
    for r in reports:
        first.setdefault(r["config"]["env"], r)
    size = _one_size({(len(r["seeds"]["test"]), len(r["arms"]["grpo"]["summary"]["seeds"])) for r in first.values()})
    rows = [
        ([env], r["arms"]["grpo"]["summary"]["success_vs_start"], r["comparisons"]["success_design"]["grpo_vs_start"])
        for env, r in first.items()
    ]
    return _design_table(["env", "GRPO − start success"], rows, size, lambda lo: lo > 0)


def timing_line(report: dict[str, Any]) -> str:
    t = report["timings_s"]
    load = report["load_average"]
    workers = report["config"].get("workers", 1)  # reports from before worker processes ran one run at a time
    return (
        f"`{report['command']}`: wall time {t['total']:.0f} s ({t['total'] / 60:.1f} min), load average "
        f"{load['start'][0]:.1f} at the start, {load['mean_1min_at_laps']:.1f} mean and {load['max_1min_at_laps']:.1f} "
        f"max (1-minute figure, sampled per phase) on {load['cores']} cores, {workers} RL run{'s' if workers > 1 else ''} "
        "at a time."
    )


NO_UPDATES = (
    "No RL step updated any run: no rollout earned a reward or drew an env_output token, so every arm's figures are "
    "the start's and the λ choice is a tie broken by its rule."
)


def no_updates(report: dict[str, Any]) -> bool:
    """Whether every RL step of every run (the arms' and the sweep's) was skipped for want of a training signal."""
    runs = [r for a in report["arms"].values() for r in a["seeds"]] + report["sweep_runs"]
    return all(r["updates"] == 0 for r in runs)


def summary_markdown(report: dict[str, Any]) -> str:
    """Every demo table of the example's README, from a report."""
    parts = []
    if report.get("note"):
        parts.append(f"**{report['note']}**")
    if no_updates(report):
        parts.append(f"**{NO_UPDATES}**")
    st = report["status"]
    if not st["complete"]:
        parts.append(
            f"**Partial run: RL seeds {st['rl_seeds_done']} of {st['rl_seeds_planned']} finished** (rerun the same "
            "command to resume from its checkpoints)."
        )
    parts += [
        headline(report),
        targets_lines(report),
        references_table(report),
        *filter(None, [kind_table(report)]),
        lambda_table(report),
        timing_line(report),
    ]
    return "\n\n".join(parts) + "\n"


def leans_on(report: dict[str, Any]) -> str:
    """What of the recording a run reused instead of training (its λ sweep, its start), as a parenthesis."""
    reused = {
        "λ": "recorded" in report["lambda_selection"],
        "the start": report["start_checkpoint"].get("source", "").startswith("the recorded"),
    }
    named = " and ".join(k for k, yes in reused.items() if yes)
    return f" ({named} from the recording)" if named else ""


def readme_section(
    report: dict[str, Any],
    one_seed: dict[str, Any],
    sql: dict[str, Any] | None,
    anchored: dict[str, Any] | None = None,
) -> str:
    """The top-level README's short demo block: the terminal run's claims and targets, the default one-seed run's
    wall time, the sql run's verdict in one line and the anchored terminal recording's in another."""
    n = len(report["status"]["rl_seeds_done"])
    met = sum(t["met"] for t in report["targets"])
    lines = [
        f"In the recorded run (`{report['command']}`, {n} RL seed{'s' if n > 1 else ''}; "
        f"{met} of {len(report['targets'])} targets met, see the example's README):",
        "",
        start_sentence(report),
        *comparison_sentences(report),
        f"- **Wall time** of the default one-seed run{leans_on(one_seed)}: {timing_line(one_seed)}",
    ]
    if sql is not None:
        s = {k: v["summary"] for k, v in sql["arms"].items()}
        lines.append(
            f"- **sql env** (`{sql['command']}`, {len(sql['status']['rl_seeds_done'])} RL seed(s)): held-out env CE "
            f"start {sql['baselines']['start']:.3f}, GRPO {s['grpo']['env_ce'][0]:.3f}, GRPO + ECHO "
            f"(λ = {sql['arms']['grpo_echo']['lambda']:g}) {s['grpo_echo']['env_ce'][0]:.3f}, direct CE "
            f"{s['direct_ce']['env_ce'][0]:.3f} nats/token (4-gram {sql['baselines']['fourgram']:.3f}); ECHO − GRPO "
            f"success {_iv(sql['comparisons']['echo_minus_grpo']['success'], '+.3f')}."
            + (f" {NO_UPDATES}" if no_updates(sql) else "")
        )
    if anchored is not None:
        s = {k: v["summary"] for k, v in anchored["arms"].items()}
        lines.append(
            f"- **terminal, {echo_settings(anchored['config'])}** (`{anchored['command']}`, "
            f"{len(anchored['status']['rl_seeds_done'])} RL seeds; {sum(t['met'] for t in anchored['targets'])} of "
            f"{len(anchored['targets'])} targets met): GRPO + ECHO (λ = {anchored['arms']['grpo_echo']['lambda']:g}, "
            f"chosen on validation) closes {_pct(s['grpo_echo']['gap_closed'])} of the held-out gap to direct CE, at "
            f"{_iv(s['grpo_echo']['env_ce'])} nats/token; ECHO − GRPO success "
            f"{_iv(anchored['comparisons']['echo_minus_grpo']['success'], '+.3f')}."
        )
    return "\n".join(lines)


def block(text: str, begin: str = BEGIN, end: str = END) -> str:
    """The text between a README's markers (stripped)."""
    if begin not in text or end not in text:
        raise ValueError(f"README has no {begin} ... {end} block")
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def replace_block(text: str, body: str, begin: str = BEGIN, end: str = END) -> str:
    """``text`` with the block between the markers replaced by ``body``."""
    block(text, begin, end)
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{body.strip()}\n{end}{rest.split(end, 1)[1]}"


def main(argv: list[str] | None = None) -> None:
    """``python -m openenv_echo.demo.tables REPORT.json`` prints the example's tables."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m openenv_echo.demo.tables REPORT.json")
    sys.stdout.write(summary_markdown(json.loads(Path(args[0]).read_text())))


if __name__ == "__main__":
    main()
