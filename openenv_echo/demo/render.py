"""Everything a run's figures are shown in, rendered from its ``report.json`` (nothing re-run or re-evaluated).

``render_run(report, OUT)``: the summaries, ``report.json``, ``summary.md``, ``echo_world_model.png`` and
``verdict.json`` of one run (what a run writes after every seed). ``python -m openenv_echo.demo.render [ROOT]``
re-renders the committed runs of the repository at ROOT (default: the current directory):
``examples/echo_world_model/results``, ``results-sql`` (with each run's trade-off plot, ``echo-tradeoff.png``, and,
where it has ``start-probes.json``, its start probes' plot ``start-probes.png``) and ``results-anchored`` (terminal
with GRPO + ECHO's own world rate and moving anchor), the example README's tables blocks (with each run's RL probes
table, from its ``rl-probes.json``, its second-λ table, from ``second-lambda.json``, its start probes table and the
tables of RL probes from those starts, from ``start-rl-probes.json``, and its whole-split table and
``whole-split-verdict.json``, from ``whole-split.json``), the answer on held-out worlds (every GRPO +
ECHO setting run on test, both envs: a table and ``results/echo-held-out.png``, and the tables of what each
setting's and each env's GRPO success interval is made of and what a larger recording would make of it) and the
top-level README's demo block. Tests check that the committed files are exactly its output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .plots import plot_held_out, plot_report, plot_start_probes, plot_tradeoff
from .recorded import RESULTS, RESULTS_ANCHORED, RESULTS_SQL
from .summarize import second_lambda, summarize, verdict, whole_split
from .tables import (
    ANCHORED_BEGIN,
    ANCHORED_END,
    DESIGN_BEGIN,
    DESIGN_END,
    GRPO_DESIGN_BEGIN,
    GRPO_DESIGN_END,
    HELD_OUT_BEGIN,
    HELD_OUT_END,
    README_BEGIN,
    README_END,
    SQL_BEGIN,
    SQL_END,
    Recording,
    grpo_design_table,
    held_out_design_table,
    held_out_points,
    held_out_table,
    leans_on,
    probes_markers,
    probes_table,
    readme_section,
    replace_block,
    second_lambda_markers,
    second_lambda_table,
    start_probes_kinds_table,
    start_probes_markers,
    start_probes_table,
    start_rl_probes_markers,
    start_rl_probes_tables,
    summary_markdown,
    timing_line,
    tradeoff_points,
    whole_split_markers,
    whole_split_table,
)

PLOT_NAME = "echo_world_model.png"
VERDICT_NAME = "verdict.json"
PROBES_NAME = "rl-probes.json"
"""Validation-only probes of RL settings from a run's start (``openenv_echo.demo.probe``), beside its report."""
START_PROBES_NAME = "start-probes.json"
"""Start checkpoints trained under other start settings (``openenv_echo.demo.probe start``), beside a report."""
START_PROBES_PLOT = "start-probes.png"
"""Their SFT checkpoints' greedy validation success against SFT step, beside the recorded start's."""
SECOND_LAMBDA_NAME = "second-lambda.json"
"""GRPO + ECHO at λs other than the recording's choice, on its test worlds (``openenv_echo.demo.second_lambda``:
λ → record), beside its report."""
WHOLE_SPLIT_NAME = "whole-split.json"
"""The three arms at pre-registered λs on the test split's first worlds beyond the recording's
(``openenv_echo.demo.whole_split``: λ → record), beside its report."""
WHOLE_SPLIT_VERDICT_NAME = "whole-split-verdict.json"
"""Each whole-split look's plan, targets and verdict (``verdict.json``'s schema) on its unseen worlds (``fresh``) and
on every world (``every``), rendered from ``whole-split.json``."""
START_RL_PROBES_NAME = "start-rl-probes.json"
"""RL probes from start probes (``openenv_echo.demo.probe run --from-start``): start probe name → its probes."""
TRADEOFF_NAME = "echo-tradeoff.png"
"""Each GRPO + ECHO setting's share of the validation gap against its validation success (λ sweep and probes)."""
HELD_OUT_PLOT = "echo-held-out.png"
"""Every GRPO + ECHO setting run on test, both envs (chosen λs and second looks): share of the held-out gap against
ECHO − GRPO success, beside the terminal recording's report."""
ONE_SEED_NAME = "report-one-seed.json"
"""The default run's report (one seed; λ and the start from the recording), kept beside the recording for its wall time."""
EXAMPLE_README = Path("examples/echo_world_model/README.md")
TOP_README = Path("README.md")


def render_run(report: dict[str, Any], out: Path) -> dict[str, Any]:
    """Summaries, ``report.json``, ``summary.md``, the plot and ``verdict.json`` of a report's per-seed results."""
    summarize(report)
    report["plots"] = [PLOT_NAME]
    plot_report(report, out / PLOT_NAME)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "summary.md").write_text(summary_markdown(report))
    (out / VERDICT_NAME).write_text(json.dumps(verdict(report), indent=1) + "\n")
    return report


def render_repo(root: Path) -> None:
    """Re-render the committed runs and both README blocks of the repository at ``root``."""
    reports: dict[Path, dict[str, Any]] = {}
    for d in (RESULTS, RESULTS_SQL, RESULTS_ANCHORED):
        f = root / d / "report.json"
        if f.is_file():
            reports[d] = render_run(json.loads(f.read_text()), root / d)
    main = reports[RESULTS]
    one = root / RESULTS / ONE_SEED_NAME
    one_seed = summarize_copy(json.loads(one.read_text())) if one.is_file() else main
    readme = root / EXAMPLE_README
    one_line = f"The default one-seed run{leans_on(one_seed)} (its report: `{ONE_SEED_NAME}`): {timing_line(one_seed)}"
    text = replace_block(readme.read_text(), summary_markdown(main) + "\n" + one_line)
    if RESULTS_SQL in reports:
        text = replace_block(text, summary_markdown(reports[RESULTS_SQL]), SQL_BEGIN, SQL_END)
    if RESULTS_ANCHORED in reports:
        text = replace_block(text, summary_markdown(reports[RESULTS_ANCHORED]), ANCHORED_BEGIN, ANCHORED_END)
    held_out: list[Recording] = []
    for d, report in reports.items():
        seconds_file = root / d / SECOND_LAMBDA_NAME
        seconds = {}
        if seconds_file.is_file():
            seconds = {k: second_lambda(report, r) for k, r in json.loads(seconds_file.read_text()).items()}
            text = replace_block(text, second_lambda_table(report, seconds), *second_lambda_markers(_name(d, report)))
        whole_file = root / d / WHOLE_SPLIT_NAME
        wholes = {}
        if whole_file.is_file():
            wholes = {k: whole_split(report, r) for k, r in json.loads(whole_file.read_text()).items()}
            text = replace_block(text, whole_split_table(wholes), *whole_split_markers(_name(d, report)))
            verdicts = {k: whole_split_verdict(w) for k, w in wholes.items()}
            (root / d / WHOLE_SPLIT_VERDICT_NAME).write_text(json.dumps(verdicts, indent=1) + "\n")
        held_out.append((report, seconds, wholes))
        if d == RESULTS_ANCHORED:  # one setting's recording: its λ points are not the trade-off plot's one-AdamW sweep
            continue
        probes_file = root / d / PROBES_NAME
        probes = json.loads(probes_file.read_text()) if probes_file.is_file() else {}
        if probes:
            text = replace_block(text, probes_table(probes), *probes_markers(report["config"]["env"]))
        plot_tradeoff(tradeoff_points(report, probes), report["config"]["env"], root / d / TRADEOFF_NAME)
        starts_file = root / d / START_PROBES_NAME
        if starts_file.is_file():
            starts = json.loads(starts_file.read_text())
            env = report["config"]["env"]
            body = "\n\n".join(filter(None, [start_probes_table(starts), start_probes_kinds_table(starts)]))
            text = replace_block(text, body, *start_probes_markers(env))
            plot_start_probes(starts, report["start_checkpoint"], env, root / d / START_PROBES_PLOT)
            rl_file = root / d / START_RL_PROBES_NAME
            if rl_file.is_file():
                tables = start_rl_probes_tables(starts, json.loads(rl_file.read_text()))
                text = replace_block(text, tables, *start_rl_probes_markers(env))
    points = held_out_points(sorted(held_out, key=lambda r: r[0]["config"]["env"] != "terminal"))
    text = replace_block(text, held_out_table(points), HELD_OUT_BEGIN, HELD_OUT_END)
    text = replace_block(text, held_out_design_table(points), DESIGN_BEGIN, DESIGN_END)
    text = replace_block(text, grpo_design_table([r for r, _, _ in held_out]), GRPO_DESIGN_BEGIN, GRPO_DESIGN_END)
    plot_held_out(points, root / RESULTS / HELD_OUT_PLOT)
    readme.write_text(text)
    top = root / TOP_README
    body = readme_section(main, one_seed, reports.get(RESULTS_SQL), reports.get(RESULTS_ANCHORED))
    top.write_text(replace_block(top.read_text(), body, README_BEGIN, README_END))


def whole_split_verdict(look: dict[str, Any]) -> dict[str, Any]:
    """A summarized whole-split look (``summarize.whole_split``) as ``whole-split-verdict.json`` holds it."""
    keep = ("lambda", "rl_steps", "plan", "registered")
    return {
        **{k: look[k] for k in keep},
        **{part: {k: look[part][k] for k in ("worlds", "targets", "verdict")} for part in ("fresh", "every")},
    }


def _name(d: Path, report: dict[str, Any]) -> str:
    """A recording's name in the example README's markers: its env's, ``-anchored`` for the anchored one."""
    return f"{report['config']['env']}{'-anchored' if d == RESULTS_ANCHORED else ''}"


def summarize_copy(report: dict[str, Any]) -> dict[str, Any]:
    summarize(report)
    return report


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        raise SystemExit("usage: python -m openenv_echo.demo.render [REPO_ROOT]")
    render_repo(Path(args[0]) if args else Path("."))


if __name__ == "__main__":
    main()
