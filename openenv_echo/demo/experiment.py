"""The experiment loop: the start checkpoint (generic pretraining, then action-only SFT), the references, every RL
run (seeds x {λ sweep, direct CE}) with validation curves, λ chosen on validation, the chosen arms' held-out (test)
curves, and the report."""

from __future__ import annotations

import copy
import json
import platform
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ..trajectory import Trajectory
from .checkpoints import check_start_tokenizer, load_stored, resume_key, save_stored, start_key
from .clock import Clock
from .config import ARM_LABELS, ARMS, SFT_BAND, DemoConfig, Seeds
from .corpus import GenericCorpus, stdlib_docstrings
from .envs import DEMO_ENVS, DemoEnv
from .evaluate import (
    EVAL_CHUNK,
    CeSet,
    build_ce_set,
    env_ce,
    env_targets,
    hostnames_seen,
    outcome_stats,
    policy_success,
    structural_overlap,
    training_lines,
    training_shapes,
    verbatim_overlap,
    world_tokens,
)
from .expert_store import episodes_key, stored_episodes
from .ngram import REFERENCES, reference_lines
from .optim import make_optimizer, make_world_optimizer
from .policy import build_policy
from .recorded import recorded_selection, recorded_start
from .render import render_run
from .rollout import SAMPLER, PolicyRunner, env_server, expert_episodes, messages
from .summarize import choose_lambda
from .train import arm_config, pack_chunks, pretrain_generic, rl_step, sft_actions
from .workers import Job, QueueBar, WorkerSetup, run_jobs

SFT_RULE = (
    "of the SFT checkpoints every sft_eval_every steps and the last, those whose greedy validation success lies in "
    f"[{SFT_BAND[0]:g}, {SFT_BAND[1]:g}] (some worlds solved, room left for RL); among them the highest validation "
    "success (ties: the higher mean reward, then the later); if none lies in that band, the highest greedy validation "
    "mean reward (ties: the later); its weights are the start"
)


def sft_pick_key(step: int, val_policy: dict[str, Any]) -> tuple[float, ...]:
    """The order of ``SFT_RULE``: the start is the checkpoint with the largest key."""
    success, reward = val_policy["success"], val_policy["mean_reward"]
    if SFT_BAND[0] <= success <= SFT_BAND[1]:
        return (1.0, success, reward, step)
    return (0.0, reward, step)


SMOKE_NOTE = (
    "QUICK MODE IS A SMOKE TEST: it checks that every phase runs end to end; its numbers are not evidence of "
    "anything (run without --quick for figures)"
)


@dataclass
class Evaluator:
    """Validation (curves, λ choice) and test (the arms' curves) evaluations of the current weights."""

    runner: PolicyRunner
    tokenizer: Any
    seeds: Seeds
    ce_val: CeSet
    ce_test: CeSet
    micro_batch: int

    @classmethod
    def make(cls, cfg: DemoConfig, url: str, tok: Any, ce_val: CeSet, ce_test: CeSet) -> Evaluator:
        """The evaluator of a run of ``cfg`` against the env server at ``url``, with its own episode runner."""
        runner = PolicyRunner(
            url,
            tok,
            DEMO_ENVS[cfg.env],
            max_env_steps=cfg.env_steps,
            max_context=cfg.max_context,
            max_action_tokens=cfg.action_tokens,
            kinds=cfg.kinds,
        )
        return cls(runner, tok, cfg.seeds, ce_val, ce_test, cfg.micro_batch)

    def ce(self, model: torch.nn.Module, name: str) -> dict[str, Any]:
        return env_ce(model, self.ce_val if name == "val" else self.ce_test, self.tokenizer, self.micro_batch)

    def policy(self, model: torch.nn.Module, name: str) -> dict[str, Any]:
        seeds = self.seeds.val if name == "val" else self.seeds.test
        return policy_success(self.runner, model, {name: seeds})[name]

    def split(self, model: torch.nn.Module, name: str) -> dict[str, Any]:
        return {"env_ce": self.ce(model, name), "policy": self.policy(model, name)}


def run_key(arm: str, lam: float | None) -> str:
    return "direct_ce" if arm == "direct_ce" or lam is None else f"lambda={lam:g}"


def run_name(arm: str, lam: float, rl_seed: int) -> str:
    """The stored name of a run (its checkpoint file is ``<name>.pt``)."""
    return f"run-{run_key(arm, lam)}-seed{rl_seed}"


def curve_steps(cfg: DemoConfig) -> list[int]:
    """The RL steps with a curve point (validation env CE of every run; test env CE of the arms, and test success
    at the last): every ``eval_every`` steps and the last."""
    return [s for s in range(1, cfg.rl_steps + 1) if s % cfg.eval_every == 0 or s == cfg.rl_steps]


def held_out_steps(cfg: DemoConfig) -> list[int]:
    """The RL steps evaluated on test: every curve step, or the last alone (``cfg.test_curve``)."""
    return curve_steps(cfg) if cfg.test_curve else [cfg.rl_steps]


def has_test_curve(run: dict[str, Any], cfg: DemoConfig) -> bool:
    """Whether a stored run was evaluated on test at every step ``cfg`` asks for."""
    return "test_curve" in run and {p["step"] for p in run["test_curve"]} >= set(held_out_steps(cfg))


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
    replay: list[list[Any]] | None = None,
) -> dict[str, Any]:
    """One arm at one λ and RL seed from the start weights with a fresh AdamW (RL does not replay SFT's moments).

    GRPO and GRPO + ECHO sample their own rollouts (the λ = 0 run keeps its rollouts: ``rollouts``); direct CE
    trains on ``replay``, the GRPO run's rollouts of the same seed and step, so that its own drifting policy never
    decides what it learns from. Returns the log, the validation env CE at every curve point, the final greedy
    validation policy (what the λ rule reads) and the weights at every curve point."""
    model.load_state_dict(start["state"])
    kl = (cfg.rl_kl or 0.0) if arm != "direct_ce" else 0.0
    objective = arm_config(arm, lam, cfg.echo_normalization, cfg.echo_world_varied_only, kl)
    policy_only = arm_config("grpo", 0.0, kl=kl)  # GRPO + ECHO's steps after echo_world_steps: the policy term alone
    opt = make_optimizer(model, cfg.direct_lr if arm == "direct_ce" else cfg.rl_lr)
    world_opt = None  # GRPO + ECHO's world term on an optimizer of its own, when it has a rate of its own
    if arm == "grpo_echo" and cfg.echo_world_lr is not None:
        world_opt = make_world_optimizer(model, cfg.echo_world_lr, cfg.echo_world_optimizer)
    anchor = None  # GRPO + ECHO's start, what its action-KL anchor holds the policy to (moved by the policy term's
    # steps alone when echo_anchor is policy_term)
    if arm == "grpo_echo" and cfg.echo_action_kl is not None:
        anchor = copy.deepcopy(model).eval().requires_grad_(False)
    ref = copy.deepcopy(model).eval().requires_grad_(False) if kl else None  # the KL penalty's frozen start
    gen = torch.Generator().manual_seed(rl_seed + 1)
    torch.manual_seed(rl_seed + 2)
    train_log: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = [{"step": 0, "val_env_ce": start["val"]["env_ce"]}]
    states: dict[int, dict[str, torch.Tensor]] = {}
    rollouts: list[list[Any]] = []
    points = set(curve_steps(cfg))
    for step in range(1, cfg.rl_steps + 1):
        if arm == "direct_ce":
            if replay is None:
                raise ValueError("direct CE trains on the GRPO run's rollouts: pass them as replay")
            sequences, rewards, out = replay[step - 1], [0.0] * len(replay[step - 1]), None
        else:
            batch_seeds = [s for s in schedule[step - 1] for _ in range(cfg.rl_group)]
            results = ev.runner.run(model, batch_seeds, temperature=cfg.temperature, generator=gen)
            sequences, rewards = [r.sequence for r in results], [r.reward for r in results]
            out = outcome_stats(results)
            out.pop("per_world_reward")
            if lam == 0.0:
                rollouts.append(sequences)
        world_over = arm == "grpo_echo" and cfg.echo_world_steps is not None and step > cfg.echo_world_steps
        held = None if world_over else anchor  # the anchor is part of the world term, and stops with it
        stats = rl_step(
            model,
            opt,
            sequences,
            rewards,
            cfg.rl_group,
            policy_only if world_over else objective,
            tok,
            micro_batch=cfg.micro_batch,
            step=step - 1,
            temperature=cfg.temperature,
            advantage=cfg.advantage,
            world_opt=None if world_over else world_opt,
            anchor=held,
            anchor_coeff=(cfg.echo_action_kl or 0.0) if held is not None else 0.0,
            anchor_follows=held is not None and cfg.echo_anchor == "policy_term",
            surgery=cfg.echo_world_surgery and not world_over,
            ref=ref,
        )
        row: dict[str, Any] = {"step": step, "seeds": schedule[step - 1], **stats}
        if out is not None:
            row |= {"reward_mean": out["mean_reward"], **{k: v for k, v in out.items() if k != "mean_reward"}}
        train_log.append(row)
        if step in points:
            evals.append({"step": step, "val_env_ce": ev.ce(model, "val")})
            states[step] = copy.deepcopy(model.state_dict())
        bar.set_postfix(run=f"{run_key(arm, lam)} seed {rl_seed}", step=step)
        bar.update(1)
    if arm != "direct_ce":
        evals[-1]["val_policy"] = ev.policy(model, "val")
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
        "rollouts": rollouts,
    }


def server_sessions(cfg: DemoConfig) -> int:
    """Env sessions the demo's server must hold at once: each worker's largest batch, an RL step's
    ``rl_prompts * rl_group`` episodes or an evaluation chunk (every episode of a batch holds a session)."""
    return max(EVAL_CHUNK, cfg.rl_prompts * cfg.rl_group) * cfg.workers


def strip_run(run: dict[str, Any]) -> dict[str, Any]:
    """A stored run's figures as a report holds them (without its weights and rollouts)."""
    return {k: v for k, v in run.items() if k not in ("states", "rollouts")}


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
    chunks = pack_chunks(tok, generic.texts, cfg.generic_len)
    if cfg.model == "smollm2":
        gen_phase = None
        opt = None
    else:
        g = pretrain_generic(
            model,
            chunks,
            steps=cfg.generic_steps,
            batch_size=cfg.generic_batch,
            lr=cfg.generic_lr,
            warmup=cfg.generic_warmup,
            seed=cfg.start_seed,
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
    teacher = None
    if cfg.sft_teacher > 0:  # the pretrained LM, frozen: SFT keeps the model's non-action predictions close to it
        teacher = copy.deepcopy(model).eval()
        teacher.requires_grad_(False)
    picks: list[dict[str, Any]] = []
    best: dict[str, Any] = {}

    def keep_best(step: int, sft_opt: torch.optim.Optimizer) -> None:
        """``SFT_RULE``, online: keep this checkpoint's weights if its key beats the best so far."""
        val = policy_success(ev.runner, model, {"val": ev.seeds.val})["val"]
        picks.append({"step": step, "val_policy": val})
        if not best or sft_pick_key(step, val) > sft_pick_key(best["step"], best["val_policy"]):
            best.update(step=step, val_policy=val, state=copy.deepcopy(model.state_dict()))

    s = sft_actions(
        model,
        train_seqs,
        tok,
        steps=cfg.sft_budget,
        batch_size=cfg.sft_batch,
        lr=cfg.sft_lr,
        warmup=cfg.sft_warmup,
        micro_batch=cfg.micro_batch,
        seed=cfg.start_seed,
        optimizer=opt,
        checkpoint=keep_best,
        checkpoint_every=cfg.sft_eval_every,
        progress=cfg.progress,
        replay=chunks if cfg.sft_replay else None,
        replay_batch=cfg.sft_replay,
        teacher=teacher,
        teacher_weight=cfg.sft_teacher,
    )
    model.load_state_dict(best["state"])
    clock.lap("start_sft")
    start = {
        "state": best["state"],
        "generic": gen_phase,
        "sft": {
            "steps": cfg.sft_budget,
            "batch": f"{cfg.sft_batch} expert episodes",
            "lr": cfg.sft_lr,
            "generic_replay_chunks_per_step": cfg.sft_replay,
            "teacher_kl_weight": cfg.sft_teacher,
            "teacher": "the generic-pretrained model, frozen: KL(teacher || model) on every target that is not an "
            "action token (env text stays an input; no env token is ever a target)",
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


def report_head(cfg: DemoConfig, command: str | None) -> dict[str, Any]:
    """The report's settled part: the command, the config, the seed ranges, the versions and the RL settings."""
    seeds = cfg.seeds
    report: dict[str, Any] = {
        "command": command or " ".join(["openenv-echo", "demo", *sys.argv[1:]]),
        "config": cfg.to_dict(),
        "seeds": {
            "train": seeds.train,
            "validation": seeds.val,
            "test": seeds.test,
            "rl": cfg.rl_seeds,
            "sweep": cfg.sweep_rl_seeds,
            "note": "disjoint ranges; a world is a pure function of its seed; rl: the RL seeds of every arm (test); "
            "sweep: the RL seeds that run every λ on validation (the λ rule reads them)",
        },
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "platform": platform.platform(),
            "cpu": cpu_name(),
            "torch_threads": cfg.threads,
            "workers": cfg.workers,
            "sampler": SAMPLER,
        },
        "rl": {
            "reward": "the env's own (no shaping)",
            "advantages": f"{cfg.advantage} within each group; groups without reward variance get no policy term "
            "(their env term stays)",
            "group": f"{cfg.rl_group} samples of one world, {cfg.rl_prompts} worlds per step",
            "temperature": cfg.temperature,
            **(
                {"kl": f"k3 KL to the run's start at β {cfg.rl_kl:g} on the policy term's action tokens"}
                if cfg.rl_kl
                else {}
            ),
            "optimizer": f"a fresh AdamW (0.9, 0.95), lr {cfg.rl_lr:g} constant, grad clip 1.0, for every run: RL "
            "does not continue SFT's moments",
            "direct_ce": "env-token CE only, on the rollouts the GRPO run of the same RL seed sampled at the same step "
            "(a sampler that CE training cannot degrade)",
            "curve_steps": curve_steps(cfg),
        },
    }
    if cfg.mode == "quick":
        report["note"] = SMOKE_NOTE
    return report


def cpu_name() -> str:
    """The CPU's model and the vector kernels torch picked on it (AVX2, AVX512, ...): a long training run's float
    rounding depends on both, and the platform string does not tell them apart (the sql recording's start and its
    retrain share one, and are two agents: the example README)."""
    model = next(
        (line.split(":", 1)[1].strip() for line in _cpuinfo().splitlines() if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    return f"{model} ({torch.backends.cpu.get_cpu_capability()})"


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        return ""


@dataclass
class Data:
    """The expert episodes of the three splits, the policy built on them, and the env-CE sets."""

    train_ex: list[Trajectory]
    val_ex: list[Trajectory]
    test_ex: list[Trajectory]
    model: torch.nn.Module
    tok: Any
    model_info: dict[str, Any]
    train_seqs: list[Any]
    ce_val: CeSet
    ce_test: CeSet
    reused: list[str]  # the splits whose episodes a stored copy gave (the same env code, seeds and caps)


def collect_data(cfg: DemoConfig, env: DemoEnv, url: str, generic: GenericCorpus, clock: Clock, store: Path) -> Data:
    """The expert's episodes on the train, validation and test seeds (those stored in ``store`` by a run of the same
    env code where there are, ``expert_store``), then the tokenizer, the model and the CE sets."""
    from ..tokenization import tokenize_trajectory

    seeds, steps, kinds = cfg.seeds, cfg.env_steps, cfg.kinds
    splits: dict[str, list[Trajectory]] = {}
    reused: list[str] = []
    for split, split_seeds in (("train", seeds.train), ("val", seeds.val), ("test", seeds.test)):
        splits[split], was_stored = stored_episodes(
            store / f"experts-{split}.jsonl.gz",
            episodes_key(env.name, split_seeds, steps, kinds, cfg.docker),
            partial(
                expert_episodes,
                url,
                env,
                split_seeds,
                steps,
                kinds=kinds,
                progress=cfg.progress,
                desc=f"expert ({split})",
            ),
        )
        if was_stored:
            reused.append(split)
    train_ex, val_ex, test_ex = splits["train"], splits["val"], splits["test"]
    clock.lap("expert_episodes")
    model, tok, model_info = build_policy(cfg, env, generic, train_ex)
    train_seqs = [tokenize_trajectory(t, tok) for t in train_ex]
    seen, shapes = training_lines(train_ex), training_shapes(train_ex)
    ce_val = build_ce_set("validation", seeds.val, val_ex, tok, seen, shapes)
    ce_test = build_ce_set("test", seeds.test, test_ex, tok, seen, shapes)
    clock.lap("tokenizer_and_model")
    return Data(train_ex, val_ex, test_ex, model, tok, model_info, train_seqs, ce_val, ce_test, reused)


def describe_data(report: dict[str, Any], cfg: DemoConfig, env: DemoEnv, server_desc: str, data: Data) -> None:
    """The report's ``environment``, ``model`` and ``data`` sections."""
    seeds, kinds = cfg.seeds, cfg.kinds
    train_ex, val_ex, test_ex = data.train_ex, data.val_ex, data.test_ex
    lengths = [len(s) for s in data.train_seqs]
    report["environment"] = {
        "name": env.name,
        "server": server_desc,
        "transport": "EnvClient over WebSocket",
        "reset_options": {"max_steps": cfg.env_steps},
        "task_distribution": (
            f"{env.kind_option} ∈ {{{', '.join(kinds)}}}, equally often ({env.kind_option} = kinds[seed mod "
            f"{len(kinds)}], a reset option)"
            if kinds
            else "the env's own"
        ),
        "system_prompt": messages(env)[0]["content"],
    }
    report["model"] = data.model_info
    novelty = verbatim_overlap(train_ex, test_ex)
    novelty.update(structural_overlap(train_ex, test_ex))
    if env.name == "terminal":
        novelty.update(hostnames_seen(seeds.train, seeds.test))
    report["data"] = {
        "expert_episodes": {"train": len(train_ex), "validation": len(val_ex), "test": len(test_ex)},
        "expert_episodes_stored": data.reused,
        "expert_test_reward": sum(t.total_reward for t in test_ex) / len(test_ex),
        "train_tokens_per_episode": {"mean": sum(lengths) / len(lengths), "max": max(lengths)},
        "env_ce_sets": {
            c.name: {
                "episodes": len(c.sequences),
                "env_tokens": c.env_tokens,
                "warning_tokens": c.counts["warning"],
                "novel_line_tokens": c.novel_tokens,
                "novel_structural_tokens": c.counts["novel_structural"],
                "env_bytes": c.env_bytes,
                "per_world_tokens": world_tokens(c),
            }
            for c in (data.ce_val, data.ce_test)
        },
        "novelty_of_test_observations": novelty,
    }


def start_and_references(
    cfg: DemoConfig, data: Data, generic: GenericCorpus, ev: Evaluator, clock: Clock, store: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The start checkpoint (its weights loaded into the model) and the reference lines on the train, validation and
    test env-CE targets. The start is resumed from ``store``, else the env's recorded start where it has this run's
    start settings and tokenizer (unless ``train_start``), else trained; ``start["source"]`` says which, and
    ``start["tokenizer"]`` the fingerprint of the tokenizer it was trained with: a stored start trained with another
    tokenizer than this run's is refused (``ForeignStart``), never trained over."""
    model, tok = data.model, data.tok
    fingerprint = data.model_info["tokenizer"]["fingerprint"]
    start_file = store / "start.pt"
    start = load_stored(start_file, start_key(cfg))
    if start is not None:
        check_start_tokenizer(start_file, start, fingerprint)
        if "test" not in start:  # carried from a recording on fewer test worlds (``whole_split``): evaluated here
            model.load_state_dict(start["state"])
            start["test"] = ev.split(model, "test")
            save_stored(start_file, start_key(cfg), start)
            clock.lap("start_eval")
    else:
        recorded, why = (None, "train_start is set") if cfg.train_start else recorded_start(cfg, fingerprint)
        start = recorded or train_start(cfg, model, tok, generic, data.train_seqs, ev, clock)
        start["source"] = why if recorded else f"trained by this run's command ({why})"
        start["tokenizer"] = fingerprint
        save_stored(start_file, start_key(cfg), start)
    model.load_state_dict(start["state"])
    refs = reference_lines(
        env_targets(data.train_seqs, tok),
        env_targets(data.ce_val.sequences, tok),
        env_targets(data.ce_test.sequences, tok),
        len(tok),
    )
    clock.lap("references")
    return start, refs


def describe_start(report: dict[str, Any], cfg: DemoConfig, start: dict[str, Any], refs: dict[str, Any]) -> None:
    """The report's ``start_checkpoint`` and ``baselines`` sections."""
    report["start_checkpoint"] = {
        "what": "every arm's step 0: generic LM pretraining, then SFT on the train seeds' expert episodes "
        "with the action tokens as the only targets"
        + (f", with {cfg.sft_replay} generic-text chunks of LM replay per step" if cfg.sft_replay else "")
        + (
            f", with KL to the frozen pretrained model (weight {cfg.sft_teacher:g}) on every non-action target"
            if cfg.sft_teacher
            else ""
        ),
        "generic_pretraining": start["generic"],
        "sft": start["sft"],
        "optimizer": "AdamW (0.9, 0.95), no weight decay, each phase warm-up then cosine to 10 %; SFT "
        "continues the generic phase's moments; every RL run starts a fresh AdamW",
        "after": {"step": 0, "val": start["val"], "test": start["test"]},
        "source": start.get("source", "trained in this output directory (checkpoints/start.pt)"),
    }
    report["baselines"] = {
        **{k: refs[k] for k in REFERENCES},
        "start": start["test"]["env_ce"]["nats_per_token"],
        "unit": "nats/token on the test env-CE targets (env_output)",
        "validation": {
            "uniform": refs["uniform"],
            **{k: refs["smoothing"][f"{k}_validation_best"] for k in REFERENCES if k != "uniform"},
            "start": start["val"]["env_ce"]["nats_per_token"],
        },
        "smoothing": refs["smoothing"],
        "train_env_tokens": refs["train_env_tokens"],
    }


@dataclass
class RunStore:
    """Every RL run by name, each trained once: from memory, else from OUT/checkpoints (a rerun, or one with more
    ``--seeds``, resumes), else trained from the start weights and stored."""

    cfg: DemoConfig
    model: torch.nn.Module
    tok: Any
    ev: Evaluator
    start: dict[str, Any]
    store: Path
    bar: Any
    clock: Clock
    runs: dict[str, dict[str, Any]]

    def prepare(self, jobs: list[Job]) -> None:
        """Have every job's run stored (trained, and evaluated on test where asked), ``cfg.workers`` runs at a time
        in worker processes; what was already stored is not redone."""
        todo = [j for j in jobs if not self._stored(j)]
        ev = self.ev
        setup = WorkerSetup(
            self.cfg, ev.runner.url, self.tok, self.model, self.start, ev.ce_val, ev.ce_test, self.store
        )
        run_jobs(worker_store, setup, todo, self.cfg.workers, self.bar)
        for j in todo:  # reload what the workers stored
            self.runs.pop(run_name(j.arm, j.lam, j.seed), None)

    def _stored(self, job: Job) -> bool:
        name = run_name(job.arm, job.lam, job.seed)
        run = self.runs.get(name) or load_stored(self.store / f"{name}.pt", resume_key(self.cfg, job.arm))
        return run is not None and (not job.test or has_test_curve(run, self.cfg))

    def ensure(self, job: Job) -> None:
        """Store the job's run (and its test curve if asked); keep nothing in memory (a worker's job)."""
        run = self.get(job.arm, job.lam, job.seed)
        if job.test:
            self.test_curve(run, run_name(job.arm, job.lam, job.seed))
        self.runs.clear()

    def get(self, arm: str, lam: float, rl_seed: int) -> dict[str, Any]:
        name = run_name(arm, lam, rl_seed)
        if name in self.runs:
            return self.runs[name]
        run: dict[str, Any] | None = load_stored(self.store / f"{name}.pt", resume_key(self.cfg, arm))
        if run is None:
            cfg = self.cfg
            rng = random.Random(rl_seed)
            schedule = [rng.sample(cfg.seeds.train, cfg.rl_prompts) for _ in range(cfg.rl_steps)]
            replay = self.get("grpo", 0.0, rl_seed)["rollouts"] if arm == "direct_ce" else None
            run = rl_run(cfg, self.model, self.tok, self.ev, self.start, arm, lam, rl_seed, schedule, self.bar, replay)
            save_stored(self.store / f"{name}.pt", resume_key(self.cfg, arm), run)
            self.clock.lap(f"rl_{arm}")
        self.runs[name] = run
        return run

    def test_curve(self, run: dict[str, Any], name: str) -> None:
        """An arm's held-out curve (test env CE at every step of ``held_out_steps``, test success at the last), stored
        with it."""
        if has_test_curve(run, self.cfg):
            return
        model, ev, rl_steps = self.model, self.ev, self.cfg.rl_steps
        run["test_curve"] = [{"step": 0, "test": self.start["test"]}]
        for step in held_out_steps(self.cfg):  # success (costly) at the final step
            model.load_state_dict(run["states"][step])
            test = ev.split(model, "test") if step == rl_steps else {"env_ce": ev.ce(model, "test")}
            run["test_curve"].append({"step": step, "test": test})
        run["final"] = {"step": rl_steps, **run["test_curve"][-1]}
        save_stored(self.store / f"{name}.pt", resume_key(self.cfg, run["arm"]), run)
        self.clock.lap("test_eval")


def worker_store(setup: WorkerSetup, bar: QueueBar) -> RunStore:
    """A worker process's ``RunStore``: the parent's, rebuilt from ``setup`` with its own env client pool."""
    cfg = setup.cfg
    ev = Evaluator.make(cfg, setup.url, setup.tok, setup.ce_val, setup.ce_test)
    # the pickled model's tensors arrive in memory shared with the parent and every other worker: train a copy
    model = copy.deepcopy(setup.model)
    return RunStore(cfg, model, setup.tok, ev, setup.start, setup.store, bar, Clock(), {})


def run_all(report: dict[str, Any], cfg: DemoConfig, runs: RunStore, console: Any, out: Path) -> dict[str, Any]:
    """Every RL run. The sweep seeds run every λ (validation: the λ rule reads them); with none, λ is the env's
    recorded sweep's choice (``recorded_selection``). Then each arm seed runs λ = 0, the chosen λ and direct CE (on
    the λ = 0 run's rollouts), each evaluated on test. Runs are trained ``cfg.workers`` at a time
    (``workers.run_jobs``); direct CE of the arm seeds that are sweep seeds too trains beside the sweep. A run that
    stops early leaves its finished runs stored: the same command resumes. Returns the report it wrote."""
    sweep = [Job(_arm(lam), lam, s) for s in cfg.sweep_rl_seeds for lam in cfg.lambdas]
    if sweep:
        runs.prepare(sweep + [Job("direct_ce", 1.0, s) for s in cfg.rl_seeds if s in cfg.sweep_rl_seeds])
        runs.clock.lap("rl_sweep")
        for job in sweep:
            runs.get(job.arm, job.lam, job.seed)
        val_tokens = [float(n) for n in world_tokens(runs.ev.ce_val)["env_output"]]
        selection = choose_lambda(list(runs.runs.values()), cfg.lambdas, cfg.sweep_rl_seeds, val_tokens)
        console.print(f"λ chosen on validation: {selection['chosen']:g} ({selection['rule']})")
    else:
        selection = recorded_selection(cfg)
        console.print(
            f"λ = {selection['chosen']:g}, pre-registered: the recorded sweep's choice "
            f"({selection['recorded']['report']}, RL seeds {selection['seeds']}; not rerun)"
        )
    arm_lams = {"grpo": 0.0, "grpo_echo": float(selection["chosen"]), "direct_ce": 1.0}  # direct CE: λ unused
    arm_jobs = [Job(arm, arm_lams[arm], s) for s in cfg.rl_seeds for arm in ARMS]
    runs.prepare(arm_jobs + [Job(j.arm, j.lam, j.seed, test=True) for j in arm_jobs])  # training before evaluation
    runs.clock.lap("rl_arms_and_test_eval")
    done = [runs.get(arm, arm_lams[arm], s) for s in cfg.rl_seeds for arm in ARMS]
    sweep_runs = [r for r in runs.runs.values() if all(r is not d for d in done)]
    write_report(report, done, sweep_runs, selection, cfg, runs.clock, out)
    final: dict[str, Any] = json.loads((out / "report.json").read_text())
    return final


Plan = Callable[[dict[str, Any], DemoConfig, RunStore, Any, Path], dict[str, Any]]
"""What a run does once its start checkpoint and references stand: ``run_all`` (the demo), or a validation-only
probe (``openenv_echo.demo.probe``). It gets the report's head, the config, the run store, the console and the
output directory, and returns what the run returns."""


def _arm(lam: float) -> str:
    return "grpo" if lam == 0 else "grpo_echo"


def run_experiment(cfg: DemoConfig, command: str | None, plan: Plan = run_all) -> dict[str, Any]:
    """The whole experiment, phase by phase (see the module docstring); returns what ``plan`` returns (the demo's:
    the report it wrote)."""
    from rich.console import Console
    from tqdm.auto import tqdm

    console = Console(quiet=not cfg.progress, stderr=True)
    if cfg.mode == "quick":
        console.print(f"[bold yellow]{SMOKE_NOTE}[/]")
    clock = Clock()
    torch.manual_seed(cfg.start_seed)
    env: DemoEnv = DEMO_ENVS[cfg.env]
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    report = report_head(cfg, command)
    store = out / "checkpoints"  # the start checkpoint and every finished run, for resuming
    store.mkdir(exist_ok=True)
    generic = stdlib_docstrings()
    with env_server(env, cfg.docker, sessions=server_sessions(cfg)) as (url, server_desc):
        clock.lap("server_start")
        console.print(f"[bold]{env.name} env[/] server: {server_desc} at {url}")
        data = collect_data(cfg, env, url, generic, clock, store)
        describe_data(report, cfg, env, server_desc, data)
        info, lengths = data.model_info, [len(s) for s in data.train_seqs]
        console.print(
            f"model [bold]{cfg.model}[/]: {info['parameters'] / 1e6:.2f}M params, vocab "
            f"{info['vocab_size']}; expert episodes ~{sum(lengths) / len(lengths):.0f} tokens; generic corpus "
            f"{generic.chars:,} chars"
        )
        ev = Evaluator.make(cfg, url, data.tok, data.ce_val, data.ce_test)
        runner = ev.runner
        try:
            start, refs = start_and_references(cfg, data, generic, ev, clock, store)
            describe_start(report, cfg, start, refs)
            b = report["baselines"]
            console.print(
                "references (test env CE, nats/token): "
                + ", ".join(f"{k} {b[k]:.3f}" for k in REFERENCES)
                + f"; start {b['start']:.3f}"
            )
            bar = tqdm(total=None, desc="RL steps (all runs)", disable=not cfg.progress)
            runs = RunStore(cfg, data.model, data.tok, ev, start, store, bar, clock, {})
            result = plan(report, cfg, runs, console, out)
            bar.close()
        finally:
            runner.close()
    return result


def _chosen(selection: dict[str, Any]) -> dict[str, float | None]:
    return {"grpo": 0.0, "grpo_echo": selection["chosen"], "direct_ce": None}


def write_report(
    report: dict[str, Any],
    arm_runs: list[dict[str, Any]],
    sweep_runs: list[dict[str, Any]],
    selection: dict[str, Any],
    cfg: DemoConfig,
    clock: Clock,
    out: Path,
) -> None:
    """The report of the arm seeds given (``status.complete`` says whether every planned seed is in), with its
    summary, tables, plot and verdict."""
    report = dict(report)
    runs = [strip_run(r) for r in arm_runs]
    chosen = _chosen(selection)
    seeds_done = sorted({r["seed"] for r in runs})
    report["status"] = {
        "complete": seeds_done == cfg.rl_seeds,
        "rl_seeds_done": seeds_done,
        "rl_seeds_planned": cfg.rl_seeds,
    }
    report["lambda_selection"] = selection
    report["arms"] = {
        arm: {
            "label": ARM_LABELS[arm],
            "lambda": chosen[arm],
            "objective": next(r["objective"] for r in runs if r["arm"] == arm),
            "checkpoint": "the final RL step (the same rule for every arm; nothing chosen on test)",
            "seeds": sorted((r for r in runs if r["arm"] == arm), key=lambda r: r["seed"]),
        }
        for arm in ARMS
    }
    report["sweep_runs"] = [{k: v for k, v in strip_run(r).items() if k != "objective"} for r in sweep_runs]
    report["timings_s"] = {**clock.phases, "total": clock.total(), "cpu_total": clock.cpu()}
    report["load_average"] = clock.load()
    render_run(report, out)
