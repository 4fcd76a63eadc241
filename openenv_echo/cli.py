"""The ``openenv-echo`` command line: serve an env, run episodes, show trajectories, run the demo."""

from __future__ import annotations

import json
from importlib import import_module
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()


def _limits(**flags: Any) -> Any:
    """``ServerLimits`` from the environment, then the ``serve`` flags that were given (None = not given)."""
    from .server import ServerLimits

    return ServerLimits.from_env(**flags)


def _load_tokenizer(path: str | None) -> Any:
    if path is None:
        return None
    from .tokenize import load_tokenizer

    return load_tokenizer(path)


@app.command()
def serve(
    env: str = typer.Argument(..., help="Environment name (echo, terminal, sql) or module:Class."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (0.0.0.0 in containers)."),
    port: int = typer.Option(8000, help="TCP port."),
    mode: str = typer.Option("simulation", help="simulation (HTTP reset/step/state too) or production (WS only)."),
    max_sessions: int | None = typer.Option(None, help="Concurrent sessions [env OPENENV_ECHO_MAX_SESSIONS, 64]."),
    idle_timeout: float | None = typer.Option(None, help="Idle session timeout in s [600]."),
    max_message_bytes: int | None = typer.Option(None, help="Largest frame/body in bytes [1 MiB]."),
    step_timeout: float | None = typer.Option(None, help="Wall time of one step in s; the step is killed [2]."),
    reset_timeout: float | None = typer.Option(None, help="Wall time of one reset in s [10]."),
    memory_mb: int | None = typer.Option(None, help="Memory per session above its baseline, MB [64]."),
    temp_disk_mb: int | None = typer.Option(None, help="Largest file a session may write, MB [16]."),
    max_output_bytes: int | None = typer.Option(None, help="Observation text per step, bytes [65536]."),
    max_json_depth: int | None = typer.Option(None, help="Deepest JSON nesting of a frame or body [32]."),
    max_connections: int | None = typer.Option(None, help="Open TCP connections; more get 429 [256]."),
    header_timeout: float | None = typer.Option(None, help="Deadline for complete request headers, s [10]."),
    body_timeout: float | None = typer.Option(None, help="Longest pause inside a request body, s [10]."),
    tokenizer: str | None = typer.Option(
        None, help="HF tokenizer (local dir, hub name when online, or local:<family>): enables return_tokens."
    ),
    log_level: str = typer.Option("info", help="uvicorn log level."),
) -> None:
    """Serve an environment over OpenEnv's HTTP + WebSocket protocol."""
    from .envs import load_env
    from .server import create_app
    from .server import serve as run

    limits = _limits(
        max_sessions=max_sessions,
        idle_timeout_s=idle_timeout,
        max_message_bytes=max_message_bytes,
        step_timeout_s=step_timeout,
        reset_timeout_s=reset_timeout,
        memory_mb=memory_mb,
        temp_disk_mb=temp_disk_mb,
        max_output_bytes=max_output_bytes,
        max_json_depth=max_json_depth,
        max_connections=max_connections,
        header_timeout_s=header_timeout,
        body_timeout_s=body_timeout,
    )
    application = create_app(load_env(env), limits=limits, mode=mode, tokenizer=_load_tokenizer(tokenizer))  # type: ignore[arg-type]
    console.print(f"serving [bold]{env}[/] on http://{host}:{port}  (ws://{host}:{port}/ws)  {limits!r}")
    run(application, host=host, port=port, log_level=log_level)


def _parse_action(raw: str, field: str) -> dict[str, Any]:
    raw = raw.strip()
    if raw.startswith("{"):
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise typer.BadParameter("an action is a JSON object")
        return value
    return {field: raw}


@app.command()
def episode(
    url: str = typer.Argument(..., help="Base URL of a running server, e.g. http://127.0.0.1:8000."),
    action: list[str] = typer.Option([], "--action", "-a", help="Action as JSON or plain text (repeatable)."),
    field: str = typer.Option("message", help="Action field that plain-text actions go to (e.g. command, query)."),
    seed: int | None = typer.Option(None, help="Reset seed."),
    interactive: bool = typer.Option(False, "--interactive", "-i", help="Type actions at a prompt."),
    out: Path | None = typer.Option(None, help="Append the trajectory to this JSONL file."),
) -> None:
    """Run one episode (scripted with --action, or --interactive) and print it colored by role."""
    from .client import EnvClient, ServerError
    from .render import render_trajectory

    with EnvClient(url, writer=out) as env:
        result = env.reset(seed=seed)
        console.print(result.text, style="bright_black", end="")
        queue = list(action)
        while not result.done and (queue or interactive):
            raw = queue.pop(0) if queue else typer.prompt("action", prompt_suffix="> ")
            try:
                result = env.step(_parse_action(raw, field), action_text=raw)
            except ServerError as e:
                console.print(f"[red]{type(e).__name__}: {e}[/]")
                continue
            console.print(result.text, end="")
        assert env.trajectory is not None
        console.rule("trajectory")
        render_trajectory(env.trajectory, console)


def _demo_actions(env_name: str, seed: int) -> list[dict[str, Any]]:
    """The env's scripted demo episode (each env module exports ``demo_actions(seed)``)."""
    from .envs import ENVIRONMENTS

    module = import_module(ENVIRONMENTS[env_name].partition(":")[0])
    return list(module.demo_actions(seed))


@app.command()
def quickstart(
    env: str = typer.Argument("echo", help="Environment: echo, terminal or sql."),
    seed: int = typer.Option(0, help="Reset seed."),
    out: Path = typer.Option(Path("out/quickstart.jsonl"), help="Where the trajectory is appended."),
) -> None:
    """Start ENV as a local server process, run a scripted episode through the client, print it by role."""
    from .client import EnvClient
    from .providers import LocalProcessProvider
    from .render import render_trajectory

    actions = _demo_actions(env, seed)
    with EnvClient.from_provider(LocalProcessProvider(env), writer=out) as client:
        console.print(f"[bold]{env}[/] server at {client.base_url}")
        client.reset(seed=seed)
        for a in actions:
            if client.step(a, action_text=next(iter(a.values())) if len(a) == 1 else None).done:
                break
        assert client.trajectory is not None
        render_trajectory(client.trajectory, console)
    console.print(f"trajectory appended to {out}")


@app.command()
def show(
    file: Path = typer.Argument(..., help="Tokenized .jsonl/.parquet, or a trajectory JSONL (then give --tokenizer)."),
    html: Path | None = typer.Option(None, "--html", help="Also write an HTML rendering here."),
    tokenizer: str | None = typer.Option(None, help="Tokenizer for trajectory files (dir, hub name, local:<family>)."),
    index: int | None = typer.Option(None, help="Show only this record."),
    limit: int = typer.Option(3, help="At most this many records."),
    method: str = typer.Option("auto", help="auto | tito | offline assembly for trajectory files."),
    observation_role: str = typer.Option("tool", help="Chat role observations are rendered in."),
) -> None:
    """Show tokenized trajectories colored by role, with per-role token counts."""
    from .tokenize import show as show_tokenized

    show_tokenized(
        file,
        html_out=html,
        tokenizer=tokenizer,
        index=index,
        limit=limit,
        method=method,
        observation_role=observation_role,
        console=console,
    )


@app.command("validate-runtime")
def validate_runtime(
    env: str = typer.Argument(..., help="Environment name (echo, terminal, sql)."),
    base_image: str | None = typer.Option(None, help="Base image for the build (default: the Dockerfile's)."),
) -> None:
    """Build ENV's image and run OpenEnv's runtime graders on it with OpenEnv's hardened launcher (needs Docker)."""
    from .providers.validation import validate_runtime as run_validation

    report = run_validation(env, base_image=base_image)
    failed = False
    for r in report.results:
        status = str(getattr(r.status, "value", r.status)).lower()
        failed |= status in ("fail", "error")
        style = {"pass": "green", "fail": "red", "error": "red"}.get(status, "yellow")
        console.print(f"[{style}]{status.upper():5s}[/] {r.check_id}  {r.evidence or ''}")
    raise typer.Exit(1 if failed else 0)


def _register_demo() -> None:
    from .demo.cli import demo  # light: the demo imports torch only when it runs

    app.command("demo")(demo)


_register_demo()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
