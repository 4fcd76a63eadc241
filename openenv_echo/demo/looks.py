"""What every later look at a recording's test worlds shares (``second_lambda``, ``whole_split``): its command line
(the recording, the λ fixed before the run, where its runs train, its plan) and its record, joined by λ (and budget)
into a file beside the recording's report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .recorded import REPO, recording


def look_parser(module: str, doc: str, lam_help: str) -> argparse.ArgumentParser:
    """The look's command line: ``--env``/``--report`` (the recording), ``--lam``, ``--out``, ``--plan`` and
    ``--workers``; the look adds its own options."""
    ap = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n")[0])
    ap.add_argument("--env", default="terminal", help="whose recording [terminal]")
    ap.add_argument("--report", type=Path, help="the recording's report.json [the env's committed recording]")
    ap.add_argument("--lam", type=float, required=True, help=lam_help)
    ap.add_argument("--out", type=Path, required=True, help="where its runs train (resumed if stored there)")
    ap.add_argument("--plan", required=True, help="the λ, why, and how its figures will be read (fixed before)")
    ap.add_argument("--workers", type=int, help="RL runs trained at once, one process each [the recording's]")
    return ap


def recording_report(ap: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """The recording's report the command line names (``--report``, else ``--env``'s committed recording)."""
    f: Path = args.report or recording(args.env) / "report.json"
    if not f.is_file():
        ap.error(f"no recording at {f}")
    return f


def join_record(into: Path, key: str, record: dict[str, Any]) -> None:
    """Write ``record`` into the file ``into`` (beside the recording's report) under ``key`` (its λ, and its budget
    where that is not the recording's), keeping the others."""
    records = json.loads(into.read_text()) if into.is_file() else {}
    records[key] = record
    into.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")


def shown(path: Path) -> str:
    """``path`` as a record names it: relative to the repository where it lies in it (no machine's paths)."""
    full = path.resolve()
    return str(full.relative_to(REPO)) if full.is_relative_to(REPO) else str(path)
