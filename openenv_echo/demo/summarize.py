"""From runs to figures: λ chosen on validation, per-arm means with 95% intervals, the share of the start ->
direct-CE gap each arm closes, and the ECHO - GRPO differences (paired by RL seed)."""

from __future__ import annotations

from typing import Any

from .stats import gap_closed, mean_ci, paired_difference, wilson

LAMBDA_RULE = (
    "among λ > 0 whose mean validation reward at the final step is at least the λ = 0 (GRPO) run's, the lowest mean "
    "validation env CE; if none qualifies, the highest mean validation reward (then lower env CE); validation split "
    "only, means over RL seeds"
)


def _val(run: dict[str, Any]) -> dict[str, Any]:
    val: dict[str, Any] = run["evals"][-1]["val"]
    return val


def choose_lambda(runs: list[dict[str, Any]], lambdas: tuple[float, ...] | list[float]) -> dict[str, Any]:
    """``lambda_selection`` of the report: each λ's final validation figures (mean and interval over seeds), the
    rule (``LAMBDA_RULE``) and the chosen λ. Only seeds that ran every λ count. Test numbers are never read."""
    by_seed: dict[int, set[float]] = {}
    for r in runs:
        if r["arm"] != "direct_ce":
            by_seed.setdefault(r["seed"], set()).add(r["lambda"])
    sweep = {s for s, lams in by_seed.items() if set(lambdas) <= lams}
    rows: list[dict[str, Any]] = []
    for lam in lambdas:
        rs = [r for r in runs if r["arm"] != "direct_ce" and r["lambda"] == lam and r["seed"] in sweep]
        if not rs:
            raise ValueError(f"no run for λ = {lam}")
        rows.append(
            {
                "lambda": lam,
                "env_ce": mean_ci([_val(r)["env_ce"]["nats_per_token"] for r in rs]),
                "success": mean_ci([_val(r)["policy"]["success"] for r in rs]),
                "mean_reward": mean_ci([_val(r)["policy"]["mean_reward"] for r in rs]),
                "updates": mean_ci([r["updates"] for r in rs]),
                "policy_updates": mean_ci([r["policy_updates"] for r in rs]),
                "curve": [
                    {
                        "step": e["step"],
                        "env_ce": sum(r["evals"][i]["val"]["env_ce"]["nats_per_token"] for r in rs) / len(rs),
                        "success": sum(r["evals"][i]["val"]["policy"]["success"] for r in rs) / len(rs),
                    }
                    for i, e in enumerate(rs[0]["evals"])
                ],
            }
        )
    base = next(r for r in rows if r["lambda"] == 0)["mean_reward"]["mean"]
    positive = [r for r in rows if r["lambda"] > 0]
    eligible = [r for r in positive if r["mean_reward"]["mean"] >= base]
    if eligible:
        best = min(eligible, key=lambda r: (r["env_ce"]["mean"], r["lambda"]))
    else:
        best = min(positive, key=lambda r: (-r["mean_reward"]["mean"], r["env_ce"]["mean"], r["lambda"]))
    return {
        "values": list(lambdas),
        "seeds": sorted(sweep),
        "validation": rows,
        "rule": LAMBDA_RULE,
        "chosen": best["lambda"],
        "qualified": [r["lambda"] for r in eligible],
        "split": "validation",
    }


def direct_drop(start_ce: float, direct: list[float]) -> dict[str, Any]:
    """How far the direct-CE arm lowered held-out env CE from the start (per seed), and whether that drop is
    *established*: its 95% interval lies above 0 (with one seed, no interval: the drop is positive). Only an
    established drop is a gap worth taking shares of; otherwise ``gap_closed`` is not defined."""
    drop = mean_ci([start_ce - d for d in direct])
    ci = drop["ci95"]
    established = drop["mean"] > 0 if ci is None else ci[0] > 0
    return {**drop, "established": established}


CE_FIGURES = {
    "env_ce": "nats_per_token",
    "all_env_ce": "all_nats_per_token",
    "warning_env_ce": "warning_nats_per_token",
    "novel_env_ce": "novel_nats_per_token",
}
"""Held-out env CE figures of each arm: env_output tokens (the headline, what ECHO trains on), every observation-body
token (env_output + warning), warning tokens only, and env_output tokens on lines never seen in training."""


def start_of(report: dict[str, Any]) -> dict[str, Any]:
    """The start checkpoint's test figures (every arm's step 0)."""
    test: dict[str, Any] = report["start_checkpoint"]["after"]["test"]
    return test


def _arm_summary(
    seeds: list[dict[str, Any]], start: dict[str, Any], direct: list[float] | None, gap_ok: bool
) -> dict[str, Any]:
    tests = [s["final"]["test"] for s in seeds]
    out: dict[str, Any] = {}
    for name, field in CE_FIGURES.items():
        xs = [t["env_ce"][field] for t in tests]
        out[f"test_{name}"] = mean_ci(xs)
        out[f"test_{name}_change"] = mean_ci([x - start["env_ce"][field] for x in xs])  # from the shared start
    ce = out["test_env_ce"]["per_seed"]
    n_test = int(tests[0]["policy"]["episodes"])
    wins = sum(round(t["policy"]["success"] * n_test) for t in tests)
    out |= {
        "test_env_ce_per_byte": mean_ci([t["env_ce"]["nats_per_byte"] for t in tests]),
        "test_success": {
            **mean_ci([t["policy"]["success"] for t in tests]),
            "binomial_ci95": wilson(wins, n_test * len(tests)),
            "successes": wins,
            "episodes": n_test * len(tests),
        },
        "test_success_change": mean_ci([t["policy"]["success"] - start["policy"]["success"] for t in tests]),
        "test_mean_reward": mean_ci([t["policy"]["mean_reward"] for t in tests]),
        "test_mean_reward_change": mean_ci(
            [t["policy"]["mean_reward"] - start["policy"]["mean_reward"] for t in tests]
        ),
        "test_submitted": mean_ci([t["policy"]["submitted"] for t in tests]),
        "nonzero_gradient_steps": mean_ci([s["updates"] for s in seeds]),
        "steps_with_reward_variance": mean_ci([s["policy_updates"] for s in seeds]),
        "rl_steps": len(seeds[0]["train"]),
        "gap_closed": None,
    }
    if direct is not None and gap_ok:
        shares = [gap_closed(start["env_ce"]["nats_per_token"], a, d) for a, d in zip(ce, direct, strict=True)]
        if all(x is not None for x in shares):
            out["gap_closed"] = mean_ci([x for x in shares if x is not None])
    return out


def _ce_getter(field: str) -> Any:
    return lambda t: t["env_ce"][field]


def curves(arm: dict[str, Any]) -> list[dict[str, Any]]:
    """The arm's held-out (test) curve: per curve step, env CE and success with 95% intervals over seeds."""
    seeds = arm["seeds"]
    rows = []
    for i, point in enumerate(seeds[0]["test_curve"]):
        tests = [s["test_curve"][i]["test"] for s in seeds]
        rows.append(
            {
                "step": point["step"],
                "env_ce": mean_ci([t["env_ce"]["nats_per_token"] for t in tests]),
                "success": mean_ci([t["policy"]["success"] for t in tests]),
            }
        )
    return rows


def summarize(report: dict[str, Any]) -> None:
    """Adds ``summary`` (one row per arm), each arm's ``summary`` and ``curve``, and ``comparisons`` to the report."""
    start = start_of(report)
    start_ce = start["env_ce"]["nats_per_token"]
    arms = report["arms"]
    direct = [s["final"]["test"]["env_ce"]["nats_per_token"] for s in arms["direct_ce"]["seeds"]]
    drop = direct_drop(start_ce, direct)
    start_val = report["start_checkpoint"]["after"]["val"]["env_ce"]["nats_per_token"]
    for a in arms.values():
        a["summary"] = _arm_summary(a["seeds"], start, direct, drop["established"])
        a["curve"] = curves(a)
    rows = []
    for arm, a in arms.items():
        sm = a["summary"]
        rows.append(
            {
                "arm": arm,
                "label": a["label"],
                "lambda": a["lambda"],
                "test_env_ce_start": start_ce,
                "test_env_ce_final": sm["test_env_ce"]["mean"],
                "test_env_ce_ci95": sm["test_env_ce"]["ci95"],
                "test_novel_ce_start": start["env_ce"]["novel_nats_per_token"],
                "test_novel_ce_final": sm["test_novel_env_ce"]["mean"],
                "test_success_start": start["policy"]["success"],
                "test_success_final": sm["test_success"]["mean"],
                "test_success_binomial_ci95": sm["test_success"]["binomial_ci95"],
                "test_mean_reward_start": start["policy"]["mean_reward"],
                "test_mean_reward_final": sm["test_mean_reward"]["mean"],
                "gap_closed": sm.get("gap_closed"),
            }
        )
    report["summary"] = rows

    def per_seed(arm: str, f: Any) -> list[float]:
        return [f(s["final"]["test"]) for s in arms[arm]["seeds"]]

    figures: dict[str, Any] = {f"test_{name}": _ce_getter(field) for name, field in CE_FIGURES.items()}
    figures |= {
        "test_success": lambda t: t["policy"]["success"],
        "test_mean_reward": lambda t: t["policy"]["mean_reward"],
    }
    report["comparisons"] = {
        "echo_minus_grpo": {
            k: paired_difference(per_seed("grpo_echo", f), per_seed("grpo", f)) for k, f in figures.items()
        },
        "echo_minus_direct_ce": {
            k: paired_difference(per_seed("grpo_echo", f), per_seed("direct_ce", f)) for k, f in figures.items()
        },
        "direct_ce_drop": {
            **drop,
            "what": "start − direct CE on test env CE, nats/token; established when its 95% interval is above 0 "
            "(one seed: when positive); gap_closed is only defined for an established drop",
        },
        "direct_ce_drop_validation": {
            **mean_ci([start_val - _val(s)["env_ce"]["nats_per_token"] for s in arms["direct_ce"]["seeds"]]),
            "what": "start − direct CE on validation env CE at the final RL step, nats/token (the room the start "
            "leaves, measured where settings are chosen)",
        },
        "note": "paired by RL seed (same start, prompts and sampler seed); negative env CE = ECHO predicts better",
    }


def main(argv: list[str] | None = None) -> None:
    """``python -m openenv_echo.demo.summarize OUT``: re-derive the summaries, comparisons, ``summary.md`` and the
    plot of a finished run from its per-seed results in ``OUT/report.json`` (nothing is re-run or re-evaluated)."""
    import json
    import sys
    from pathlib import Path

    from .plots import plot_report
    from .tables import summary_markdown

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m openenv_echo.demo.summarize OUT_DIR")
    out = Path(args[0])
    report = json.loads((out / "report.json").read_text())
    summarize(report)
    plot_report(report, out / report["plots"][0])
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "summary.md").write_text(summary_markdown(report))


if __name__ == "__main__":
    main()
