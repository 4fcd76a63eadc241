"""RFC 0004's conformance table is what the code computes, and its figures are the hand-checkable formulas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from openenv_echo.objective.conformance import CASES, evaluate, logp, markdown

RFCS = Path(__file__).resolve().parents[2] / "rfcs"


def test_rfc_table_and_json_are_generated_by_the_code() -> None:
    results = [evaluate(c) for c in CASES]
    text = (RFCS / "0004-echo-objective.md").read_text(encoding="utf-8")
    begin, end = "<!-- conformance:begin -->\n", "<!-- conformance:end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    assert table == markdown(results), "regenerate the table: python -m openenv_echo.objective.conformance"
    committed = json.loads((RFCS / "0004-conformance.json").read_text(encoding="utf-8"))
    assert committed["cases"] == json.loads(json.dumps(results))
    cli = subprocess.run(
        [sys.executable, "-m", "openenv_echo.objective.conformance", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(cli.stdout) == committed


def _case(name: str) -> dict:
    return evaluate(next(c for c in CASES if c.name == name))["expected"]


def test_env_only_case_by_hand() -> None:
    # row 0 `CCEAACEECWEA`: targets E at 6, 7, 10 (the reset E at 2 precedes the first action); row 1 has none
    nll = [-logp(0, t) for t in (6, 7, 10)]
    e = _case("env_only")
    assert e["selected_per_row"] == [3, 0] and e["obs_count"] == [4, 2]
    assert e["env_ce_per_token"] == pytest.approx(sum(nll) / 3)
    assert e["world_loss"] == pytest.approx(0.05 * sum(nll) / 3)
    assert e["policy_loss"] == pytest.approx(-(1.0 * 3 - 1.0 * 2) / 5)  # A_i · n_act_i / N_act, on-policy
    assert e["world_weights"][0][6] == pytest.approx(0.05 / 3) and e["world_weights"][0][2] == 0.0


def test_semantics_stated_by_the_rfc() -> None:
    zero = _case("coeff_zero")
    assert zero["world_loss"] == 0.0 and zero["loss"] == zero["policy_loss"] and zero["env_ce_per_token"] > 0
    assert _case("role_coeff_zero") == {**_case("env_only")}  # coefficient 0 = not selected
    assert _case("sequence_mean_full_observation")["world_weights"][2] == [0.0] * 12  # |O_i| = 0: no world term
    paper = _case("full_observation_truncated")  # the pre-truncation |O_i| divides
    assert paper["world_loss"] == pytest.approx(0.05 * sum(-logp(0, t) for t in (6, 7, 10)) / 10 / 2)
    empty = _case("no_observation")
    assert empty["world_loss"] == 0.0 and empty["env_ce_per_token"] is None  # NaN: no data
    assert _case("completion_slice")["policy_weights"][0][0] > 0  # a completion's first token is a target
    left = _case("left_padded")["policy_weights"][0]
    assert left[2] == 0.0 and left[6] > 0  # the first real token after left padding (an action) is not a target
