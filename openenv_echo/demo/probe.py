r"""Validation-only probes of an RL setting: GRPO (λ = 0) from a run's start checkpoint on the sweep seeds, judged by
the final step's greedy validation success, optionally direct CE on its rollouts (its validation curve, to see
whether it flattens) and GRPO + ECHO at one λ (its share of the validation gap to direct CE). Nothing is evaluated
on test. It is how the sql arm's RL settings, each env's direct-CE learning rate, the RL budget and the world term's
own learning rate were tried (example README).

    python -m openenv_echo.demo.probe run --env sql --start out/demo-sql --name temperature-1 --set temperature=1.0
    python -m openenv_echo.demo.probe run --start out/demo --name steps-40 --set rl_steps=40 --direct-ce --echo 0.1
    python -m openenv_echo.demo.probe run --start out/demo --name echo-world-lr-1e-3 --set echo_world_lr=1e-3 \
        --direct-ce --echo 1
    python -m openenv_echo.demo.probe table examples/echo_world_model/results-sql/rl-probes.json

From a start probe's start (below) instead of the recorded run's, ``--from-start FILE START`` also joins the record
into FILE (``results-sql/start-rl-probes.json``) under the start probe's name:

    python -m openenv_echo.demo.probe run --env sql --start /tmp/sql-worlds-s0 --name worlds-12800-rl-lr-1e-4 \
        --set n_train=12800 --set rl_lr=1e-4 \
        --from-start examples/echo_world_model/results-sql/start-rl-probes.json micro-worlds-12800-seed-0

``run`` trains in ``START/probes/NAME`` from ``START/checkpoints/start.pt`` (it refuses a start trained under other
settings or with another tokenizer than the one this machine builds) and writes the probe's record into
``START/rl-probes.json``. ``table`` prints a probes file's table (``tables.probes_table``);
``python -m openenv_echo.demo.render`` writes the committed one into the example README.

``start`` probes the start checkpoint's settings instead (how the sql start's model size was tried): it trains the
start alone in OUT (or resumes it from ``OUT/checkpoints/start.pt``), never the recorded one, and writes its record
(SFT's validation checkpoints, the chosen one's validation and test figures) into FILE under NAME:

    python -m openenv_echo.demo.probe start --env sql --out /tmp/sql-tiny-1 --name tiny-seed-1 --set model='"tiny"' \
        --set seed=1 --into examples/echo_world_model/results-sql/start-probes.json
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from .checkpoints import ARM_FIELDS, RUN_ONLY_FIELDS, START_FIELDS, ForeignStart, load_stored, start_key
from .config import DemoConfig
from .experiment import RunStore, run_experiment
from .render import PROBES_NAME
from .rollout import SAMPLER
from .run import torch_settings
from .stats import gap_closed
from .summarize import flattening
from .tables import probes_table, start_probes_table, start_rl_probes_tables
from .workers import Job

NOT_SETTINGS = (*RUN_ONLY_FIELDS, "extra")
"""Config fields that are not a probe's setting: where and how it runs, how many seeds, and the λ grid (a probe
trains λ = 0 only)."""


def changed(cfg: DemoConfig) -> dict[str, Any]:
    """The settings in which ``cfg`` differs from its preset's defaults (what the probe tries)."""
    base = DemoConfig.preset(cfg.mode, env=cfg.env).to_dict()
    return {k: v for k, v in cfg.to_dict().items() if k not in NOT_SETTINGS and base[k] != v}


def _final_ce(run: dict[str, Any]) -> float:
    return float(run["evals"][-1]["val_env_ce"]["nats_per_token"])


def _late(run: dict[str, Any], key: str) -> float | None:
    """Mean of a training-log figure over the run's second half of steps (None where it was not logged)."""
    rows = [t[key] for t in run["train"][len(run["train"]) // 2 :] if key in t]
    return sum(rows) / len(rows) if rows else None


def probe_record(
    cfg: DemoConfig,
    runs: RunStore,
    direct_ce: bool,
    echo: float | None = None,
    against: tuple[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A probe's figures, from its stored runs (GRPO's and direct CE's copied from the probe ``against``, (name,
    record), where given: ``reference_probe``): per seed, GRPO's final validation success (and per world), its
    validation env CE, groups with reward variance per step and sampled reward on its training worlds at its first
    step (the start's: ``train_reward_first``) and over the second half of its steps (``train_reward_late``; GRPO +
    ECHO's too, with its logged action KL to the start where anchored; GRPO's logged KL penalty, ``ref_kl_late``,
    under ``rl_kl``); direct CE's validation curve and flattening; GRPO + ECHO's final validation env CE and success,
    and its share of the start → direct CE validation gap."""
    seeds = cfg.sweep_rl_seeds
    if against is not None:
        name, ref = against
        kept = {k: ref[k] for k in ("sampler", "seeds", "rl_steps", "start_val_success", "grpo", "direct_ce")}
        return _with_echo({"settings": changed(cfg), "against": name, **kept}, runs, seeds, echo)
    grpo = [runs.get("grpo", 0.0, s) for s in seeds]
    record: dict[str, Any] = {
        "settings": changed(cfg),
        "sampler": SAMPLER,
        "seeds": seeds,
        "rl_steps": cfg.rl_steps,
        "start_val_success": runs.start["val"]["policy"]["success"],
        "grpo": [
            {
                "seed": r["seed"],
                "val_success": r["evals"][-1]["val_policy"]["success"],
                "val_per_world_reward": r["evals"][-1]["val_policy"]["per_world_reward"],
                "val_env_ce": r["evals"][-1]["val_env_ce"]["nats_per_token"],
                "groups_with_reward_variance": sum(t["groups_with_reward_variance"] for t in r["train"])
                / len(r["train"]),
                "train_reward_first": r["train"][0]["reward_mean"],
                "train_reward_late": _late(r, "reward_mean"),
                **({"ref_kl_late": _late(r, "ref_kl")} if cfg.rl_kl else {}),
            }
            for r in grpo
        ],
    }
    if direct_ce:
        record["direct_ce"] = flattening({"seeds": [runs.get("direct_ce", 1.0, s) for s in seeds]}, cfg.rl_steps)
    return _with_echo(record, runs, seeds, echo)


def _with_echo(record: dict[str, Any], runs: RunStore, seeds: list[int], echo: float | None) -> dict[str, Any]:
    if echo is not None:
        rs = [runs.get("grpo_echo", echo, s) for s in seeds]
        start_ce = float(rs[0]["evals"][0]["val_env_ce"]["nats_per_token"])
        ce = sum(map(_final_ce, rs)) / len(rs)
        direct = record["direct_ce"]["validation_curve"][-1]["env_ce"] if "direct_ce" in record else None
        record["grpo_echo"] = {
            "lambda": echo,
            "runs": [
                {
                    "seed": r["seed"],
                    "val_success": r["evals"][-1]["val_policy"]["success"],
                    "val_env_ce": _final_ce(r),
                    "train_reward_late": _late(r, "reward_mean"),
                    "action_kl_late": _late(r, "action_kl"),
                }
                for r in rs
            ],
            "val_env_ce": ce,
            "val_gap_closed": None if direct is None else gap_closed(start_ce, ce, direct),
        }
    return record


def run_probe(
    cfg: DemoConfig,
    name: str,
    start_dir: Path,
    direct_ce: bool = False,
    echo: float | None = None,
    from_start: tuple[Path, str] | None = None,
    against: str | None = None,
) -> dict[str, Any]:
    """Train the probe's runs (resuming what is stored) and write its record into ``start_dir/rl-probes.json``;
    where ``from_start`` is ``(FILE, START)``, also into the start RL probes file FILE under the start probe START
    (the start in ``start_dir`` is that start probe's). ``against``: GRPO + ECHO alone, read against the GRPO and
    direct CE of that probe in ``start_dir/rl-probes.json`` (``reference_probe``)."""
    if echo is not None and not echo > 0:
        raise ValueError(f"the probe's GRPO + ECHO λ must be > 0, not {echo:g}")
    if against is not None and direct_ce:
        raise ValueError(f"a probe against {against!r} reads its direct CE from there (no --direct-ce)")
    ref = None if against is None else (against, reference_probe(start_dir / PROBES_NAME, against, cfg, echo))
    start_file = start_dir / "checkpoints" / "start.pt"
    if load_stored(start_file, start_key(cfg)) is None:
        raise SystemExit(f"{start_file}: no start checkpoint trained under these settings (run the demo there first)")
    store = cfg.out / "checkpoints"
    store.mkdir(parents=True, exist_ok=True)
    shutil.copy(start_file, store / "start.pt")  # the run's start, never one the probe would train itself
    for experts in (start_dir / "checkpoints").glob("experts-*.jsonl.gz"):  # its expert episodes, where stored
        shutil.copy(experts, store / experts.name)

    def plan(report: dict[str, Any], cfg: DemoConfig, runs: RunStore, console: Any, out: Path) -> dict[str, Any]:
        seeds = cfg.sweep_rl_seeds
        jobs = [Job("grpo", 0.0, s) for s in seeds if ref is None]
        jobs += [Job("grpo_echo", echo, s) for s in seeds if echo is not None]
        runs.prepare(jobs + [Job("direct_ce", 1.0, s) for s in seeds if direct_ce])  # after its seed's GRPO run
        return probe_record(cfg, runs, direct_ce, echo, ref)

    with torch_settings(cfg.threads):
        record = run_experiment(cfg, f"probe {name}", plan)
    join_record(start_dir / PROBES_NAME, name, record)
    if from_start is not None:
        join_record(from_start[0], name, record, start=from_start[1])
    return record


def reference_probe(probes_file: Path, name: str, cfg: DemoConfig, echo: float | None) -> dict[str, Any]:
    """The probe ``name`` whose GRPO and direct CE runs a GRPO + ECHO probe under ``cfg`` would train again: GRPO and
    direct CE never read the world term's settings (``ARM_FIELDS["grpo_echo"]``), so the same start, seeds, steps and
    other settings make the same runs (a retrained run reproduces a stored one bit for bit on the same machine and
    sampler revision, ``rollout.SAMPLER``; example README). Refused otherwise."""
    probes = json.loads(probes_file.read_text()) if probes_file.is_file() else {}
    if name not in probes:
        raise ValueError(f"{probes_file}: no probe {name!r} to read GRPO and direct CE from")
    ref = probes[name]

    def policy_settings(settings: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in settings.items() if k not in ARM_FIELDS["grpo_echo"]}

    why = [
        *(["it needs --echo"] if echo is None else []),
        *([] if "direct_ce" in ref else [f"{name!r} ran no direct CE"]),
        *([] if ref["seeds"] == cfg.sweep_rl_seeds else [f"{name!r} ran RL seeds {ref['seeds']}"]),
        *([] if ref["rl_steps"] == cfg.rl_steps else [f"{name!r} ran {ref['rl_steps']} steps"]),
        *([] if "against" not in ref else [f"{name!r} read its own GRPO from {ref['against']!r}"]),
        *(
            []
            if ref.get("sampler") == SAMPLER
            else [f"{name!r} was sampled by the {ref.get('sampler', 'padded prefill')}, not the {SAMPLER}"]
        ),
    ]
    if policy_settings(ref["settings"]) != policy_settings(changed(cfg)):
        why.append(f"{name!r} set {ref['settings']} and this probe {changed(cfg)} outside the world term")
    if why:
        raise ValueError(f"a probe against {name!r}: " + "; ".join(why))
    return dict(ref)


def join_record(probes_file: Path, name: str, record: dict[str, Any], start: str | None = None) -> None:
    """Write ``record`` into the probes file under ``name`` (replacing a record of that name, keeping the rest); under
    ``start`` where given (a start RL probes file: start probe name → its RL probes)."""
    probes = json.loads(probes_file.read_text()) if probes_file.is_file() else {}
    (probes.setdefault(start, {}) if start is not None else probes)[name] = record
    probes_file.write_text(json.dumps(probes, indent=1, ensure_ascii=False) + "\n")


def start_record(cfg: DemoConfig, start: dict[str, Any], versions: dict[str, Any]) -> dict[str, Any]:
    """A start probe's figures: its start settings away from the preset's, SFT's validation checkpoints (greedy
    success, mean reward, per world), the step ``SFT_RULE`` chose, and that checkpoint's validation and test env CE
    and success."""
    sft = start["sft"]
    after = {
        split: {
            "env_ce": start[split]["env_ce"]["nats_per_token"],
            "success": start[split]["policy"]["success"],
            "per_world_reward": start[split]["policy"]["per_world_reward"],
        }
        for split in ("val", "test")
    }
    return {
        "settings": {k: v for k, v in changed(cfg).items() if k in START_FIELDS},
        "start_key": json.loads(start_key(cfg)),
        "versions": {k: versions[k] for k in ("python", "torch", "transformers", "platform", "cpu", "torch_threads")},
        "generic_losses": start["generic"]["losses"],
        "sft_checkpoints": [
            {
                "step": c["step"],
                "val_success": c["val_policy"]["success"],
                "val_mean_reward": c["val_policy"]["mean_reward"],
                "val_per_world_reward": c["val_policy"]["per_world_reward"],
            }
            for c in sft["checkpoints"]
        ],
        "chosen_step": sft["chosen_step"],
        "after": after,
    }


def run_start_probe(cfg: DemoConfig, name: str, into: Path) -> dict[str, Any]:
    """Train (or resume) the start of ``cfg`` in ``cfg.out`` and write its record into ``into`` under ``name``."""

    def plan(report: dict[str, Any], cfg: DemoConfig, runs: RunStore, console: Any, out: Path) -> dict[str, Any]:
        return start_record(cfg, runs.start, report["versions"])

    with torch_settings(cfg.threads):
        record = run_experiment(replace(cfg, train_start=True), f"probe start {name}", plan)
    join_record(into, name, record)
    return record


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m openenv_echo.demo.probe", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--env", default="terminal")
    common.add_argument("--name", required=True)
    common.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a DemoConfig field (JSON)")
    common.add_argument("--quick", action="store_true", help="from the quick preset (a smoke test)")
    run = sub.add_parser("run", parents=[common], help="train a probe and record it")
    run.add_argument("--start", type=Path, required=True, help="a demo run's --out (its checkpoints/start.pt)")
    run.add_argument("--seeds", type=int, default=3, help="RL seeds 0 .. N-1 [3]")
    run.add_argument("--direct-ce", action="store_true", help="also direct CE on each seed's GRPO rollouts")
    run.add_argument("--echo", type=float, metavar="LAMBDA", help="also GRPO + ECHO at this λ on each seed")
    run.add_argument(
        "--from-start",
        nargs=2,
        metavar=("FILE", "START"),
        help="also join the record into the start RL probes FILE under START, the start probe --start trained",
    )
    run.add_argument(
        "--against",
        metavar="PROBE",
        help="GRPO + ECHO (--echo) alone, read against the GRPO and direct CE runs of PROBE in START's probes file "
        "(same settings outside the world term's, seeds and steps: the runs this probe would train again)",
    )
    start = sub.add_parser("start", parents=[common], help="train a start checkpoint alone and record it")
    start.add_argument("--out", type=Path, required=True, help="where the start trains (resumed if stored there)")
    start.add_argument("--into", type=Path, required=True, help="the start probes file the record joins")
    table = sub.add_parser("table", help="print a probes file's table (RL probes, start probes or RL probes by start)")
    table.add_argument("file", type=Path)
    args = ap.parse_args(argv)
    if args.command == "table":
        probes = json.loads(args.file.read_text())
        if probes and all("settings" not in p for p in probes.values()):  # start probe name → its RL probes
            print(start_rl_probes_tables(None, probes))
            return
        starts = all("sft_checkpoints" in p for p in probes.values())
        print(start_probes_table(probes) if probes and starts else probes_table(probes))
        return
    if any("=" not in s for s in args.set):
        ap.error("--set takes FIELD=VALUE")
    overrides = {k: _value(v) for k, v in (s.split("=", 1) for s in args.set)}
    if args.command == "start":
        try:
            cfg = DemoConfig.preset("quick" if args.quick else "full", env=args.env, out=args.out, **overrides)
        except (TypeError, ValueError) as e:
            ap.error(str(e))
        print(start_probes_table({args.name: run_start_probe(cfg, args.name, args.into)}))
        return
    if args.echo is not None and not args.echo > 0:
        ap.error("--echo takes a λ > 0")
    try:
        cfg = DemoConfig.preset(
            "quick" if args.quick else "full",
            env=args.env,
            out=args.start / "probes" / args.name,
            sweep_seeds=args.seeds,
            **overrides,
        )
    except (TypeError, ValueError) as e:
        ap.error(str(e))
    from_start = None if args.from_start is None else (Path(args.from_start[0]), args.from_start[1])
    try:
        record = run_probe(cfg, args.name, args.start, args.direct_ce, args.echo, from_start, args.against)
    except ForeignStart as e:
        raise SystemExit(str(e)) from None
    except ValueError as e:
        ap.error(str(e))
    print(probes_table({args.name: record}))


if __name__ == "__main__":
    main()
