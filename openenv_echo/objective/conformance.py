"""RFC 0004's conformance table: small input batches and the loss terms the reference objective gives for them.

Run ``python -m openenv_echo.objective.conformance`` for the Markdown table (as in ``rfcs/0004-echo-objective.md``)
or with ``--json`` for the machine-readable cases (as in ``rfcs/0004-conformance.json``), per-token weights
included. A test regenerates both and compares them with the committed files, so the RFC always states what the
code does. Every case is on-policy (ratio 1, no clipping, no KL): the policy term is ``-Σ A_i·u_{i,t}``.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ..roles import PAD_ROLE_CODE, Role
from ._batch import EchoBatch
from ._config import EchoConfig
from ._loss import echo_loss, token_weights

_LETTERS = {"C": Role.CONTEXT.code, "A": Role.ACTION.code, "E": Role.ENV_OUTPUT.code, "W": Role.WARNING.code}
_LETTERS["."] = PAD_ROLE_CODE


@dataclass(frozen=True)
class Case:
    """One input batch: rows of role letters (C context, A action, E env_output, W warning, . padding)."""

    name: str
    rows: tuple[str, ...]
    advantages: tuple[float, ...]
    config: dict[str, Any]
    obs_count: tuple[int, ...] | None = None
    verifier_free: tuple[bool, ...] | None = None
    includes_sequence_start: bool = True
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def logp(i: int, t: int) -> float:
    """The log-prob of token t of row i in every case: ``-0.25 · (1 + (i + t) mod 4)``."""
    return -0.25 * (1 + (i + t) % 4)


MULTI_TURN = ("CCEAACEECWEA", "CACWWCA")
CASES: tuple[Case, ...] = (
    Case("env_only", MULTI_TURN, (1.0, -1.0), {"world_model_coeff": 0.05}, note="the reset E (pos 2) is no target"),
    Case("coeff_zero", MULTI_TURN, (1.0, -1.0), {}, note="λ = 0: L is the policy term; the CE is still reported"),
    Case(
        "warning_plus_env",
        MULTI_TURN,
        (1.0, -1.0),
        {"world_model_coeff": 0.05, "world_loss_target": "warning_plus_env"},
        note="OpenEnv RFC 010's `all`",
    ),
    Case(
        "full_observation",
        MULTI_TURN,
        (1.0, -1.0),
        {"world_model_coeff": 0.05, "world_loss_target": "full_observation"},
        note="scaffold C after the first action too",
    ),
    Case(
        "sequence_mean_selected",
        MULTI_TURN,
        (1.0, -1.0),
        {"world_model_coeff": 0.05, "normalization": "sequence_mean"},
        note="row 1 has no E: n_1 = 0, no world term",
    ),
    Case(
        "sequence_mean_full_observation",
        ("CCEAACEECWEA", "CACWWCA", "CAAC"),
        (1.0, -1.0, 0.0),
        {"world_model_coeff": 0.05, "normalization": "sequence_mean", "sequence_denominator": "full_observation"},
        note="the paper's |O_i|; row 2 has |O_i| = 0",
    ),
    Case(
        "full_observation_truncated",
        MULTI_TURN,
        (1.0, -1.0),
        {"world_model_coeff": 0.05, "normalization": "sequence_mean", "sequence_denominator": "full_observation"},
        obs_count=(10, 3),
        note="|O_i| counted before truncation (collate's obs_count)",
    ),
    Case(
        "constant",
        MULTI_TURN,
        (1.0, -1.0),
        {"world_model_coeff": 0.05, "normalization": "constant", "constant_denominator": 8},
    ),
    Case(
        "role_coeffs",
        MULTI_TURN,
        (1.0, -1.0),
        {"world_model_coeff": 0.05, "world_loss_target": "warning_plus_env", "role_coeffs": {"warning": 0.5}},
    ),
    Case(
        "role_coeff_zero",
        MULTI_TURN,
        (1.0, -1.0),
        {"world_model_coeff": 0.05, "world_loss_target": "warning_plus_env", "role_coeffs": {"warning": 0.0}},
        note="coefficient 0: W not selected, not counted",
    ),
    Case(
        "verifier_free_row",
        MULTI_TURN,
        (1.0, -1.0),
        {"world_model_coeff": 0.05},
        verifier_free=(False, True),
        note="row 1: env term only",
    ),
    Case(
        "left_padded",
        ("..ACEEA", "CAAWECA"),
        (0.5, -0.5),
        {"world_model_coeff": 0.05},
        note="first real token never a target",
    ),
    Case(
        "completion_slice",
        ("AAEECA", "ACWEEA"),
        (0.5, -0.5),
        {"world_model_coeff": 0.05},
        includes_sequence_start=False,
        note="TRL/SkyRL completions: token 0 is a target",
    ),
    Case("no_observation", ("CAACA", "CAA"), (1.0, -1.0), {"world_model_coeff": 0.05}, note="empty selection"),
)


def _role_ids(rows: tuple[str, ...]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([[_LETTERS[c] for c in r.ljust(width, ".")] for r in rows], dtype=torch.long)


def _round(x: float) -> float | None:
    return None if math.isnan(x) else float(f"{x:.7g}") + 0.0  # float32 metric precision; + 0.0: no "-0"


def evaluate(case: Case) -> dict[str, Any]:
    """The inputs and expected outputs of one case (floats to 7 significant digits; NaN as null)."""
    rid = _role_ids(case.rows)
    b, t = rid.shape
    lp = torch.tensor([[logp(i, j) for j in range(t)] for i in range(b)], dtype=torch.float64)
    batch = EchoBatch(
        rid,
        advantages=torch.tensor(case.advantages, dtype=torch.float64),
        obs_count=None if case.obs_count is None else torch.tensor(case.obs_count, dtype=torch.float64),
        verifier_free=None if case.verifier_free is None else torch.tensor(case.verifier_free),
        includes_sequence_start=case.includes_sequence_start,
    )
    cfg = EchoConfig(**case.config)
    out = echo_loss(lp, batch, cfg)
    tw = token_weights(batch, cfg)
    m = out.metrics_as_floats()
    world_w = tw.world.tolist()
    return {
        "name": case.name,
        "note": case.note,
        "inputs": {
            "rows": list(case.rows),
            "advantages": list(case.advantages),
            "config": case.config,
            "obs_count": None if case.obs_count is None else list(case.obs_count),
            "verifier_free": None if case.verifier_free is None else list(case.verifier_free),
            "includes_sequence_start": case.includes_sequence_start,
            "logp": "-0.25 * (1 + (i + t) % 4)",
        },
        "expected": {
            "obs_count": [int(x) for x in (batch.obs_count if batch.obs_count is not None else _obs(rid)).tolist()],
            "selected_per_row": [int(x) for x in tw.world_mask.sum(dim=1).tolist()],
            "policy_loss": _round(m["echo/policy_loss"]),
            "world_loss": _round(m["echo/world_loss"]),
            "loss": _round(m["echo/loss"]),
            "env_ce_per_token": _round(m["echo/env_ce_per_token"]),
            "policy_weights": [[_round(v) for v in row] for row in tw.policy.tolist()],
            "world_weights": [[_round(v) for v in row] for row in world_w],
        },
    }


def _obs(rid: torch.Tensor) -> torch.Tensor:
    from ..roles import observation_count

    return observation_count(rid)


def _fmt(x: float | None) -> str:
    return "NaN" if x is None else f"{x:.6g}"


def markdown(results: list[dict[str, Any]]) -> str:
    """The table of RFC 0004 §9."""
    lines = [
        "| case | config (besides defaults) | rows | A | \\|O_i\\| | n_i | L_policy | λ·L_world | L | env CE/token |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        i, e = r["inputs"], r["expected"]
        cfg = ", ".join(f"{k}={v}" for k, v in i["config"].items()) or "λ=0"
        extra = []
        if i["obs_count"] is not None:
            extra.append(f"obs_count={i['obs_count']}")
        if i["verifier_free"] is not None:
            extra.append(f"verifier_free={i['verifier_free']}")
        if not i["includes_sequence_start"]:
            extra.append("includes_sequence_start=False")
        cfg = "; ".join([cfg, *extra])
        rows = "<br>".join(f"`{row}`" for row in i["rows"])
        lines.append(
            f"| {r['name']} | {cfg} | {rows} | {i['advantages']} | {e['obs_count']} | {e['selected_per_row']} | "
            f"{_fmt(e['policy_loss'])} | {_fmt(e['world_loss'])} | {_fmt(e['loss'])} | {_fmt(e['env_ce_per_token'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the cases as JSON (per-token weights included)")
    args = parser.parse_args(argv)
    results = [evaluate(c) for c in CASES]
    if args.json:
        print(json.dumps({"logp": "-0.25 * (1 + (i + t) % 4)", "cases": results}, indent=1, ensure_ascii=False))
    else:
        print(markdown(results), end="")


if __name__ == "__main__":
    main()
