"""``openenv-echo demo``: the typer command (wire with ``app.command("demo")(demo)`` in ``openenv_echo/cli.py``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from .config import ENVS, LAMBDAS, MODEL_KINDS, DemoConfig
from .envs import DEMO_ENVS

_FULL, _QUICK = DemoConfig.preset("full"), DemoConfig.preset("quick")
_SFT_STEPS = ", ".join(f"{e.name} {e.sft_steps}" for e in DEMO_ENVS.values())
_SEEDS = ", ".join(f"{e.name} {e.seed}" for e in DEMO_ENVS.values())
_SWEEP = ",".join(format(x, "g") for x in LAMBDAS)


def demo(
    quick: bool = typer.Option(
        False, "--quick", help="Smoke test of every phase (about a minute); its numbers are not evidence."
    ),
    env: str = typer.Option(_FULL.env, "--env", help=f"Environment: {' | '.join(ENVS)}."),
    out: Path = typer.Option(Path("out/echo_world_model"), "--out", help="Directory for report.json and the PNG."),
    model: str = typer.Option(_FULL.model, "--model", help=f"Policy model: {' | '.join(MODEL_KINDS)}."),
    docker: bool = typer.Option(
        False,
        "--docker",
        help="Serve the env from its Docker image instead of a local "
        "process (built from envs/<env>_env/server/Dockerfile).",
    ),
    seed: int | None = typer.Option(
        None, "--seed", help=f"Start checkpoint's seed; RL seeds seed, seed+1, ... [{_SEEDS}]."
    ),
    seeds: int | None = typer.Option(None, "--seeds", help="RL seeds per arm, each evaluated on test [1]."),
    sweep_seeds: int | None = typer.Option(
        None,
        "--sweep-seeds",
        help="RL seeds that run the whole λ sweep on validation, λ chosen on them [0: no sweep, λ pre-registered "
        "as the env's recorded sweep's choice, made on 3 seeds].",
    ),
    train_start: bool = typer.Option(
        False,
        "--train-start",
        help="Train the start checkpoint even where the env's recorded one was trained under these settings.",
    ),
    threads: int | None = typer.Option(None, "--threads", help=f"torch threads per process [{_FULL.threads}]."),
    workers: int | None = typer.Option(
        None, "--workers", help=f"RL runs trained at once, one process each [{_FULL.workers}]."
    ),
    rl_steps: int | None = typer.Option(
        None, "--rl-steps", help=f"RL steps per run [full {_FULL.rl_steps} / quick {_QUICK.rl_steps}]."
    ),
    generic_steps: int | None = typer.Option(
        None,
        "--generic-steps",
        help=f"Start checkpoint: generic-text pretraining steps [full {_FULL.generic_steps} / quick "
        f"{_QUICK.generic_steps}].",
    ),
    sft_steps: int | None = typer.Option(
        None,
        "--sft-steps",
        help=f"Start checkpoint: SFT steps on expert actions [full: the env's, {_SFT_STEPS} / quick {_QUICK.sft_steps}].",
    ),
    n_test: int | None = typer.Option(None, "--test-worlds", help=f"Held-out test worlds [{_FULL.n_test}]."),
    lambdas: str | None = typer.Option(None, "--lambdas", help=f"λ sweep on validation, with 0 [{_SWEEP}]."),
    echo_world_lr: float | None = typer.Option(
        None,
        "--echo-world-lr",
        help="GRPO + ECHO: the world term on an AdamW of its own at this rate [none: one AdamW for the whole loss].",
    ),
    echo_world_optimizer: str | None = typer.Option(
        None,
        "--echo-world-optimizer",
        help="GRPO + ECHO: that world term's optimizer: adamw | adam_tensorwise (one second moment per parameter "
        "tensor; needs --echo-world-lr) [adamw].",
    ),
    echo_normalization: str | None = typer.Option(
        None,
        "--echo-normalization",
        help="GRPO + ECHO: the world term's normalization: token_mean | sequence_mean (the paper's: each rollout's "
        "env CE over its observation body tokens, then the mean over rollouts) [token_mean].",
    ),
    echo_world_surgery: bool = typer.Option(
        False,
        "--echo-world-surgery",
        help="GRPO + ECHO: PCGrad, the world term's gradient loses its component along the policy term's where they "
        "conflict (needs --echo-world-lr) [off].",
    ),
    echo_world_varied_only: bool = typer.Option(
        False,
        "--echo-world-varied-only",
        help="GRPO + ECHO: the world term only on rollouts of groups with reward variance [every rollout].",
    ),
    echo_world_steps: int | None = typer.Option(
        None,
        "--echo-world-steps",
        help="GRPO + ECHO: the world term only on the first N RL steps, then the policy term alone [every step].",
    ),
    echo_action_kl: float | None = typer.Option(
        None,
        "--echo-action-kl",
        help="GRPO + ECHO: β, an anchor β · KL(policy ‖ reference) on the action targets, in the world term [none].",
    ),
    echo_anchor: str | None = typer.Option(
        None,
        "--echo-anchor",
        help="The anchor's reference: start (the RL start, frozen) | policy_term (the start moved by the policy "
        "term's steps alone; needs --echo-world-lr) [start].",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars or phase lines."),
) -> None:
    """CPU reference demo: a small LM pretrained on generic text and SFT'd on expert actions only, then GRPO, GRPO +
    ECHO (λ chosen on validation over several RL seeds: by the env's recorded sweep unless --sweep-seeds) and direct
    env CE (on GRPO's rollouts) on ENV; held-out env CE against the uniform and n-gram references, success, paired
    worlds × seeds bootstrap intervals; writes OUT/report.json, OUT/summary.md, OUT/verdict.json and
    OUT/echo_world_model.png. The start checkpoint is the env's recorded one where its settings are this run's
    (--train-start trains it)."""
    from .checkpoints import ForeignStart
    from .recorded import recorded_selection
    from .run import run_demo
    from .tables import summary_markdown

    try:
        lams = tuple(float(x) for x in lambdas.split(",") if x.strip()) if lambdas else None
    except ValueError as e:
        raise typer.BadParameter(f"--lambdas: {e}") from e
    overrides = {
        "out": out,
        "env": env,
        "model": model,
        "docker": docker,
        "seed": seed,
        "n_seeds": seeds,
        "sweep_seeds": sweep_seeds,
        "train_start": train_start,
        "threads": threads,
        "workers": workers,
        "rl_steps": rl_steps,
        "generic_steps": generic_steps,
        "sft_steps": sft_steps,
        "n_test": n_test,
        "lambdas": lams,
        "echo_world_lr": echo_world_lr,
        "echo_world_optimizer": echo_world_optimizer,
        "echo_normalization": echo_normalization,
        "echo_world_surgery": echo_world_surgery or None,
        "echo_world_varied_only": echo_world_varied_only or None,
        "echo_world_steps": echo_world_steps,
        "echo_action_kl": echo_action_kl,
        "echo_anchor": echo_anchor,
        "progress": not no_progress,
    }
    try:
        cfg = DemoConfig.preset("quick" if quick else "full", **overrides)
        if not cfg.sweep_seeds:
            recorded_selection(cfg)  # λ must be pre-registered for these settings: say so before any work
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    argv = sys.argv[sys.argv.index("demo") + 1 :] if "demo" in sys.argv else sys.argv[1:]
    try:
        report = run_demo(cfg, command=" ".join(["openenv-echo", "demo", *argv]))
    except ForeignStart as e:
        raise SystemExit(str(e)) from None
    brief = {"out": str(out), "wall_time_s": report["timings_s"]["total"], "note": report.get("note")}
    typer.echo(json.dumps({k: v for k, v in brief.items() if v is not None}, indent=1))
    typer.echo(summary_markdown(report))


def main() -> None:
    """``python -m openenv_echo.demo`` / ``examples/echo_world_model/run.py``."""
    typer.run(demo)
