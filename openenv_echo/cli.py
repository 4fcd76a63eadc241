"""The ``openenv-echo`` command line: serve an env, run episodes, show trajectories, run the demo.

Every failure is one line on stderr, ``error: <problem>; <fix>``, with exit code 2 (usage: a bad option, env name,
file or tokenizer) or 1 (runtime: server unreachable, action refused, server failed to start); ``--debug`` adds the
traceback. Env text is printed exactly (see ``openenv_echo.terminal_output``).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from .terminal_output import has_colour, make_console, print_segments, print_trajectory, summary_line

EXIT_CODES_HELP = """\b
Exit codes:
  0    success (an episode that ran every action, whatever its reward)
  1    runtime failure: server unreachable or lost, action refused, server failed to start, unexpected error
  2    usage error: unknown option or env name, bad value, missing file or tokenizer
  130  interrupted (Ctrl-C)

\b
Output: env text is printed exactly. On a colour terminal each role has a colour; with --plain, NO_COLOR=1,
a pipe or a file, each segment is preceded by its role label instead: ⟦context⟧ ⟦action⟧ ⟦env_output⟧
⟦warning⟧. Errors are one line on stderr: 'error: <problem>; <fix>' (--debug adds the traceback).
"""

# typer raises the exceptions of the click it is built on (recent typer vendors its own copy): take them from there
_click = sys.modules[typer.BadParameter.__module__]
ClickException, UsageError, Exit, Abort = _click.ClickException, _click.UsageError, typer.Exit, typer.Abort

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Role-tagged OpenEnv environments: serve an env, run episodes, show tokenized trajectories, run the demo.",
    epilog=EXIT_CODES_HELP,
    rich_markup_mode=None,  # help text is printed literally: "[default: 64]" and env-var names stay
    pretty_exceptions_enable=False,
)


@dataclass
class _Options:
    plain: bool = False
    debug: bool = False


_OPTS = _Options()

Plain = Annotated[
    bool, typer.Option("--plain", help="No colour: a ⟦role⟧ label before each segment (also NO_COLOR=1, pipes).")
]
Debug = Annotated[bool, typer.Option("--debug", help="Show the traceback when something fails.")]


class CliError(ClickException):  # type: ignore[misc,valid-type]
    """A runtime failure the user can act on: ``problem`` and ``fix``, exit code 1."""

    exit_code = 1

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")


def _set(plain: bool = False, debug: bool = False) -> None:
    _OPTS.plain |= plain
    _OPTS.debug |= debug


@app.callback()
def _root(plain: Plain = False, debug: Debug = False) -> None:
    _set(plain, debug)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class Mode(str, Enum):
    simulation = "simulation"
    production = "production"


class LogLevel(str, Enum):
    critical = "critical"
    error = "error"
    warning = "warning"
    info = "info"
    debug = "debug"
    trace = "trace"


class Method(str, Enum):
    auto = "auto"
    tito = "tito"
    offline = "offline"


# -- argument checks (exit 2) ----------------------------------------------------------------------------------------


def _env_name(name: str) -> str:
    """A registry name or an importable ``module:Class`` Environment subclass."""
    from .envs import ENVIRONMENTS, load_env

    if ":" not in name and name not in ENVIRONMENTS:
        raise typer.BadParameter(
            f"unknown environment {name!r}; use one of {', '.join(sorted(ENVIRONMENTS))}, or module:Class"
        )
    if ":" in name and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like uvicorn: `serve my_module:MyEnv` finds my_module.py here
    try:
        load_env(name)
    except (ImportError, AttributeError, TypeError) as e:
        raise typer.BadParameter(f"cannot load {name!r} ({_one_line(e)}); give module:Class of an Environment") from e
    return name


def _registered_env(name: str) -> str:
    from .envs import ENVIRONMENTS

    if name not in ENVIRONMENTS:
        raise typer.BadParameter(f"unknown environment {name!r}; use one of {', '.join(sorted(ENVIRONMENTS))}")
    return name


def _load_tokenizer(name: str | None, param: str = "--tokenizer") -> Any:
    if name is None:
        return None
    looks_like_path = name.startswith((".", "/", "~")) or (os.sep in name and not name.startswith("local:"))
    if looks_like_path and not Path(name).expanduser().is_dir():
        raise typer.BadParameter(
            f"{name} is not a directory; give a directory holding tokenizer.json (e.g. one saved with "
            "save_pretrained), a hub name when online, or local:qwen | local:llama | local:qwen3",
            param_hint=param,
        )
    try:
        from .tokenization import load_tokenizer
    except ImportError as e:
        raise CliError(f"tokenizers need the train extra ({e})", "pip install 'openenv-echo[train]'") from e
    try:
        return load_tokenizer(os.path.expanduser(name))
    except (OSError, ValueError) as e:
        raise typer.BadParameter(
            f"{_one_line(e)}; give a tokenizer directory, a hub name when online, or local:<family>", param_hint=param
        ) from e


def _limits(defaults: Any = None, **values: Any) -> Any:
    from pydantic import ValidationError

    from .server import ServerLimits

    try:
        return ServerLimits.from_env(defaults, **values)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise UsageError(
            f"bad server limit ({problems}); fix the flag or the OPENENV_ECHO_<FIELD> environment variable"
        ) from e


def _limit_help(field: str, flag_text: str) -> str:
    from .server.limits import ServerLimits

    default = ServerLimits.model_fields[field].default
    return f"{flag_text} (default {default}; env OPENENV_ECHO_{field.upper()})."


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise CliError(
                f"cannot listen on {host}:{port} ({e.strerror or e})",
                "pick another port with --port, or stop what is using it",
            ) from e


# -- commands --------------------------------------------------------------------------------------------------------


@app.command()
def serve(
    env: str = typer.Argument(
        ..., help="Environment name (echo, terminal, sql, shell) or module:Class.", callback=_env_name
    ),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (0.0.0.0 in containers)."),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port."),
    mode: Mode = typer.Option(Mode.simulation, help="simulation (HTTP reset/step/state too) or production (WS only)."),
    max_sessions: int | None = typer.Option(None, help=_limit_help("max_sessions", "Concurrent sessions")),
    idle_timeout: float | None = typer.Option(None, help=_limit_help("idle_timeout_s", "Idle session timeout in s")),
    max_message_bytes: int | None = typer.Option(
        None, help=_limit_help("max_message_bytes", "Largest frame/body in bytes")
    ),
    step_timeout: float | None = typer.Option(
        None, help=_limit_help("step_timeout_s", "Wall time of one step in s; over it the step is killed")
    ),
    reset_timeout: float | None = typer.Option(
        None, help=_limit_help("reset_timeout_s", "Wall time of one reset in s")
    ),
    memory_mb: int | None = typer.Option(None, help=_limit_help("memory_mb", "Memory per session above baseline, MB")),
    temp_disk_mb: int | None = typer.Option(
        None, help=_limit_help("temp_disk_mb", "Largest file a session may write, MB")
    ),
    max_output_bytes: int | None = typer.Option(
        None, help=_limit_help("max_output_bytes", "Observation text per step, bytes")
    ),
    max_json_depth: int | None = typer.Option(None, help=_limit_help("max_json_depth", "Deepest JSON nesting")),
    max_connections: int | None = typer.Option(
        None, help=_limit_help("max_connections", "Open TCP connections, at least --max-sessions; more get 429")
    ),
    header_timeout: float | None = typer.Option(
        None, help=_limit_help("header_timeout_s", "Deadline for complete request headers in s")
    ),
    body_timeout: float | None = typer.Option(
        None, help=_limit_help("body_timeout_s", "Longest pause inside a request body in s")
    ),
    tokenizer: str | None = typer.Option(
        None, help="HF tokenizer (local dir, hub name when online, or local:<family>): enables return_tokens."
    ),
    probe_port: int | None = typer.Option(
        None,
        min=1,
        max=65535,
        envvar="OPENENV_ECHO_PROBE_PORT",
        help="Also serve /health, /ready and /metrics on this port, answered under floods of the main port "
        "(point liveness/readiness probes here).",
    ),
    log_level: LogLevel = typer.Option(LogLevel.info, help="uvicorn's log level."),
    debug: Debug = False,
) -> None:
    """Serve an environment over OpenEnv's HTTP + WebSocket protocol."""
    _set(debug=debug)
    from .envs import load_env
    from .server import create_app
    from .server import serve as run

    env_cls = load_env(env)
    limits = _limits(
        env_cls.DEFAULT_LIMITS,
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
    try:
        application = create_app(env_cls, limits=limits, mode=mode.value, tokenizer=_load_tokenizer(tokenizer))
    except ValueError as e:
        raise UsageError(f"{_one_line(e)}; fix the flags") from e
    if probe_port is not None and probe_port == port:
        raise UsageError(f"--probe-port {probe_port} is the main port; give the probes a port of their own")
    _check_port_free(host, port)
    if probe_port is not None:
        _check_port_free(host, probe_port)
    out = make_console(plain=_OPTS.plain)
    probes = f"  probes on http://{host}:{probe_port}/health|ready|metrics" if probe_port is not None else ""
    out.print(f"serving {env} on http://{host}:{port}  (ws://{host}:{port}/ws){probes}  {limits!r}")
    run(application, host=host, port=port, log_level=log_level.value, probe_port=probe_port)


def _parse_action(raw: str, field: str) -> dict[str, Any]:
    raw = raw.strip()
    if raw.startswith("{"):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            raise typer.BadParameter(f"{raw!r} is not valid JSON ({e.msg}); quote it as one shell word") from e
        if not isinstance(value, dict):
            raise typer.BadParameter("an action is a JSON object")
        return value
    return {field: raw}


def _read_action() -> str | None:
    """One action line from stdin (a prompt with line editing on a terminal); None at end of input."""
    if sys.stdin.isatty():
        try:
            return input("action> ")
        except EOFError:
            print()
            return None
    line = sys.stdin.readline()
    return line.rstrip("\n") if line else None


def _unreachable(url: str, e: Exception) -> CliError:
    return CliError(
        f"cannot reach an env server at {url} ({_one_line(e)})",
        "start one with 'openenv-echo serve echo --port 8000' or check the URL",
    )


@app.command()
def episode(
    url: str = typer.Argument(..., help="Base URL of a running server, e.g. http://127.0.0.1:8000."),
    action: list[str] = typer.Option([], "--action", "-a", help="Action as JSON or plain text (repeatable)."),
    field: str = typer.Option(
        "message", help="Field that plain-text actions go to: message (echo), command (terminal), query (sql)."
    ),
    seed: int | None = typer.Option(None, help="Reset seed."),
    interactive: bool = typer.Option(False, "--interactive", "-i", help="Type actions at a prompt (EOF ends)."),
    out: Path | None = typer.Option(None, help="Append the trajectory to this JSONL file."),
    plain: Plain = False,
    debug: Debug = False,
) -> None:
    """Run one episode (scripted with --action, or --interactive) and print it by role.

    Exits 1 if the server refuses a scripted action (nothing after it is sent) or the connection is lost."""
    _set(plain, debug)
    from .client import ConnectionLostError, EnvClient, EnvTimeoutError, ServerError
    from .terminal_output import action_segment, legend

    parsed = [_parse_action(raw, field) for raw in action]  # bad JSON is a usage error before anything runs
    console, errors = make_console(plain=_OPTS.plain), make_console(plain=_OPTS.plain, stderr=True)
    with EnvClient(url, writer=out) as env:
        try:
            result = env.reset(seed=seed)
        except (ConnectionLostError, EnvTimeoutError, OSError) as e:
            raise _unreachable(url, e) from e
        except ServerError as e:
            raise CliError(f"the server refused the reset: {_one_line(e)}", "check --seed and the server's log") from e
        console.print(legend(has_colour(console)))
        print_segments(console, result.segments)
        queue = list(zip(action, parsed))
        while not result.done and (queue or interactive):
            if queue:
                raw, act = queue.pop(0)
            else:
                typed = _read_action()
                if typed is None:  # EOF / Ctrl-D ends the episode
                    break
                if not typed.strip():
                    continue
                raw = typed
                try:
                    act = _parse_action(raw, field)
                except typer.BadParameter as e:
                    errors.print(f"error: {e.format_message()}")
                    continue
            print_segments(console, [action_segment(raw, act)])
            try:
                result = env.step(act, action_text=raw)
            except ServerError as e:
                if interactive and not queue:
                    errors.print(f"error: the server refused this action: {_one_line(e)}")
                    continue
                raise CliError(
                    f"the server refused action {raw!r}: {_one_line(e)}",
                    f"fix the action (plain text goes to the {field!r} field; see --field) or send JSON",
                ) from e
            except (ConnectionLostError, EnvTimeoutError) as e:
                raise CliError(
                    f"lost the server at {url} during the episode ({_one_line(e)})", "check the server's log and rerun"
                ) from e
            print_segments(console, result.segments)
        assert env.trajectory is not None
        console.print(summary_line(env.trajectory))
        if queue:
            errors.print(f"note: the episode ended before {len(queue)} more action(s); they were not sent")


def _demo_actions(env_name: str, seed: int) -> list[dict[str, Any]]:
    """The env's scripted expert episode (each env module exports ``expert_actions(seed)``)."""
    from .envs import ENVIRONMENTS

    return ENVIRONMENTS[env_name].expert_actions(seed)


@app.command()
def quickstart(
    env: str = typer.Argument("echo", help="Environment: echo, terminal or sql.", callback=_registered_env),
    seed: int = typer.Option(0, help="Reset seed."),
    out: Path = typer.Option(Path("out/quickstart.jsonl"), help="Where the trajectory is appended."),
    plain: Plain = False,
    debug: Debug = False,
) -> None:
    """Start ENV as a local server process, run a scripted episode through the client, print it by role."""
    _set(plain, debug)
    from .client import EnvClient
    from .providers import LocalProcessProvider

    console = make_console(plain=_OPTS.plain)
    actions = _demo_actions(env, seed)
    with EnvClient.from_provider(LocalProcessProvider(env), writer=out) as client:
        console.print(f"{env} server at {client.base_url}")
        client.reset(seed=seed)
        for a in actions:
            # one plain-text field is shown as the agent's text, anything else (an empty message too) as its JSON
            text = next(iter(a.values())) if len(a) == 1 else None
            if client.step(a, action_text=text or None).done:
                break
        assert client.trajectory is not None
        print_trajectory(client.trajectory, console)
    console.print(f"trajectory appended to {out}")


@app.command()
def show(
    file: Path = typer.Argument(
        ...,
        exists=True,
        dir_okay=False,
        help="Tokenized .jsonl/.parquet, or a trajectory JSONL (then give --tokenizer).",
    ),
    html: Path | None = typer.Option(None, "--html", help="Also write an HTML rendering here."),
    tokenizer: str | None = typer.Option(None, help="Tokenizer for trajectory files (dir, hub name, local:<family>)."),
    index: int | None = typer.Option(None, help="Show only this record."),
    limit: int = typer.Option(3, min=1, help="At most this many records."),
    method: Method = typer.Option(Method.auto, help="Assembly for trajectory files."),
    observation_role: str = typer.Option("tool", help="Chat role observations are rendered in."),
    plain: Plain = False,
    debug: Debug = False,
) -> None:
    """Show tokenized trajectories by role, with per-role token counts."""
    _set(plain, debug)
    try:
        from .tokenization import show as show_tokenized
    except ImportError as e:
        raise CliError(f"show needs the train extra ({e})", "pip install 'openenv-echo[train]'") from e

    tok = _load_tokenizer(tokenizer)
    try:
        show_tokenized(
            file,
            html_out=html,
            tokenizer=tok,
            index=index,
            limit=limit,
            method=method.value,
            observation_role=observation_role,
            console=make_console(plain=_OPTS.plain),
        )
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{file} is not JSON lines ({e.msg}, line {e.lineno}); give a tokenized export or a trajectory JSONL"
        ) from e
    except (ValueError, IndexError) as e:
        text = _one_line(e).replace("tokenizer=", "--tokenizer").replace("index=", "--index")  # the API's words
        raise UsageError(text if str(file) in text else f"{file}: {text}") from e


@app.command("validate-runtime")
def validate_runtime(
    env: str = typer.Argument(..., help="Environment name (echo, terminal, sql, shell).", callback=_registered_env),
    base_image: str | None = typer.Option(None, help="Base image for the build (default: the Dockerfile's)."),
    debug: Debug = False,
) -> None:
    """Build ENV's image and run OpenEnv's runtime graders on it with OpenEnv's hardened launcher (needs Docker).

    Exits 1 if any check fails."""
    _set(debug=debug)
    from .envs import spec_of
    from .providers.validation import validate_runtime as run_validation

    console = make_console(plain=_OPTS.plain)
    report = run_validation(spec_of(env), base_image=base_image)
    failed = False
    for r in report.results:
        status = str(getattr(r.status, "value", r.status)).lower()
        failed |= status in ("fail", "error")
        console.print(f"{status.upper():5s} {r.check_id}  {r.evidence or ''}")
    if failed:
        raise CliError(f"{env}: OpenEnv runtime validation failed", "see the FAIL/ERROR lines above")


def _register_demo() -> None:
    from .demo.cli import demo  # light: the demo imports torch only when it runs

    app.command("demo")(demo)


_register_demo()


def _error_line(e: BaseException) -> tuple[str, int]:
    """(one line for stderr, exit code) for any failure."""
    from .providers import ProviderError

    if isinstance(e, UsageError):
        ctx = e.ctx
        where = f"; see '{ctx.command_path} --help'" if ctx is not None and not isinstance(e, CliError) else ""
        text = _one_line(e.format_message()).rstrip(".")
        if text[:1].isupper() and text[1:2].islower():  # click's own "No such option", "Invalid value", ...
            text = text[:1].lower() + text[1:]
        return f"error: {text}{where}", 2
    if isinstance(e, ClickException):
        return f"error: {_one_line(e.format_message())}", e.exit_code
    if isinstance(e, ProviderError):
        return f"error: {_one_line(e.message)}; rerun with --debug for the server's last log lines", 1
    if isinstance(e, KeyboardInterrupt):
        return "interrupted", 130
    text = _one_line(e) or type(e).__name__
    return f"error: unexpected {type(e).__name__}: {text}; rerun with --debug and report the traceback", 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (see ``EXIT_CODES_HELP``)."""
    command = typer.main.get_command(app)
    try:
        command.main(args=list(argv) if argv is not None else None, prog_name="openenv-echo", standalone_mode=False)
    except Exit as e:
        return e.exit_code
    except UsageError as e:  # no traceback even with --debug: the command line is the problem
        if type(e).__name__ == "NoArgsIsHelpError":  # `openenv-echo` alone shows the help, not an error
            print(e.format_message())
            return 0
        line, code = _error_line(e)
        print(line, file=sys.stderr)
        return code
    except Abort:
        print("interrupted", file=sys.stderr)
        return 130
    except (Exception, KeyboardInterrupt) as e:
        line, code = _error_line(e)
        if _OPTS.debug:
            traceback.print_exception(e)
        print(line, file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
