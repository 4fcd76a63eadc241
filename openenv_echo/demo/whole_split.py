r"""The three arms at a pre-registered λ on every world of the test split: the recording a 256-world recording's
design tables leave open.

A recording's held-out figures come from its test worlds (256 of the split's 1000); ``summarize.success_design``
says what every world of the split would make of them if they held. This records it. It trains GRPO, GRPO + ECHO
at λ (with the recording's world-term settings) and direct CE on the recording's RL seeds from the recording's start,
for the recording's RL steps or ``--rl-steps`` (a budget where the recording's reference had not flattened), and
evaluates them at their last step and the start on the first ``test_worlds`` worlds of the split (default: all of
them; no test point between, which a look's targets never read: the held-out curves are the recording's). A λ fixed
after the recording's figures were seen is a new look at its test worlds, so the look is pre-registered (``--plan``:
the λ, why, and how its figures will be read, fixed before the run and written into its record), and the worlds past
the recording's own, which no look has seen, are summarized apart (``summarize.whole_split``). The start is the
recording's weights; the record says how far its evaluation, and each retrained run's (where the recording has that
run: at its budget), is from the recording's on the recording's worlds (none on the machine and sampler revision that
made the recording; a CPU with other vector kernels, or another sampler revision, rounds floats otherwise, and
retrained runs then are other agents, paired with each other and the start as the recording's are). It joins ``whole-split.json`` beside the report, keyed by λ (and by its
RL steps where they are not the recording's).

    python -m openenv_echo.demo.whole_split --report examples/echo_world_model/results-anchored/report.json \
        --lam 3 --out /tmp/whole-split-3 --plan "..."
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from .checkpoints import load_stored, save_stored, start_key
from .config import ARMS, SPLITS, DemoConfig
from .experiment import RunStore, run_experiment, strip_run
from .looks import join_record, look_parser, recording_report, shown
from .recorded import START_NAME, recording
from .render import SECOND_LAMBDA_NAME, WHOLE_SPLIT_NAME
from .run import torch_settings
from .summarize import whole_split
from .tables import whole_split_table
from .workers import Job


def run_whole_split(
    report_file: Path,
    lam: float,
    out: Path,
    plan: str,
    test_worlds: int | None = None,
    progress: bool = True,
    workers: int | None = None,
    rl_steps: int | None = None,
) -> dict[str, Any]:
    """Train the three arms (GRPO + ECHO at ``lam``) for ``rl_steps`` RL steps (None: the recording's) on the RL
    seeds of the recording at ``report_file`` from its start (resuming what is stored in ``out``), evaluate them at
    their last step and the start on the first ``test_worlds`` test worlds (None: every one), join the record into
    ``whole-split.json`` beside the report (``record_key``) and return it. ``workers``: RL runs at once (the
    recording's when None; a run's numbers do not depend on it)."""
    rec = json.loads(report_file.read_text())
    recorded_worlds = len(rec["seeds"]["test"])
    worlds = len(SPLITS["test"]) if test_worlds is None else test_worlds
    if not lam > 0:
        raise ValueError(f"GRPO + ECHO's λ must be > 0, not {lam:g}")
    if not recorded_worlds < worlds <= len(SPLITS["test"]):
        raise ValueError(
            f"test worlds must be more than the recording's {recorded_worlds} and at most the split's "
            f"{len(SPLITS['test'])}, not {worlds}"
        )
    if not plan.strip():
        raise ValueError("a look at the recording's test worlds needs its plan, written before the run (--plan)")
    recorded_cfg = DemoConfig(**rec["config"])
    steps = recorded_cfg.rl_steps if rl_steps is None else rl_steps
    if steps < 1:
        raise ValueError(f"RL steps must be at least 1, not {steps}")
    cfg = replace(
        recorded_cfg,
        n_test=worlds,
        rl_steps=steps,
        test_curve=False,
        out=out,
        progress=progress,
        workers=workers or recorded_cfg.workers,
    )
    registered = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    carry_start(report_file, recorded_cfg, cfg)
    # the recording's own runs, where this look trains them again (at the recording's budget only)
    recorded = _recorded_runs(report_file, rec, lam).items() if steps == recorded_cfg.rl_steps else []

    def run(report: dict[str, Any], cfg: DemoConfig, runs: RunStore, console: Any, out: Path) -> dict[str, Any]:
        start_test = report["start_checkpoint"]["after"]["test"]
        lams = {"grpo": 0.0, "grpo_echo": lam, "direct_ce": 1.0}  # direct CE: λ unused
        jobs = [Job(arm, lams[arm], s) for s in cfg.rl_seeds for arm in ARMS]
        runs.prepare(jobs + [replace(j, test=True) for j in jobs])  # training before evaluation
        arms = {arm: [strip_run(runs.get(arm, lams[arm], s)) for s in cfg.rl_seeds] for arm in ARMS}
        return {
            "lambda": lam,
            "plan": " ".join(plan.split()),
            "registered": registered,
            "recording": shown(report_file),
            "recorded_test_worlds": recorded_worlds,
            "test_seeds": report["seeds"]["test"],
            "versions": report["versions"],
            "timings_s": {"total": runs.clock.total(), "cpu_total": runs.clock.cpu()},
            "load_average": runs.clock.load(),
            "baselines": report["baselines"],
            "test_env_ce_set": report["data"]["env_ce_sets"]["test"],
            "start": start_test,
            "arms": arms,
            "agreement": {
                "start": agreement(start_test, rec["start_checkpoint"]["after"]["test"]),
                **{arm: [agreement(r["final"]["test"], same[r["seed"]]) for r in arms[arm]] for arm, same in recorded},
            },
        }

    with torch_settings(cfg.threads):
        record = run_experiment(cfg, f"whole split λ {lam:g}", run)
    join_record(report_file.parent / WHOLE_SPLIT_NAME, record_key(lam, steps, recorded_cfg.rl_steps), record)
    return record


def record_key(lam: float, rl_steps: int, recorded_steps: int) -> str:
    """A record's key in ``whole-split.json``: its λ, with its RL steps where they are not the recording's."""
    return f"{lam:g}" if rl_steps == recorded_steps else f"{lam:g}, {rl_steps} steps"


def carry_start(report_file: Path, recorded_cfg: DemoConfig, cfg: DemoConfig) -> None:
    """Store the recording's start in ``cfg``'s run directory under ``cfg``'s start settings, without its test
    evaluation (the run evaluates it on its own test worlds): the start stored beside the report, in the recording's
    run directory or as its env's recorded start, the first made under the recording's start settings."""
    into = Path(cfg.out) / "checkpoints" / "start.pt"
    if load_stored(into, start_key(cfg)) is not None:
        return
    key = start_key(recorded_cfg)
    for f in (report_file.parent / START_NAME, report_file.parent / "checkpoints" / "start.pt"):
        start = load_stored(f, key)
        if start is not None:
            break
    else:
        start = load_stored(recording(recorded_cfg.env) / START_NAME, key)
    if start is None:
        raise ValueError(f"no start checkpoint made under {report_file}'s start settings beside it or in its env's")
    carried = {k: v for k, v in start.items() if k != "test"}
    carried["source"] = f"the start of {shown(report_file)}, evaluated on this run's test worlds"
    into.parent.mkdir(parents=True, exist_ok=True)
    save_stored(into, start_key(cfg), carried)


def _recorded_runs(report_file: Path, rec: dict[str, Any], lam: float) -> dict[str, dict[int, dict[str, Any]]]:
    """The recording's own final test evaluation of each arm this run retrains, by seed: GRPO and direct CE, and
    GRPO + ECHO where the recording (its choice or a second look) ran λ."""
    runs = {arm: rec["arms"][arm]["seeds"] for arm in ("grpo", "direct_ce")}
    seconds_file = report_file.parent / SECOND_LAMBDA_NAME
    seconds = json.loads(seconds_file.read_text()) if seconds_file.is_file() else {}
    if rec["lambda_selection"]["chosen"] == lam:
        runs["grpo_echo"] = rec["arms"]["grpo_echo"]["seeds"]
    elif f"{lam:g}" in seconds:
        runs["grpo_echo"] = seconds[f"{lam:g}"]["seeds"]
    return {arm: {s["seed"]: s["final"]["test"] for s in seeds} for arm, seeds in runs.items()}


def agreement(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """How far a test evaluation of this run is from the recording's of the same weights or run, on the recording's
    worlds: how many give the same reward, and the largest per-world difference of env_output nats (0 where this
    machine rounds floats as the recording's did; a CPU with other vector kernels can make the start's greedy
    episodes, and more so retrained runs, differ from the recording's)."""
    worlds = len(theirs["policy"]["per_world_reward"])

    def pairs(figure: Callable[[dict[str, Any]], list[float]]) -> Iterator[tuple[float, float]]:
        return zip(figure(ours)[:worlds], figure(theirs), strict=True)

    return {
        "worlds": worlds,
        "same_reward": sum(a == b for a, b in pairs(lambda t: t["policy"]["per_world_reward"])),
        "max_nats_difference": max(abs(a - b) for a, b in pairs(lambda t: t["env_ce"]["per_world_nats"]["env_output"])),
    }


def main(argv: list[str] | None = None) -> None:
    ap = look_parser("openenv_echo.demo.whole_split", __doc__, "GRPO + ECHO's λ (> 0), fixed before the run")
    ap.add_argument("--test-worlds", type=int, help="the test split's first this many worlds [every one]")
    ap.add_argument("--rl-steps", type=int, help="RL steps of every arm [the recording's]")
    args = ap.parse_args(argv)
    report_file = recording_report(ap, args)
    try:
        record = run_whole_split(
            report_file, args.lam, args.out, args.plan, args.test_worlds, workers=args.workers, rl_steps=args.rl_steps
        )
    except ValueError as e:
        raise SystemExit(str(e)) from None
    print(whole_split_table({"look": whole_split(json.loads(report_file.read_text()), record)}))


if __name__ == "__main__":
    main()
