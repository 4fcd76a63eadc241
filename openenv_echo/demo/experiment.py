"""The experiment loop: the start checkpoint (generic pretraining, then action-only SFT), the references, every RL
run (seeds x {λ sweep, direct CE}) with validation curves, λ chosen on validation, the chosen arms' held-out (test)
curves, and the report."""

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
from .corpus import GenericCorpus, stdlib_docstrings
from .envs import DEMO_ENVS, DemoEnv
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
from .train import arm_config, make_optimizer, pack_chunks, pretrain_generic, rl_step, sft_actions

PLOT_NAME = "echo_world_model.png"
SUBMIT_BONUS = 0.1
"""Reward shaping of the RL arms' advantages only: + 0.1 for a submitted answer, so that a group with no right
answer still has variance when some samples answer and others wander. Reported success and reward are the env's."""
SFT_RULE = (
    "of the SFT checkpoints every sft_eval_every steps and the last, the one with the highest greedy validation "
    "mean reward (ties: the later); its weights and AdamW state are the start"
)
SMOKE_NOTE = (
    "QUICK MODE IS A SMOKE TEST: it checks that every phase runs end to end; its numbers are not evidence of "
    "anything (run without --quick for figures)"
)


@dataclass
class Evaluator:
    """Validation (curves, λ choice) and test (the chosen arms' curves) evaluations of the current weights."""

    runner: PolicyRunner
    tokenizer: Any
    seeds: Seeds
    ce_val: CeSet
    ce_test: CeSet
    micro_batch: int

    def ce(self, model: torch.nn.Module, name: str) -> dict[str, float]:
        return env_ce(model, self.ce_val if name == "val" else self.ce_test, self.tokenizer, self.micro_batch)

    def split(self, model: torch.nn.Module, name: str) -> dict[str, Any]:
        seeds = self.seeds.val if name == "val" else self.seeds.test
        return {"env_ce": self.ce(model, name), "policy": policy_success(self.runner, model, {name: seeds})[name]}


def run_key(arm: str, lam: float | None) -> str:
    return "direct_ce" if arm == "direct_ce" or lam is None else f"lambda={lam:g}"


def curve_steps(cfg: DemoConfig) -> list[int]:
    """The RL steps with a curve point (validation of every run; test of the chosen arms): every ``eval_every``
    steps and the last."""
    return [s for s in range(1, cfg.rl_steps + 1) if s % cfg.eval_every == 0 or s == cfg.rl_steps]


def rl_run(
    cfg: DemoConfig,
    model: torch.nn.Module,
    tok: Any,
    ev: Evaluator,
    start: dict[str, Any],
    arm: str,
    lam: float,
    rl_seed: int,
    schedule: list[list[int]],
    bar: Any,
) -> dict[str, Any]:
    """One arm at one λ and RL seed from the start weights and AdamW state; returns its log, validation curve and
    the weights at every curve point."""
    model.load_state_dict(start["state"])
    objective = arm_config(arm, lam)
    opt = make_optimizer(model, cfg.rl_lr)
    opt.load_state_dict(copy.deepcopy(start["optimizer"]))  # continue the start's AdamW moments at the RL rate
    for g in opt.param_groups:
        g["lr"] = cfg.rl_lr
    gen = torch.Generator().manual_seed(rl_seed + 1)
    torch.manual_seed(rl_seed + 2)
    train_log: list[dict[str, Any]] = []
    evals = [{"step": 0, "val": start["val"]}]
    states: dict[int, dict[str, torch.Tensor]] = {}
    points = set(curve_steps(cfg))
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
        if step in points:
            evals.append({"step": step, "val": ev.split(model, "val")})
            states[step] = copy.deepcopy(model.state_dict())
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
        "states": states,
    }


def resume_key(cfg: DemoConfig) -> str:
    """What a stored checkpoint must match to be reused: every setting except where output goes, how it is shown,
    the thread count and how many seeds are planned."""
    d = cfg.to_dict()
    for k in ("out", "progress", "threads", "n_seeds"):
        d.pop(k)
    d["submit_bonus"] = SUBMIT_BONUS
    d["start"] = "generic LM pretraining, then SFT with action tokens the only targets"
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
    return {k: v for k, v in run.items() if k != "states"}


def train_start(
    cfg: DemoConfig,
    model: torch.nn.Module,
    tok: Any,
    generic: GenericCorpus,
    train_seqs: list[Any],
    ev: Evaluator,
    clock: Clock,
) -> dict[str, Any]:
    """The start checkpoint of every arm: generic pretraining (skipped for a pretrained model), then SFT on the
    expert's actions; its weights, AdamW state, and figures after each phase."""
    if cfg.model == "smollm2":
        gen_phase = None
        opt = None
    else:
        chunks = pack_chunks(tok, generic.texts, cfg.generic_len)
        g = pretrain_generic(
            model,
            chunks,
            steps=cfg.generic_steps,
            batch_size=cfg.generic_batch,
            lr=cfg.generic_lr,
            warmup=cfg.generic_warmup,
            seed=cfg.seed,
            progress=cfg.progress,
        )
        opt = g.optimizer
        gen_phase = {
            "corpus": {**generic.describe(), "tokens": int(chunks.numel()), "chunks": len(chunks)},
            "steps": cfg.generic_steps,
            "batch": f"{cfg.generic_batch} chunks of {cfg.generic_len} tokens",
            "lr": cfg.generic_lr,
            "losses": g.losses,
            "tokens_seen": g.tokens,
            "after": {"val_env_ce": ev.ce(model, "val"), "test_env_ce": ev.ce(model, "test")},
        }
    clock.lap("start_generic_pretraining")
    picks: list[dict[str, Any]] = []
    best: dict[str, Any] = {}

    def keep_best(step: int, sft_opt: torch.optim.Optimizer) -> None:
        """SFT checkpoint rule: the highest greedy validation mean reward; ties -> the later checkpoint."""
        val = policy_success(ev.runner, model, {"val": ev.seeds.val})["val"]
        picks.append({"step": step, "val_policy": val})
        if not best or val["mean_reward"] >= best["val_policy"]["mean_reward"]:
            best.update(
                step=step,
                val_policy=val,
                state=copy.deepcopy(model.state_dict()),
                optimizer=copy.deepcopy(sft_opt.state_dict()),
            )

    s = sft_actions(
        model,
        train_seqs,
        tok,
        steps=cfg.sft_steps,
        batch_size=cfg.sft_batch,
        lr=cfg.sft_lr,
        warmup=cfg.sft_warmup,
        micro_batch=cfg.micro_batch,
        seed=cfg.seed,
        optimizer=opt,
        checkpoint=keep_best,
        checkpoint_every=cfg.sft_eval_every,
        progress=cfg.progress,
    )
    model.load_state_dict(best["state"])
    clock.lap("start_sft")
    start = {
        "state": best["state"],
        "optimizer": best["optimizer"],
        "generic": gen_phase,
        "sft": {
            "steps": cfg.sft_steps,
            "batch": f"{cfg.sft_batch} expert episodes",
            "lr": cfg.sft_lr,
            "losses": s.losses,
            "tokens_seen": s.tokens,
            "action_tokens_trained": s.targets,
            "targets": "action tokens only (the system prompt, task, chat scaffold and every observation are inputs)",
            "checkpoints": picks,
            "chosen_step": best["step"],
            "rule": SFT_RULE,
        },
        "val": ev.split(model, "val"),
        "test": ev.split(model, "test"),
    }
    clock.lap("start_eval")
    return start


def run_experiment(cfg: DemoConfig, command: str | None) -> dict[str, Any]:
    from rich.console import Console
    from tqdm.auto import tqdm

    from ..tokenize import tokenize_trajectory

    console = Console(quiet=not cfg.progress, stderr=True)
    if cfg.mode == "quick":
        console.print(f"[bold yellow]{SMOKE_NOTE}[/]")
    clock = Clock()
    torch.manual_seed(cfg.seed)
    env: DemoEnv = DEMO_ENVS[cfg.env]
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
            "note": "disjoint ranges; a world is a pure function of its seed; rl: training seeds of every arm",
        },
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "platform": platform.platform(),
            "torch_threads": cfg.threads,
        },
        "rl": {
            "reward_for_advantages": f"the env's reward + {SUBMIT_BONUS} if the episode answered",
            "reported_reward": "the env's, unshaped",
            "group": f"{cfg.rl_group} samples of one world, {cfg.rl_prompts} worlds per step",
            "temperature": cfg.temperature,
            "curve_steps": curve_steps(cfg),
        },
    }
    if cfg.mode == "quick":
        report["note"] = SMOKE_NOTE
    store = out / "checkpoints"  # the start checkpoint and every finished run, for resuming
    store.mkdir(exist_ok=True)
    key = resume_key(cfg)
    generic = stdlib_docstrings()
    with env_server(env, cfg.docker) as (url, server_desc):
        clock.lap("server_start")
        console.print(f"[bold]{env.name} env[/] server: {server_desc} at {url}")
        progress = cfg.progress
        steps = cfg.env_steps
        train_ex = expert_episodes(url, env, seeds.train, steps, progress=progress, desc="expert (train)")
        val_ex = expert_episodes(url, env, seeds.val, steps, progress=progress, desc="expert (val)")
        test_ex = expert_episodes(url, env, seeds.test, steps, progress=progress, desc="expert (test)")
        clock.lap("expert_episodes")
        model, tok, model_info = build_policy(cfg, env, generic, train_ex)
        train_seqs = [tokenize_trajectory(t, tok) for t in train_ex]
        seen = training_lines(train_ex)
        ce_val = build_ce_set("validation", seeds.val, val_ex, tok, seen)
        ce_test = build_ce_set("test", seeds.test, test_ex, tok, seen)
        clock.lap("tokenizer_and_model")
        lengths = [len(s) for s in train_seqs]
        report["environment"] = {
            "name": env.name,
            "server": server_desc,
            "transport": "EnvClient over WebSocket",
            "reset_options": {"max_steps": steps},
            "system_prompt": messages(env)[0]["content"],
        }
        report["model"] = model_info
        novelty = verbatim_overlap(train_ex, test_ex)
        if env.name == "terminal":
            novelty.update(hostnames_seen(seeds.train, seeds.test))
        report["data"] = {
            "expert_episodes": {"train": len(train_ex), "validation": len(val_ex), "test": len(test_ex)},
            "expert_test_reward": sum(t.total_reward for t in test_ex) / len(test_ex),
            "train_tokens_per_episode": {"mean": sum(lengths) / len(lengths), "max": max(lengths)},
            "env_ce_sets": {
                c.name: {
                    "episodes": len(c.sequences),
                    "env_tokens": c.env_tokens,
                    "warning_tokens": c.counts["warning"],
                    "novel_line_tokens": c.novel_tokens,
                    "env_bytes": c.env_bytes,
                }
                for c in (ce_val, ce_test)
            },
            "novelty_of_test_observations": novelty,
        }
        console.print(
            f"model [bold]{cfg.model}[/]: {model_info['parameters'] / 1e6:.2f}M params, vocab "
            f"{model_info['vocab_size']}; expert episodes ~{sum(lengths) / len(lengths):.0f} tokens; generic corpus "
            f"{generic.chars:,} chars"
        )
        runner = PolicyRunner(
            url,
            tok,
            env,
            max_env_steps=steps,
            max_context=cfg.max_context,
            max_action_tokens=cfg.max_action_tokens,
        )
        ev = Evaluator(runner, tok, seeds, ce_val, ce_test, cfg.micro_batch)
        try:
            # -- the start checkpoint (resumed from OUT/checkpoints if it is there) and the reference lines ------
            start_file = store / "start.pt"
            start = _load(start_file, key)
            if start is None:
                start = train_start(cfg, model, tok, generic, train_seqs, ev, clock)
                _save(start_file, key, start)
            model.load_state_dict(start["state"])
            refs = reference_lines(
                env_targets(train_seqs, tok),
                env_targets(ce_val.sequences, tok),
                env_targets(ce_test.sequences, tok),
                len(tok),
            )
            clock.lap("references")
            report["start_checkpoint"] = {
                "what": "every arm's step 0: generic LM pretraining, then SFT on the train seeds' expert episodes "
                "with the action tokens as the only targets",
                "generic_pretraining": start["generic"],
                "sft": start["sft"],
                "optimizer": "AdamW (0.9, 0.95), no weight decay, each phase warm-up then cosine to 10 %; SFT "
                "continues the generic phase's moments and every RL arm continues SFT's, at its own learning rate",
                "after": {"step": 0, "val": start["val"], "test": start["test"]},
            }
            report["baselines"] = {
                "uniform": refs["uniform"],
                "unigram": refs["unigram"],
                "bigram": refs["bigram"],
                "start": start["test"]["env_ce"]["nats_per_token"],
                "unit": "nats/token on the test env-CE targets (env_output)",
                "validation": {
                    "uniform": refs["uniform"],
                    "unigram": min(refs["smoothing"]["unigram_validation_nats"].values()),
                    "bigram": min(refs["smoothing"]["bigram_validation_nats"].values()),
                    "start": start["val"]["env_ce"]["nats_per_token"],
                },
                "smoothing": refs["smoothing"],
                "train_env_tokens": refs["train_env_tokens"],
            }
            b = report["baselines"]
            console.print(
                f"references (test env CE, nats/token): uniform {b['uniform']:.3f}, unigram {b['unigram']:.3f}, "
                f"bigram {b['bigram']:.3f}, start checkpoint {b['start']:.3f}; start success "
                f"{start['test']['policy']['success']:.3f}"
            )

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
                        run = rl_run(cfg, model, tok, ev, start, arm, lam, rl_seed, schedule, bar)
                        _save(run_file, key, run)
                    else:
                        bar.update(cfg.rl_steps)
                    runs.append(run)
                    clock.lap(f"rl_{arm}")
                if k + 1 == cfg.sweep_seeds:
                    selection = choose_lambda(runs, cfg.lambdas)
                    console.print(f"λ chosen on validation: {selection['chosen']:g} ({selection['rule']})")
                if selection:  # the chosen arms' test curves, once per arm and seed
                    for r in runs:
                        if r["lambda"] == _chosen(selection)[r["arm"]] and "final" not in r:
                            r["test_curve"] = [{"step": 0, "test": start["test"]}]
                            for step, state in sorted(r["states"].items()):
                                model.load_state_dict(state)
                                r["test_curve"].append({"step": step, "test": ev.split(model, "test")})
                            r["final"] = {"step": cfg.rl_steps, "val": r["evals"][-1]["val"], **r["test_curve"][-1]}
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
    report["load_average"] = clock.load()
    plot_report(report, out / PLOT_NAME)
    report["plots"] = [PLOT_NAME]
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "summary.md").write_text(summary_markdown(report))
