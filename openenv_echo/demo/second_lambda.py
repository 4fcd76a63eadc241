r"""GRPO + ECHO at a second λ on a recording's test worlds: the trade-off at a λ its rule did not choose.

A recording's verdict answers at the λ its rule chose on validation. A trainer author also asks what another λ
costs the policy and buys in held-out env CE; that is a second look at the same test worlds, so it is
pre-registered (``--plan``: the λ, why, and how its figures will be read, fixed before the run and written into its
record) and it changes nothing in the recording. It trains GRPO + ECHO at λ on the recording's arm seeds from the
recording's start (refused if the start's held-out evaluation is not the recording's), evaluates each on test as
the recording's arms were, and compares them with the recording's own GRPO and direct-CE runs, paired by world and
seed (``summarize.second_lambda``). The record joins ``second-lambda.json`` beside the report, keyed by λ;
``python -m openenv_echo.demo.render`` writes its table into the example README.

    python -m openenv_echo.demo.second_lambda --env sql --lam 0.1 --out /tmp/sql-lambda-0.1 \
        --plan "the grid's smallest λ: does it meet the policy-cost target, at what share of the gap?"
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .config import DemoConfig
from .experiment import RunStore, run_experiment, strip_run
from .looks import join_record, look_parser, recording_report, shown
from .render import SECOND_LAMBDA_NAME
from .run import torch_settings
from .summarize import second_lambda
from .tables import second_lambda_table
from .workers import Job


def run_second_lambda(
    report_file: Path, lam: float, out: Path, plan: str, progress: bool = True, workers: int | None = None
) -> dict[str, Any]:
    """Train and evaluate GRPO + ECHO at ``lam`` on the arm seeds of the recording at ``report_file`` (resuming what
    is stored in ``out``), join its record into ``second-lambda.json`` beside it and return the record. ``workers``:
    RL runs at once (the recording's when None; a run's numbers do not depend on it)."""
    rec = json.loads(report_file.read_text())
    chosen = rec["lambda_selection"]["chosen"]
    if not lam > 0 or lam == chosen:
        raise ValueError(f"the second λ must be > 0 and not the recording's choice ({chosen:g}), not {lam:g}")
    if not plan.strip():
        raise ValueError("a second look at the test worlds needs its plan, written before the run (--plan)")
    cfg = DemoConfig(**rec["config"])
    cfg = replace(cfg, out=out, progress=progress, workers=workers or cfg.workers)
    registered = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    def run(report: dict[str, Any], cfg: DemoConfig, runs: RunStore, console: Any, out: Path) -> dict[str, Any]:
        start_test = report["start_checkpoint"]["after"]["test"]
        if start_test != rec["start_checkpoint"]["after"]["test"]:
            raise ValueError(f"this run's start is not the recording's ({report_file}): its arms would not pair")
        jobs = [Job("grpo_echo", lam, s) for s in cfg.rl_seeds]
        runs.prepare(jobs + [replace(j, test=True) for j in jobs])
        return {
            "lambda": lam,
            "plan": plan.strip(),
            "registered": registered,
            "recording": shown(report_file),
            "versions": report["versions"],
            "timings_s": {"total": runs.clock.total(), "cpu_total": runs.clock.cpu()},
            "load_average": runs.clock.load(),
            "seeds": [strip_run(runs.get("grpo_echo", lam, s)) for s in cfg.rl_seeds],
        }

    with torch_settings(cfg.threads):
        record = run_experiment(cfg, f"second λ {lam:g}", run)
    join_record(report_file.parent / SECOND_LAMBDA_NAME, f"{lam:g}", record)
    return record


def main(argv: list[str] | None = None) -> None:
    ap = look_parser("openenv_echo.demo.second_lambda", __doc__, "GRPO + ECHO's λ: > 0, not the recording's choice")
    args = ap.parse_args(argv)
    report_file = recording_report(ap, args)
    try:
        record = run_second_lambda(report_file, args.lam, args.out, args.plan, workers=args.workers)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    report = json.loads(report_file.read_text())
    print(second_lambda_table(report, {f"{args.lam:g}": second_lambda(report, record)}))


if __name__ == "__main__":
    main()
