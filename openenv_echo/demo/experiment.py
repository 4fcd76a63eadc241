"""The experiment loop: start checkpoint, references, every RL run (seeds x {λ sweep, direct CE}) with validation
curves, λ chosen on validation, one test evaluation per arm and seed, and the report."""

from __future__ import annotations

import copy
import json
import platform
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .clock import Clock
from .config import ARM_LABELS, ARMS, DemoConfig, Seeds
from .evaluate import (
    CeSet,
    build_ce_set,
    env_ce,
    env_targets,
    hostnames_seen,
    outcome_stats,
    policy_success,
    training_lines,
    verbatim_overlap,
)
from .ngram import reference_lines
from .plots import plot_report
from .policy import build_policy
from .rollout import PolicyRunner, env_server, expert_episodes, messages
from .summarize import choose_lambda, summarize
from .tables import summary_markdown
from .train import arm_config, make_optimizer, pretrain, rl_step

PLOT_NAME = "echo_world_model.png"
SUBMIT_BONUS = 0.1
"""Reward shaping of the RL arms' advantages only: + 0.1 for a submitted answer, so that a group with no right
answer still has variance when some samples answer and others wander. Reported success and reward are the env's."""
SMOKE_NOTE = (
    "QUICK MODE IS A SMOKE TEST: it checks that every phase runs end to end; its numbers are not evidence of "
    "anything (run without --quick, with --seeds 3, for figures)"
)


@dataclass
class Evaluator:
    """Validation (curves, λ choice) and test (once per final checkpoint) evaluations of the current weights."""

    runner: PolicyRunner
    tokenizer: Any
    seeds: Seeds
    ce_val: CeSet
    ce_test: CeSet
    micro_batch: int

    def split(self, model: torch.nn.Module, name: str) -> dict[str, Any]:
        ce, seeds = (self.ce_val, self.seeds.val) if name == "val" else (self.ce_test, self.seeds.test)
        return {
            "env_ce": env_ce(model, ce, self.tokenizer, self.micro_batch),
            "policy": policy_success(self.runner, model, {name: seeds})[name],
        }


def run_key(arm: str, lam: float | None) -> str:
    return "direct_ce" if arm == "direct_ce" or lam is None else f"lambda={lam:g}"


def rl_run(
    cfg: DemoConfig,
    model: torch.nn.Module,
    tok: Any,
    ev: Evaluator,
    start_state: dict[str, torch.Tensor],
    start_opt: dict[str, Any] | None,
    start_val: dict[str, Any],
    arm: str,
    lam: float,
    rl_seed: int,
    schedule: list[list[int]],
    bar: Any,
) -> dict[str, Any]:
    """One arm at one λ and RL seed from the start weights; returns its log, validation curve and final weights."""
    model.load_state_dict(start_state)
    objective = arm_config(arm, lam)
    opt = make_optimizer(model, cfg.rl_lr)
    if start_opt is not None:  # continue from the start checkpoint's AdamW moments, at the RL learning rate
        opt.load_state_dict(copy.deepcopy(start_opt))
        for g in opt.param_groups:
            g["lr"] = cfg.rl_lr
    gen = torch.Generator().manual_seed(rl_seed + 1)
    torch.manual_seed(rl_seed + 2)
    train_log: list[dict[str, Any]] = []
    evals = [{"step": 0, "val": start_val}]
    for step in range(1, cfg.rl_steps + 1):
        batch_seeds = [s for s in schedule[step - 1] for _ in range(cfg.rl_group)]
        results = ev.runner.run(model, batch_seeds, temperature=cfg.temperature, generator=gen)
        stats = rl_step(
            model,
            opt,
            [r.sequence for r in results],
            [r.reward + SUBMIT_BONUS * r.submitted for r in results],
            cfg.rl_group,
            objective,
            tok,
            micro_batch=cfg.micro_batch,
            step=step - 1,
            temperature=cfg.temperature,
            advantage=cfg.advantage,
        )
        out = outcome_stats(results)
        train_log.append(
            {
                "step": step,
                "seeds": schedule[step - 1],
                "reward_mean": out["mean_reward"],
                "shaped_reward_mean": out["mean_reward"] + SUBMIT_BONUS * out["submitted"],
                **{k: v for k, v in out.items() if k != "mean_reward"},
                **stats,
            }
        )
        if step % cfg.eval_every == 0 or step == cfg.rl_steps:
            evals.append({"step": step, "val": ev.split(model, "val")})
        bar.set_postfix(run=f"{run_key(arm, lam)} seed {rl_seed}", step=step, reward=f"{out['mean_reward']:.2f}")
        bar.update(1)
    return {
        "arm": arm,
        "lambda": lam if arm != "direct_ce" else None,
        "seed": rl_seed,
        "objective": objective.model_dump(mode="json"),
        "train": train_log,
        "evals": evals,
        "updates": sum(t["skipped"] == 0.0 for t in train_log),
        "policy_updates": sum(t["groups_with_reward_variance"] > 0 for t in train_log),
        "state": copy.deepcopy(model.state_dict()),
    }


def resume_key(cfg: DemoConfig) -> str:
    """What a stored checkpoint must match to be reused: every setting except where output goes, how it is shown,
    the thread count and how many seeds are planned."""
    d = cfg.to_dict()
    for k in ("out", "progress", "threads", "n_seeds"):
        d.pop(k)
    d["submit_bonus"] = SUBMIT_BONUS
    d["pretrain_loss"] = "sum of role token means"
    return json.dumps(d, sort_keys=True)


def _save(path: Path, key: str, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"key": key, "obj": obj}, tmp)
    tmp.replace(path)


def _load(path: Path, key: str) -> Any:
    if not path.is_file():
        return None
    data = torch.load(path, weights_only=False)
    return data["obj"] if data.get("key") == key else None


def _strip(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k != "state"}


def run_experiment(cfg: DemoConfig, command: str | None) -> dict[str, Any]:
    from rich.console import Console
    from tqdm.auto import tqdm

    from ..tokenize import tokenize_trajectory

    console = Console(quiet=not cfg.progress, stderr=True)
    if cfg.mode == "quick":
        console.print(f"[bold yellow]{SMOKE_NOTE}[/]")
    clock = Clock()
    torch.manual_seed(cfg.seed)
    seeds = cfg.seeds
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": command or " ".join(["openenv-echo", "demo", *sys.argv[1:]]),
        "config": cfg.to_dict(),
        "seeds": {
            "train": seeds.train,
            "validation": seeds.val,
            "test": seeds.test,
            "rl": cfg.rl_seeds,
            "note": "disjoint ranges; a machine is a pure function of its seed; rl: training seeds of every arm",
        },
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "platform": platform.platform(),
            "torch_threads": cfg.threads,
        },
    }
    report["rl"] = {
        "reward_for_advantages": f"env reward (1 right kind and service, 0.5 right kind) + {SUBMIT_BONUS} if submitted",
        "reported_reward": "the env's, unshaped",
        "group": f"{cfg.rl_group} samples of one machine, {cfg.rl_prompts} machines per step",
        "temperature": cfg.temperature,
    }
    if cfg.mode == "quick":
        report["note"] = SMOKE_NOTE
    store = out / "checkpoints"  # the start checkpoint and every finished run, for resuming
    store.mkdir(exist_ok=True)
    key = resume_key(cfg)
    with env_server(cfg.docker) as (url, server_desc):
        clock.lap("server_start")
        console.print(f"[bold]terminal env[/] server: {server_desc} at {url}")
        progress = cfg.progress
        train_ex = expert_episodes(url, seeds.train, cfg.max_env_steps, progress=progress, desc="expert (train)")
        val_ex = expert_episodes(url, seeds.val, cfg.max_env_steps, progress=progress, desc="expert (val)")
        test_ex = expert_episodes(url, seeds.test, cfg.max_env_steps, progress=progress, desc="expert (test)")
        clock.lap("expert_episodes")
        model, tok, model_info = build_policy(cfg, train_ex)
        train_seqs = [tokenize_trajectory(t, tok) for t in train_ex]
        seen = training_lines(train_ex)
        ce_val = build_ce_set("validation", seeds.val, val_ex, tok, seen)
        ce_test = build_ce_set("test", seeds.test, test_ex, tok, seen)
        clock.lap("tokenizer_and_model")
        lengths = [len(s) for s in train_seqs]
        report["environment"] = {
            "name": "terminal",
            "server": server_desc,
            "transport": "EnvClient over WebSocket",
            "reset_options": {"max_steps": cfg.max_env_steps},
            "system_prompt": messages()[0]["content"],
        }
        report["model"] = model_info
        report["data"] = {
            "expert_episodes": {"train": len(train_ex), "validation": len(val_ex), "test": len(test_ex)},
            "expert_test_reward": sum(t.total_reward for t in test_ex) / len(test_ex),
            "train_tokens_per_episode": {"mean": sum(lengths) / len(lengths), "max": max(lengths)},
            "env_ce_sets": {
                c.name: {
                    "episodes": len(c.sequences),
                    "env_tokens": c.env_tokens,
                    "novel_line_tokens": c.novel_tokens,
                    "env_bytes": c.env_bytes,
                }
                for c in (ce_val, ce_test)
            },
            "novelty_of_test_observations": {
                **verbatim_overlap(train_ex, test_ex),
                **hostnames_seen(seeds.train, seeds.test),
            },
        }
        console.print(
            f"model [bold]{cfg.model}[/]: {model_info['parameters'] / 1e6:.2f}M params, vocab "
            f"{model_info['vocab_size']}; expert episodes ~{sum(lengths) / len(lengths):.0f} tokens"
        )
        runner = PolicyRunner(
            url,
            tok,
            max_env_steps=cfg.max_env_steps,
            max_context=cfg.max_context,
            max_action_tokens=cfg.max_action_tokens,
        )
        ev = Evaluator(runner, tok, seeds, ce_val, ce_test, cfg.micro_batch)
        try:
            # -- the start checkpoint and the reference lines (resumed from OUT/checkpoints if it is there) ------
            start_file = store / "start.pt"
            saved = _load(start_file, key)
            if saved is not None:
                model.load_state_dict(saved["state"])
                pre = saved["pre"]
            else:
                pre = pretrain(
                    model,
                    train_seqs,
                    tok,
                    steps=cfg.pretrain_steps,
                    batch_size=cfg.pretrain_batch,
                    lr=cfg.pretrain_lr,
                    warmup=cfg.pretrain_warmup,
                    micro_batch=cfg.micro_batch,
                    seed=cfg.seed,
                    progress=progress,
                )
            clock.lap("start_checkpoint")
            refs = reference_lines(
                env_targets(train_seqs, tok),
                env_targets(ce_val.sequences, tok),
                env_targets(ce_test.sequences, tok),
                len(tok),
            )
            if saved is not None:
                start_val, start_test = saved["val"], saved["test"]
            else:
                start_val = ev.split(model, "val")
                start_test = ev.split(model, "test")
                _save(start_file, key, {"state": model.state_dict(), "pre": pre, "val": start_val, "test": start_test})
            start_opt = pre.optimizer
            clock.lap("references_and_start_eval")
            report["warm_start"] = {
                "what": "the start checkpoint of every arm: LM pretraining on the train seeds' expert episodes",
                "steps": cfg.pretrain_steps,
                "batch": cfg.pretrain_batch,
                "lr": cfg.pretrain_lr,
                "losses": pre.losses,
                "optimizer": "AdamW (0.9, 0.95), no weight decay, warm-up then cosine to 10 %; every RL arm continues "
                "from its final moments at the RL learning rate",
                "tokens_seen": pre.tokens,
                "action_tokens_trained": pre.action_tokens,
                "env_tokens_trained": pre.env_tokens,
                "trains": "action and env_output tokens (system prompt, chat scaffold and warnings are inputs only)",
                "after": {"step": 0, "val": start_val, "test": start_test},
            }
            report["baselines"] = {
                "uniform": refs["uniform"],
                "unigram": refs["unigram"],
                "bigram": refs["bigram"],
                "start": start_test["env_ce"]["nats_per_token"],
                "unit": "nats/token on the test env-CE targets",
                "validation": {
                    "uniform": refs["uniform"],
                    "unigram": min(refs["smoothing"]["unigram_validation_nats"].values()),
                    "bigram": min(refs["smoothing"]["bigram_validation_nats"].values()),
                    "start": start_val["env_ce"]["nats_per_token"],
                },
                "smoothing": refs["smoothing"],
                "train_env_tokens": refs["train_env_tokens"],
            }
            b = report["baselines"]
            console.print(
                f"references (test env CE, nats/token): uniform {b['uniform']:.3f}, unigram {b['unigram']:.3f}, "
                f"bigram {b['bigram']:.3f}, start checkpoint {b['start']:.3f}; start success "
                f"{start_test['policy']['success']:.3f}"
            )
            start_state = copy.deepcopy(model.state_dict())

            # -- every RL run: the sweep seeds run every λ, λ is chosen on their validation figures, the other
            # seeds run λ = 0, the chosen λ and direct CE. Each finished run is stored in OUT/checkpoints (a rerun
            # of the same command, or with more --seeds, resumes), and the report is rewritten after every seed.
            runs: list[dict[str, Any]] = []
            n_runs = (len(cfg.lambdas) + 1) * cfg.sweep_seeds + 3 * (cfg.n_seeds - cfg.sweep_seeds)
            bar = tqdm(total=n_runs * cfg.rl_steps, desc="RL steps (all runs)", disable=not progress)
            selection: dict[str, Any] = {}
            for k, rl_seed in enumerate(cfg.rl_seeds):
                lams = cfg.lambdas if k < cfg.sweep_seeds else (0.0, selection["chosen"])
                plan = [("grpo" if lam == 0 else "grpo_echo", lam) for lam in lams] + [("direct_ce", 1.0)]
                rng = random.Random(rl_seed)
                schedule = [rng.sample(seeds.train, cfg.rl_prompts) for _ in range(cfg.rl_steps)]
                for arm, lam in plan:
                    run_file = store / f"run-{run_key(arm, lam)}-seed{rl_seed}.pt"
                    run = _load(run_file, key)
                    if run is None:
                        run = rl_run(
                            cfg, model, tok, ev, start_state, start_opt, start_val, arm, lam, rl_seed, schedule, bar
                        )
                        _save(run_file, key, run)
                    else:
                        bar.update(cfg.rl_steps)
                    runs.append(run)
                    clock.lap(f"rl_{arm}")
                if k + 1 == cfg.sweep_seeds:
                    selection = choose_lambda(runs, cfg.lambdas)
                    console.print(f"λ chosen on validation: {selection['chosen']:g} ({selection['rule']})")
                if selection:  # test, once per arm and seed, at the final checkpoint
                    for r in runs:
                        if r["lambda"] == _chosen(selection)[r["arm"]] and "final" not in r:
                            model.load_state_dict(r["state"])
                            test = ev.split(model, "test")
                            r["final"] = {"step": cfg.rl_steps, "val": r["evals"][-1]["val"], "test": test}
                            _save(store / f"run-{run_key(r['arm'], r['lambda'])}-seed{r['seed']}.pt", key, r)
                    clock.lap("test_eval")
                    write_report(report, runs, selection, cfg, clock, out, complete=k + 1 == cfg.n_seeds)
            bar.close()
        finally:
            runner.close()
    final: dict[str, Any] = json.loads((out / "report.json").read_text())
    return final


def _chosen(selection: dict[str, Any]) -> dict[str, float | None]:
    return {"grpo": 0.0, "grpo_echo": selection["chosen"], "direct_ce": None}


def write_report(
    report: dict[str, Any],
    all_runs: list[dict[str, Any]],
    selection: dict[str, Any],
    cfg: DemoConfig,
    clock: Clock,
    out: Path,
    complete: bool,
) -> None:
    """The report of the seeds finished so far (``status.complete`` says whether every planned seed is in)."""
    report = dict(report)
    runs = [_strip(r) for r in all_runs]
    chosen = _chosen(selection)
    report["status"] = {
        "complete": complete,
        "rl_seeds_done": sorted({r["seed"] for r in runs if "final" in r}),
        "rl_seeds_planned": cfg.rl_seeds,
    }
    report["lambda_selection"] = selection
    report["arms"] = {
        arm: {
            "label": ARM_LABELS[arm],
            "lambda": chosen[arm],
            "objective": next(r["objective"] for r in runs if r["arm"] == arm and r["lambda"] == chosen[arm]),
            "checkpoint": "the final RL step (the same rule for every arm; nothing chosen on test)",
            "seeds": [r for r in runs if r["arm"] == arm and r["lambda"] == chosen[arm] and "final" in r],
        }
        for arm in ARMS
    }
    report["sweep_runs"] = [{k: v for k, v in r.items() if k not in ("objective",)} for r in runs if "final" not in r]
    summarize(report)
    report["timings_s"] = {**clock.phases, "total": clock.total(), "cpu_total": clock.cpu()}
    plot_report(report, out / PLOT_NAME)
    report["plots"] = [PLOT_NAME]
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "summary.md").write_text(summary_markdown(report))
