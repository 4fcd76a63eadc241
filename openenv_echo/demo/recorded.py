"""The committed recordings a default run leans on: each env's recorded start checkpoint and its λ sweep.

A default run (``sweep_seeds = 0``) takes λ from its env's recorded sweep (pre-registered: the recording chose it on
validation over 3 sweep seeds × the λ grid; about 60 min on 2 cores) and, unless ``train_start`` is set, loads the
recorded start checkpoint (a function of the start settings, up to float rounding that can differ between machines
and grow over training; about 20 min to train), so one seed of every arm fits the reference budget. Each is used
only where the run's settings are the recording's (the same keys that decide whether a stored run is reused) and its
tokenizer is the recording's; otherwise the start is trained and a sweep must be asked for (``--sweep-seeds``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .checkpoints import load_stored, resume_key, start_key
from .config import DemoConfig

RESULTS = Path("examples/echo_world_model/results")
RESULTS_SQL = Path("examples/echo_world_model/results-sql")
RECORDINGS = {"terminal": RESULTS, "sql": RESULTS_SQL}
"""Each env's recording, relative to the repository root."""
RESULTS_ANCHORED = Path("examples/echo_world_model/results-anchored")
"""Terminal recorded with GRPO + ECHO's world term on its own AdamW and the action-KL anchor that moves with the
policy term (its own λ sweep; not a default run's recording: the default arm has neither)."""
REPO = Path(__file__).resolve().parents[2]
"""The repository this package runs from (the README's commands run from a clone: ``pip install -e .``)."""
START_NAME = "start.pt"
"""The recorded start checkpoint, beside its recording's report (the recording's ``checkpoints/start.pt``)."""


def recording(env: str) -> Path:
    """The directory of ``env``'s recording (its report may be absent)."""
    return REPO / RECORDINGS[env]


def _report(cfg: DemoConfig) -> dict[str, Any] | None:
    f = recording(cfg.env) / "report.json"
    return json.loads(f.read_text()) if f.is_file() else None


def recorded_selection(cfg: DemoConfig) -> dict[str, Any]:
    """The λ selection of ``cfg.env``'s recording, for a run that does not sweep (``sweep_seeds = 0``): the
    recording's sweep table and choice, marked as recorded, with the recording's validation line of direct CE (the
    sweep table's gap reference). Raises ``ValueError`` if there is no recording or its run settings or λ grid are
    not ``cfg``'s: a λ pre-registered for other settings, or chosen from another grid, would be a guess."""
    from .tables import validation_direct_ce

    where = RECORDINGS[cfg.env] / "report.json"
    rec = _report(cfg)
    if rec is None:
        raise ValueError(
            f"no recorded λ sweep for {cfg.env} ({where} is not in this checkout): run the sweep with --sweep-seeds 3"
        )
    recorded_cfg = DemoConfig(**rec["config"])
    same_grid = recorded_cfg.to_dict()["lambdas"] == cfg.to_dict()["lambdas"]
    if resume_key(recorded_cfg, "grpo_echo") != resume_key(cfg, "grpo_echo") or not same_grid:
        raise ValueError(
            f"the recorded λ sweep ({where}) was run under other settings than this run's, so its λ is not "
            "pre-registered for them: run the sweep with --sweep-seeds 3"
        )
    selection = dict(rec["lambda_selection"])
    selection["recorded"] = {"report": str(where), "direct_ce_validation": validation_direct_ce(rec)}
    return selection


def recorded_start(cfg: DemoConfig, tokenizer_fingerprint: str) -> tuple[dict[str, Any] | None, str]:
    """``(start, why)``: the recorded start checkpoint of ``cfg.env`` if it was trained under ``cfg``'s start
    settings with this run's tokenizer, else ``None`` and the reason it cannot stand in for training."""
    rec = _report(cfg)
    f = recording(cfg.env) / START_NAME
    if rec is None or not f.is_file():
        return None, f"no recorded start ({RECORDINGS[cfg.env] / START_NAME})"
    if rec["model"]["tokenizer"]["fingerprint"] != tokenizer_fingerprint:
        return None, "the recorded start's tokenizer is not this run's (another generic corpus)"
    start = load_stored(f, start_key(cfg))
    if start is None:
        return None, "the recorded start was trained under other start settings"
    return start, f"the recorded start ({RECORDINGS[cfg.env] / START_NAME})"
