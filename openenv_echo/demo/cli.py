"""``openenv-echo demo``: the typer command (wire with ``app.command("demo")(demo)`` in ``openenv_echo/cli.py``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from .config import ARMS, MODEL_KINDS, DemoConfig

_FULL, _QUICK = DemoConfig.preset("full"), DemoConfig.preset("quick")


def demo(
    quick: bool = typer.Option(False, "--quick", help="CI mode: tiny budget, well under 2 min on 2 cores."),
    out: Path = typer.Option(Path("out/echo_world_model"), "--out", help="Directory for report.json and the PNG."),
    model: str = typer.Option("tiny", "--model", help=f"Policy model: {' | '.join(MODEL_KINDS)}."),
    docker: bool = typer.Option(
        False,
        "--docker",
        help="Serve the env from its Docker image instead of a local "
        "process (built from envs/terminal_env/server/Dockerfile).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of weights, data order and sampling."),
    threads: int | None = typer.Option(None, "--threads", help="torch threads [2]."),
    rl_steps: int | None = typer.Option(
        None, "--rl-steps", help=f"RL steps per arm [full {_FULL.rl_steps} / quick {_QUICK.rl_steps}]."
    ),
    sft_steps: int | None = typer.Option(
        None, "--sft-steps", help=f"Warm-start steps [full {_FULL.sft_steps} / quick {_QUICK.sft_steps}]."
    ),
    world_model_coeff: float | None = typer.Option(
        None, "--lambda", help=f"λ of the ECHO arms [{_FULL.world_model_coeff:g}]."
    ),
    arms: str | None = typer.Option(None, "--arms", help=f"Comma-separated subset of {','.join(ARMS)}."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars or phase lines."),
) -> None:
    """CPU reference demo: a small LM trained on real terminal-env rollouts; GRPO vs GRPO+ECHO vs verifier-free
    ECHO; held-out env CE and success; writes OUT/report.json, OUT/summary.md and OUT/echo_world_model.png."""
    from .run import run_demo, summary_markdown

    overrides = {
        "out": out,
        "model": model,
        "docker": docker,
        "seed": seed,
        "threads": threads,
        "rl_steps": rl_steps,
        "sft_steps": sft_steps,
        "world_model_coeff": world_model_coeff,
        "progress": not no_progress,
        "arms": tuple(a.strip() for a in arms.split(",") if a.strip()) if arms else None,
    }
    try:
        cfg = DemoConfig.preset("quick" if quick else "full", **overrides)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    argv = sys.argv[sys.argv.index("demo") + 1 :] if "demo" in sys.argv else sys.argv[1:]
    report = run_demo(cfg, command=" ".join(["openenv-echo", "demo", *argv]))
    rows = report["summary"]
    typer.echo(json.dumps({"out": str(out), "wall_time_s": report["timings_s"]["total"], "summary": rows}, indent=1))
    typer.echo(summary_markdown(report))


def main() -> None:
    """``python -m openenv_echo.demo`` / ``examples/echo_world_model/run.py``."""
    typer.run(demo)
