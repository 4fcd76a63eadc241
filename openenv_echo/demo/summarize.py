"""From runs to figures: λ chosen on validation, each arm's held-out figures with paired worlds × seeds bootstrap
intervals (the start evaluated on the same worlds the same way), the share of the start -> direct-CE gap GRPO +
ECHO closes, whether direct CE flattened, the issue's targets, and ``verdict.json``."""

from __future__ import annotations

from typing import Any

from .config import SPLITS, Seeds
from .envs import DEMO_ENVS
from .stats import Cells, bootstrap, bootstrap_se, mean_ci

SUCCESS_MARGIN = 0.05
"""The policy-cost margin: ECHO − GRPO success must stay above −0.05 (the λ rule's non-inferiority margin too)."""

LAMBDA_RULE = (
    "among λ > 0 whose mean greedy validation success at the final RL step (mean over the sweep seeds) is at least "
    f"GRPO's (λ = 0) minus {SUCCESS_MARGIN:g}, the smallest λ whose mean validation env CE is within one standard "
    "error of the lowest (the one-standard-error rule, as glmnet's lambda.1se: the weakest world term that does as "
    "well as the best within the noise of its measurement; the standard error of the lowest from the bootstrap over "
    "validation worlds × sweep seeds); if none qualifies, the highest mean validation success (then the lower env "
    "CE); validation split only"
)
FLAT_RULE = (
    "direct CE has flattened when its mean validation env CE fell by less than 10 % of its total fall from the start "
    "over the last quarter of the RL steps (from the last curve point at or before 3/4 of the steps to the end)"
)
FLAT_SHARE = 0.10
CE_PARTS = {
    "env_ce": "env_output",
    "warning_env_ce": "warning",
    "novel_env_ce": "novel",
    "novel_structural_env_ce": "novel_structural",
}
"""Held-out env CE figures: env_output tokens (the headline, what ECHO trains on), warning tokens, env_output tokens
on lines never seen verbatim in training, and on lines whose structure was never seen in training."""
SUCCESS_DESIGNS: tuple[tuple[float | None, float], ...] = ((1, 0), (0, 1), (None, 1), (1, 2), (None, 2))
"""(test worlds, RL seeds) draws of a success difference's bootstrap besides the recording's own (1, 1), as multiples
of the recorded counts (``stats.bootstrap``'s ``draw``): the world draw alone and the seed draw alone (each source's
part of the interval), then every world of the test split (None), twice the seeds and both: what a recording that
size would make of the same figures."""


def _val(run: dict[str, Any]) -> dict[str, Any]:
    last: dict[str, Any] = run["evals"][-1]
    return last


def choose_lambda(
    runs: list[dict[str, Any]],
    lambdas: tuple[float, ...] | list[float],
    sweep_seeds: list[int],
    val_tokens: list[float],
) -> dict[str, Any]:
    """``lambda_selection`` of the report: each λ's final validation figures over the sweep seeds (mean and
    t interval; env CE's bootstrap standard error over validation worlds × sweep seeds, ``val_tokens`` being each
    validation world's env_output token count), the rule (``LAMBDA_RULE``), the chosen λ and whether it is interior
    (a larger λ was swept and rejected). Test numbers are never read."""
    rows: list[dict[str, Any]] = []
    for lam in lambdas:
        rs = sorted(
            (r for r in runs if r["arm"] != "direct_ce" and r["lambda"] == lam and r["seed"] in sweep_seeds),
            key=lambda r: r["seed"],
        )
        if [r["seed"] for r in rs] != sorted(sweep_seeds):
            raise ValueError(f"λ = {lam:g} has not run on every sweep seed")
        ce = Cells.of([_val(r)["val_env_ce"]["per_world_nats"]["env_output"] for r in rs], val_tokens)
        rows.append(
            {
                "lambda": lam,
                "env_ce": mean_ci([_val(r)["val_env_ce"]["nats_per_token"] for r in rs]),
                "env_ce_se": bootstrap_se(lambda f: f["ce"], {"ce": ce}),
                "success": mean_ci([_val(r)["val_policy"]["success"] for r in rs]),
                "mean_reward": mean_ci([_val(r)["val_policy"]["mean_reward"] for r in rs]),
                "submitted": mean_ci([_val(r)["val_policy"]["submitted"] for r in rs]),
                "policy_updates": mean_ci([r["policy_updates"] for r in rs]),
                "curve": [
                    {
                        "step": e["step"],
                        "env_ce": sum(r["evals"][i]["val_env_ce"]["nats_per_token"] for r in rs) / len(rs),
                    }
                    for i, e in enumerate(rs[0]["evals"])
                ],
            }
        )
    base = next(r for r in rows if r["lambda"] == 0)["success"]["mean"]
    positive = [r for r in rows if r["lambda"] > 0]
    eligible = [r for r in positive if r["success"]["mean"] >= base - SUCCESS_MARGIN - 1e-12]
    within: list[float] = []
    if eligible:
        lowest = min(eligible, key=lambda r: (r["env_ce"]["mean"], r["lambda"]))
        bound = lowest["env_ce"]["mean"] + lowest["env_ce_se"]
        within = sorted(r["lambda"] for r in eligible if r["env_ce"]["mean"] <= bound + 1e-12)
        chosen = within[0]
    else:
        chosen = min(positive, key=lambda r: (-r["success"]["mean"], r["env_ce"]["mean"], r["lambda"]))["lambda"]
    return {
        "values": list(lambdas),
        "seeds": sorted(sweep_seeds),
        "validation": rows,
        "rule": LAMBDA_RULE,
        "chosen": chosen,
        "qualified": [r["lambda"] for r in eligible],
        "within_one_se": within,
        "interior": any(x > chosen for x in lambdas),
        "split": "validation",
    }


# -- held-out figures ---------------------------------------------------------------------------------------
def _success(test: dict[str, Any]) -> list[float]:
    return [1.0 if r >= 1.0 else 0.0 for r in test["policy"]["per_world_reward"]]


def _reward(test: dict[str, Any]) -> list[float]:
    return [float(r) for r in test["policy"]["per_world_reward"]]


def cells(report: dict[str, Any], tests: list[dict[str, Any]] | dict[str, Any], figure: str) -> Cells:
    """The (seed, world) cells of one figure of test evaluations (a list: one per seed; a dict: one evaluation,
    the start): ``success``, ``mean_reward`` or one of ``CE_PARTS``."""
    many = tests if isinstance(tests, list) else [tests]
    if figure == "success":
        return Cells.of([_success(t) for t in many])
    if figure == "mean_reward":
        return Cells.of([_reward(t) for t in many])
    part = CE_PARTS[figure]
    den = report["data"]["env_ce_sets"]["test"]["per_world_tokens"][part]
    return Cells.of([t["env_ce"]["per_world_nats"][part] for t in many], den)


def _finals(arm: dict[str, Any]) -> list[dict[str, Any]]:
    return [s["final"]["test"] for s in sorted(arm["seeds"], key=lambda s: s["seed"])]


def start_of(report: dict[str, Any]) -> dict[str, Any]:
    """The start checkpoint's test evaluation (every arm's step 0)."""
    test: dict[str, Any] = report["start_checkpoint"]["after"]["test"]
    return test


def _diff(a: Cells, b: Cells, draw: tuple[float, float] = (1, 1)) -> list[float]:
    return bootstrap(lambda f: f["a"] - f["b"], {"a": a, "b": b}, draw=draw)


def _one(a: Cells) -> list[float]:
    return bootstrap(lambda f: f["a"], {"a": a})


def gap_share(start: Cells, arm: Cells, direct: Cells) -> list[float] | None:
    """``(start − arm) / (start − direct CE)`` of held-out env CE, with its paired bootstrap interval; ``None``
    when direct CE did not lower env CE from the start (no gap to take a share of)."""
    if start.point() - direct.point() <= 0:
        return None
    return bootstrap(lambda f: (f["s"] - f["a"]) / (f["s"] - f["d"]), {"s": start, "a": arm, "d": direct})


def _arm_summary(report: dict[str, Any], arm: dict[str, Any]) -> dict[str, Any]:
    start = start_of(report)
    finals = _finals(arm)
    out: dict[str, Any] = {"rl_steps": len(arm["seeds"][0]["train"]), "seeds": [s["seed"] for s in arm["seeds"]]}
    for fig in (*CE_PARTS, "success", "mean_reward"):
        a, s = cells(report, finals, fig), cells(report, start, fig)
        out[fig] = _one(a)
        out[f"{fig}_vs_start"] = _diff(a, s)
    out["submitted"] = mean_ci([t["policy"]["submitted"] for t in finals])
    out["steps_with_reward_variance"] = mean_ci([s["policy_updates"] for s in arm["seeds"]])
    out["nonzero_gradient_steps"] = mean_ci([s["updates"] for s in arm["seeds"]])
    return out


def curves(report: dict[str, Any], arm: dict[str, Any]) -> list[dict[str, Any]]:
    """The arm's held-out (test) curve: per curve step, env CE (and success where evaluated) with bootstrap
    intervals."""
    seeds = sorted(arm["seeds"], key=lambda s: s["seed"])
    rows = []
    for i, point in enumerate(seeds[0]["test_curve"]):
        tests = [s["test_curve"][i]["test"] for s in seeds]
        row = {"step": point["step"], "env_ce": _one(cells(report, tests, "env_ce"))}
        if "policy" in tests[0]:  # success is evaluated at the start and the final step
            row["success"] = _one(cells(report, tests, "success"))
        rows.append(row)
    return rows


def _kinds_of_worlds(env_name: str, kinds: tuple[str, ...], seeds: list[int]) -> list[str]:
    """The task kind of each world seed (the env's reset option); [] when drawn from the env's own distribution."""
    env = DEMO_ENVS[env_name]
    return [str(env.reset_options(s, kinds)[env.kind_option]) for s in seeds] if kinds else []


def kinds_of_test_worlds(report: dict[str, Any]) -> list[str]:
    """The task kind of each test world; [] when the run drew from the env's own distribution, whose kinds the
    report does not name."""
    return _kinds_of_worlds(report["config"]["env"], tuple(report["config"]["task_kinds"]), report["seeds"]["test"])


def kinds_of_val_worlds(start_key: dict[str, Any]) -> list[str]:
    """The task kind of each validation world of a start (its ``start_key`` names the env, the kinds and the split
    sizes); [] where the start drew from the env's own distribution."""
    seeds = Seeds.make(start_key["n_train"], start_key["n_val"], start_key["n_test"]).val
    return _kinds_of_worlds(start_key["env"], tuple(start_key["task_kinds"]), seeds)


def success_by_kind(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Held-out success per task kind: the start's, and each arm's change from it (paired bootstrap over that
    kind's test worlds × RL seeds). Where RL gains or loses, and which kinds no arm ever solves."""
    kinds = kinds_of_test_worlds(report)
    start = _success(start_of(report))
    finals = {arm: [_success(t) for t in _finals(a)] for arm, a in report["arms"].items()}
    rows = []
    for kind in dict.fromkeys(kinds):
        idx = [i for i, k in enumerate(kinds) if k == kind]
        s = Cells.of([[start[i] for i in idx]])
        row: dict[str, Any] = {"kind": kind, "worlds": len(idx), "start": _one(s)}
        for arm, per_seed in finals.items():
            row[f"{arm}_vs_start"] = _diff(Cells.of([[w[i] for i in idx] for w in per_seed]), s)
        rows.append(row)
    return rows


def flattening(direct: dict[str, Any], rl_steps: int) -> dict[str, Any]:
    """Whether direct CE's validation env CE curve (mean over its seeds) has flattened (``FLAT_RULE``)."""
    seeds = direct["seeds"]
    steps = [e["step"] for e in seeds[0]["evals"]]
    mean = [sum(s["evals"][i]["val_env_ce"]["nats_per_token"] for s in seeds) / len(seeds) for i in range(len(steps))]
    late = max(i for i, st in enumerate(steps) if st <= 0.75 * rl_steps)
    total, last = mean[0] - mean[-1], mean[late] - mean[-1]
    return {
        "rule": FLAT_RULE,
        "validation_curve": [{"step": st, "env_ce": m} for st, m in zip(steps, mean, strict=True)],
        "from_step": steps[late],
        "total_fall": total,
        "last_quarter_fall": last,
        "flattened": bool(total > 0 and last < FLAT_SHARE * total),
    }


def summarize(report: dict[str, Any]) -> None:
    """Adds each arm's ``summary`` and ``curve``, ``comparisons`` and ``targets`` to the report."""
    arms = report["arms"]
    start = start_of(report)
    for a in arms.values():
        a["summary"] = _arm_summary(report, a)
        a["curve"] = curves(report, a)
    s_ce = cells(report, start, "env_ce")
    d_ce = cells(report, _finals(arms["direct_ce"]), "env_ce")
    for name in ("grpo", "grpo_echo"):
        arms[name]["summary"]["gap_closed"] = gap_share(s_ce, cells(report, _finals(arms[name]), "env_ce"), d_ce)
    echo, grpo = _finals(arms["grpo_echo"]), _finals(arms["grpo"])
    report["comparisons"] = {
        "echo_minus_grpo": {
            fig: _diff(cells(report, echo, fig), cells(report, grpo, fig))
            for fig in (*CE_PARTS, "success", "mean_reward")
        },
        "direct_ce_drop": _diff(s_ce, d_ce),
        "direct_ce_flattening": flattening(arms["direct_ce"], arms["direct_ce"]["summary"]["rl_steps"]),
        "success_design": {
            "echo_minus_grpo": success_design(cells(report, echo, "success"), cells(report, grpo, "success")),
            "grpo_vs_start": success_design(cells(report, grpo, "success"), cells(report, start, "success")),
        },
        "start": {fig: _one(cells(report, start, fig)) for fig in (*CE_PARTS, "success", "mean_reward")},
        "success_by_kind": success_by_kind(report),
        "note": "[point, 2.5 %, 97.5 %] of a percentile bootstrap over test worlds × RL seeds, paired by world and "
        "seed; the start is one evaluation on the same worlds (world draws only); negative env CE = better",
    }
    report["targets"] = targets(report)


def success_design(a: Cells, b: Cells) -> list[dict[str, Any]]:
    """Success ``a − b`` (ECHO − GRPO: the policy cost; GRPO − the start: what RL buys) under each of
    ``SUCCESS_DESIGNS``' draws: where its interval's width comes from, and how far a larger recording would narrow
    it if the point held (a planning figure, not a result)."""
    every = len(SPLITS["test"]) / a.num.shape[1]
    draws = [(every if w is None else w, s) for w, s in SUCCESS_DESIGNS]
    return [{"draw": [w, s], "success": _diff(a, b, draw=(w, s))} for w, s in draws]


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the figure that decides it and whether it is met."""
    a = report["arms"]
    b = report["baselines"]
    c = report["comparisons"]
    start_val = report["start_checkpoint"]["after"]["val"]["policy"]["success"]
    echo, grpo = a["grpo_echo"]["summary"], a["grpo"]["summary"]
    rows = [
        ("the start predicts held-out env text better than a uniform guess", b["start"] < b["uniform"]),
        ("the start solves 20-60 % of validation worlds", 0.2 <= start_val <= 0.6),
        ("GRPO raises held-out success over the start (interval above 0)", grpo["success_vs_start"][1] > 0),
        ("GRPO + ECHO's held-out env CE is below the unigram reference", echo["env_ce"][0] < b["unigram"]),
        (
            "GRPO + ECHO closes at least half of the start -> direct-CE gap",
            echo["gap_closed"] is not None and echo["gap_closed"][0] >= 0.5,
        ),
        ("direct CE's curve has flattened", c["direct_ce_flattening"]["flattened"]),
        (
            f"ECHO − GRPO success interval's lower end >= −{SUCCESS_MARGIN:g}",
            c["echo_minus_grpo"]["success"][1] >= -SUCCESS_MARGIN,
        ),
        ("the chosen λ is interior to its grid", report["lambda_selection"]["interior"]),
    ]
    return [{"target": t, "met": bool(m)} for t, m in rows]


def second_lambda(report: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """GRPO + ECHO at a second λ (``record``: its runs on the recording's arm seeds, ``openenv_echo.demo.
    second_lambda``) judged as the recording judges its chosen λ: the recording with that arm's runs swapped for the
    record's, summarized; its GRPO, direct-CE runs and start are the recording's, so every comparison stays paired by
    world and seed. Returns its plan, GRPO + ECHO's held-out figures, ECHO − GRPO and the targets about GRPO + ECHO."""
    arms = {name: dict(arm) for name, arm in report["arms"].items()}  # summarize writes into each arm
    arms["grpo_echo"].update({"lambda": record["lambda"], "seeds": record["seeds"]})
    other = {**report, "arms": arms}
    summarize(other)
    echo, diff = arms["grpo_echo"]["summary"], other["comparisons"]["echo_minus_grpo"]
    return {
        "lambda": record["lambda"],
        "plan": record.get("plan"),
        "registered": record.get("registered"),
        "seeds": echo["seeds"],
        **{k: echo[k] for k in ("env_ce", "gap_closed", "success", "success_vs_start")},
        "echo_minus_grpo": {k: diff[k] for k in ("env_ce", "novel_structural_env_ce", "success")},
        "success_design": other["comparisons"]["success_design"]["echo_minus_grpo"],
        "targets": [t for t in other["targets"] if "ECHO" in t["target"]],
    }


def verdict(report: dict[str, Any]) -> dict[str, Any]:
    """``verdict.json``: the answer in the issue's fixed schema (intervals ``[mean, lo, hi]``, env CE in nats/token
    on held-out env_output targets)."""
    a = {k: v["summary"] for k, v in report["arms"].items()}
    b = report["baselines"]
    sel = report["lambda_selection"]
    diff = report["comparisons"]["echo_minus_grpo"]
    return {
        "complete": bool(report["status"]["complete"]),
        "seeds": report["status"]["rl_seeds_done"],
        "lambda_rule": {"sweep_seeds": len(sel["seeds"]), "grid": sel["values"], "chosen": sel["chosen"]},
        "references": {k: b[k] for k in ("uniform", "unigram", "bigram", "trigram", "fourgram")},
        "start": {
            "env_ce": b["start"],
            "success": report["comparisons"]["start"]["success"],
        },
        "arms": {
            "grpo": {k: a["grpo"][k] for k in ("env_ce", "success", "success_vs_start")},
            "grpo_echo": {k: a["grpo_echo"][k] for k in ("env_ce", "success", "success_vs_start", "gap_closed")},
            "direct_ce": {k: a["direct_ce"][k] for k in ("env_ce", "success_vs_start")},
        },
        "echo_minus_grpo": {
            "env_ce": diff["env_ce"],
            "env_ce_novel_structural": diff["novel_structural_env_ce"],
            "success": diff["success"],
        },
    }


WHOLE_SPLIT_TARGETS = (
    "GRPO raises",
    "GRPO + ECHO's held-out env CE is below",
    "GRPO + ECHO closes",
    "direct CE's curve has flattened",
    "ECHO − GRPO success",
)
"""The targets a whole-split record decides (by how their targets' text begins): RL's gain, the unigram line, half
the gap, direct CE's flattening (from its runs' validation curves, at the record's budget) and the policy cost."""


def whole_split(report: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """A whole-split record (``openenv_echo.demo.whole_split``: the three arms at a pre-registered λ on the
    recording's RL seeds, evaluated with the start on the test split's first worlds) judged as the recording judges
    its own arms: the recording with its test worlds, references, start evaluation and arms swapped for the record's,
    summarized on every world of the record (``every``) and, apart, on the worlds past the recording's own, which no
    look had seen when the plan was fixed (``fresh``). Returns the plan, the RL steps, both looks and how far the
    start's evaluation and each retrained arm's are from the recording's on the recording's worlds. Each look carries
    its ``verdict`` in ``verdict.json``'s schema, its λ the plan's (``sweep_seeds`` 0) and its start read on its
    worlds."""
    worlds, seen = len(record["test_seeds"]), record["recorded_test_worlds"]
    return {
        "lambda": record["lambda"],
        "plan": record["plan"],
        "registered": record["registered"],
        "seeds": [r["seed"] for r in record["arms"]["grpo"]],
        "rl_steps": len(record["arms"]["grpo"][0]["train"]),
        "unigram": record["baselines"]["unigram"],
        "agreement": record["agreement"],
        "every": _look(report, record, slice(0, worlds)),
        "fresh": _look(report, record, slice(seen, worlds)),
    }


def _look(report: dict[str, Any], record: dict[str, Any], keep: slice) -> dict[str, Any]:
    """``whole_split``'s figures on the record's test worlds ``keep``."""

    def on(test: dict[str, Any]) -> dict[str, Any]:
        nats = {k: v[keep] for k, v in test["env_ce"]["per_world_nats"].items()}
        out = {**test, "env_ce": {**test["env_ce"], "per_world_nats": nats}}
        if "policy" in test:
            out["policy"] = {**test["policy"], "per_world_reward": test["policy"]["per_world_reward"][keep]}
        return out

    def run(r: dict[str, Any]) -> dict[str, Any]:
        curve = [{**p, "test": on(p["test"])} for p in r["test_curve"]]
        return {**r, "final": {**r["final"], "test": on(r["final"]["test"])}, "test_curve": curve}

    arms = {name: {**arm, "seeds": [run(r) for r in record["arms"][name]]} for name, arm in report["arms"].items()}
    arms["grpo_echo"]["lambda"] = record["lambda"]
    tokens = {k: v[keep] for k, v in record["test_env_ce_set"]["per_world_tokens"].items()}
    sets = {**report["data"]["env_ce_sets"], "test": {**record["test_env_ce_set"], "per_world_tokens": tokens}}
    start = report["start_checkpoint"]
    look = {
        **report,
        "arms": arms,
        "seeds": {**report["seeds"], "test": record["test_seeds"][keep]},
        "baselines": record["baselines"],
        "data": {**report["data"], "env_ce_sets": sets},
        "start_checkpoint": {**start, "after": {**start["after"], "test": on(record["start"])}},
    }
    summarize(look)
    a, c = {k: v["summary"] for k, v in arms.items()}, look["comparisons"]
    return {
        "worlds": len(look["seeds"]["test"]),
        "start": {k: c["start"][k] for k in ("env_ce", "success")},
        "arms": {
            name: {k: a[name][k] for k in ("env_ce", "success", "success_vs_start", "gap_closed") if k in a[name]}
            for name in arms
        },
        "echo_minus_grpo": {k: c["echo_minus_grpo"][k] for k in ("env_ce", "novel_structural_env_ce", "success")},
        "targets": [t for t in look["targets"] if t["target"].startswith(WHOLE_SPLIT_TARGETS)],
        "verdict": {
            **verdict(look),
            "seeds": [r["seed"] for r in record["arms"]["grpo"]],
            # λ fixed by the look's plan before its run, not chosen by a sweep
            "lambda_rule": {"sweep_seeds": 0, "grid": [record["lambda"]], "chosen": record["lambda"]},
            "start": {"env_ce": c["start"]["env_ce"][0], "success": c["start"]["success"]},
        },
    }
