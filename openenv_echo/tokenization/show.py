"""``show``: look at tokenized trajectories in the terminal, colored by role, with per-role token counts.

Accepts a tokenized export (``.jsonl`` / ``.parquet`` from ``openenv_echo.tokenization.export``) or a trajectory
JSONL (``TrajectoryWriter``) plus a tokenizer; writes the same view as a standalone HTML file on request.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..roles import Role
from ..terminal_output import ROLE_STYLES, has_colour, legend, make_console, write_segments
from ..tokenizer_identity import tokenizer_fingerprint
from .tokenized import TokenizedTrajectory


def _first_record(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError(f"{path}: lines must be JSON objects")
                return obj
    raise ValueError(f"{path} is empty")


def _resolve_tokenizer(tokenizer: Any) -> Any:
    if tokenizer is None or not isinstance(tokenizer, (str, os.PathLike)):
        return tokenizer
    from .local_tokenizers import load_tokenizer

    return load_tokenizer(tokenizer)


def load_for_show(
    file: str | os.PathLike[str],
    tokenizer: Any = None,
    *,
    method: str = "auto",
    observation_role: str = "tool",
) -> tuple[list[TokenizedTrajectory], Any]:
    """Read ``file`` (tokenized export or trajectory JSONL) -> (tokenized trajectories, tokenizer)."""
    from .export import read_tokenized

    path = Path(file)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    tok = _resolve_tokenizer(tokenizer)
    if path.suffix == ".parquet" or "input_ids" in _first_record(path):
        items = read_tokenized(path)
        if tok is None:
            name = next((it.tokenizer.name for it in items if it.tokenizer is not None), None)
            if not name:
                raise ValueError(f"{path} does not name its tokenizer; pass tokenizer=")
            try:
                tok = _resolve_tokenizer(name)
            except Exception as e:
                raise ValueError(f"cannot load tokenizer {name!r} named in {path}; pass tokenizer= ({e})") from e
        fp = tokenizer_fingerprint(tok)
        for it in items:
            if it.tokenizer is not None and it.tokenizer.fingerprint != fp:
                raise ValueError(
                    f"{path} was tokenized with {it.tokenizer.name!r} (fingerprint {it.tokenizer.fingerprint[:12]}…)"
                    f" but the given tokenizer has fingerprint {fp[:12]}…"
                )
        return items, tok
    if tok is None:
        raise ValueError(f"{path} holds trajectories; pass tokenizer= (a path, hub name or local:<family>)")
    from ..trajectory import read_trajectories
    from .offline import tokenize_offline
    from .template import TemplateNotPrefixStable
    from .tito import tokenize_trajectory

    if method not in ("auto", "tito", "offline"):
        raise ValueError("method must be 'auto', 'tito' or 'offline'")
    out = []
    for traj in read_trajectories(path):
        if method == "offline":
            out.append(tokenize_offline(traj, tok, observation_role=observation_role))
            continue
        try:
            out.append(tokenize_trajectory(traj, tok, observation_role=observation_role))
        except TemplateNotPrefixStable:
            if method == "tito":
                raise
            out.append(tokenize_offline(traj, tok, observation_role=observation_role))
    return out, tok


def role_runs(tt: TokenizedTrajectory, tokenizer: Any) -> list[tuple[Role, str]]:
    """Runs of same-role tokens, each decoded together: ``(role, text)``."""
    from .fragment_encoding import fragment_codec

    codec = fragment_codec(tokenizer)
    ids, roles = tt.input_ids.tolist(), tt.role_ids.tolist()
    runs = []
    i = 0
    while i < len(ids):
        j = i
        while j < len(ids) and roles[j] == roles[i]:
            j += 1
        runs.append((Role.from_code(roles[i]), codec.decode(ids[i:j])))
        i = j
    return runs


def renderables(tt: TokenizedTrajectory, tokenizer: Any, title: str = "", colour: bool = True) -> list[Any]:
    """Header, legend, role-colored text and a counts table (the text as a rich ``Text``: for HTML export)."""
    body = Text()
    for role, text in role_runs(tt, tokenizer):
        body.append(text, style=ROLE_STYLES[role])
    counts = tt.role_counts()
    masks = tt.masks()
    table = Table(title="tokens per role", show_header=True, header_style="bold")
    for col in ("role", "tokens", "targets (mask)", "share"):
        table.add_column(col, justify="left" if col == "role" else "right")
    total = max(len(tt), 1)
    for r in Role:
        table.add_row(
            Text(r.value, style=ROLE_STYLES[r]),
            str(counts[r]),
            str(int(masks[f"{r.value}_mask"].sum())),
            f"{100 * counts[r] / total:.1f}%",
        )
    table.add_row("total", str(len(tt)), "", "")
    stats = " ".join(f"{k}={v}" for k, v in sorted(tt.stats.items()) if v)
    head = Text.assemble(
        (title + " " if title else "", "bold"),
        f"episode={tt.episode_id} method={tt.method} tokens={len(tt)} |O|={tt.obs_count} "
        f"truncated={tt.num_truncated} reward={tt.reward}",
        (f"  {stats}" if stats else "", "dim"),
    )
    return [head, legend(colour), body, table]


def show(
    file: str | os.PathLike[str],
    html_out: str | os.PathLike[str] | None = None,
    *,
    tokenizer: Any = None,
    index: int | None = None,
    limit: int = 3,
    method: str = "auto",
    observation_role: str = "tool",
    console: Console | None = None,
) -> list[TokenizedTrajectory]:
    """Print tokenized trajectories from ``file`` colored by role with per-role token counts; with
    ``html_out``, also write them as a standalone HTML page. Shows item ``index`` or the first ``limit``.
    ``tokenizer`` is a tokenizer object or a name for ``load_tokenizer`` (required for trajectory JSONL; for
    tokenized exports it defaults to the tokenizer named in the file, checked by fingerprint).
    Returns the tokenized trajectories shown."""
    items, tok = load_for_show(file, tokenizer, method=method, observation_role=observation_role)
    if index is not None:
        if not -len(items) <= index < len(items):
            raise IndexError(f"index {index} out of range: {file} has {len(items)} sequences")
        chosen = [(index % len(items), items[index])]
    else:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        chosen = list(enumerate(items))[:limit]
    console = console or make_console()
    recorder = Console(record=True, file=io.StringIO(), width=120, force_terminal=True) if html_out else None
    colour = has_colour(console)
    for k, tt in chosen:
        head, key, _, table = renderables(tt, tok, title=f"#{k}", colour=colour)
        console.print(head)
        console.print(key)
        write_segments(console, role_runs(tt, tok), end_line=True)  # the text exactly (labels per run without colour)
        console.print(table)
        if recorder is not None:
            for item in renderables(tt, tok, title=f"#{k}"):
                recorder.print(item)
    if len(chosen) < len(items):
        console.print(Text(f"({len(items) - len(chosen)} more in {file}; use index=)", style="dim"))
    if recorder is not None:
        assert html_out is not None
        Path(html_out).parent.mkdir(parents=True, exist_ok=True)
        Path(html_out).write_text(recorder.export_html(inline_styles=True, code_format=_HTML_PAGE), "utf-8")
    return [tt for _, tt in chosen]


_HTML_PAGE = """<!DOCTYPE html>
<html><head><meta charset="UTF-8"><title>openenv-echo tokens by role</title>
<style>body {{ color: {foreground}; background-color: {background}; }}
pre {{ font-family: ui-monospace, Menlo, Consolas, monospace; white-space: pre-wrap; }}</style></head>
<body><pre><code>{code}</code></pre></body></html>
"""
