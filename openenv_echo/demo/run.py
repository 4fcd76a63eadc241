"""The reference demo end to end: server -> expert data -> tokenizer + model -> warm start -> three RL arms -> report.

Phases (wall time of each goes into ``report.json``):

1. start the terminal env server (local process, or ``--docker``) and record the scripted expert on the train,
   validation and test seeds through the client;
2. train a ChatML byte-level BPE tokenizer on the *train* episodes' text and build the model (or load SmolLM2);
3. warm start: SFT on the expert's action tokens (train seeds), so the policy can act at all;
4. for each arm (GRPO, GRPO + ECHO, verifier-free ECHO) from the same warm-start weights, with the same prompt
   seeds, sampler seed and budget: policy-sampled rollouts -> TITO sequences -> ``echo_loss`` -> AdamW;
   evaluate every ``eval_every`` steps on validation and test (env CE teacher-forced, greedy success);
5. choose each arm's checkpoint on *validation* only; write ``report.json``, ``summary.md`` and the PNG.
"""

from __future__ import annotations

import contextlib
import copy
import json
import platform
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .config import ARM_LABELS, DemoConfig
from .evaluate import build_ce_set, env_ce, outcome_stats, policy_success, training_lines, verbatim_overlap
from .model import build_scratch_model, count_parameters, load_smollm2, model_cache_dir
from .plots import plot_report
from .rollout import PolicyRunner, env_server, expert_episodes, messages
from .train import arm_config, rl_step, warm_start

PLOT_NAME = "echo_world_model.png"


class Clock:
    """Wall time per phase."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.last = self.start
        self.phases: dict[str, float] = {}

    def lap(self, name: str) -> float:
        now = time.perf_counter()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self.last, 2)
        self.last = now
        return self.phases[name]

    def total(self) -> float:
        return round(time.perf_counter() - self.start, 2)


def corpus_of(trajectories: list[Any]) -> list[str]:
    """Tokenizer training text: every message, action and observation of the given (train) episodes."""
    texts = [m["content"] for m in messages()]
    for t in trajectories:
        if t.reset is not None:
            texts.append(t.reset.text)
        for st in t.steps:
            texts.append(st.action_text or "")
            texts.append(st.observation.text)
    return [x for x in texts if x]


def build_policy(cfg: DemoConfig, train_episodes: list[Any]) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """(model, tokenizer, description) for ``cfg.model``."""
    from ..tokenize import build_tokenizer
    from ..tokenizer_identity import tokenizer_identity

    if cfg.model == "smollm2":
        model, tok = load_smollm2(model_cache_dir())
        tok_info = {"family": "SmolLM2 (its own byte-level BPE + ChatML template)", "trained_on": "pretrained"}
    else:
        corpus = corpus_of(train_episodes)
        tok = build_tokenizer("qwen", corpus=corpus, vocab_size=cfg.vocab_size)
        model = build_scratch_model(cfg.model, tok, max_positions=cfg.max_context + 64, seed=cfg.seed)
        tok_info = {
            "family": "qwen (ChatML byte-level BPE, openenv_echo.tokenize.build_tokenizer)",
            "trained_on": f"text of the {len(train_episodes)} train-seed expert episodes only",
            "corpus_chars": sum(map(len, corpus)),
            "requested_vocab": cfg.vocab_size,
        }
    ident = tokenizer_identity(tok)
    c = model.config
    info = {
        "kind": cfg.model,
        "class": type(model).__name__,
        "parameters": count_parameters(model),
        "hidden_size": c.hidden_size,
        "layers": c.num_hidden_layers,
        "heads": c.num_attention_heads,
        "intermediate_size": c.intermediate_size,
        "vocab_size": c.vocab_size,
        "tokenizer": {
            **tok_info,
            "vocab": len(tok),
            "fingerprint": ident.fingerprint,
            "chat_template": "ChatML; observations as tool messages",
        },
    }
    return model, tok, info


def _choose(evals: list[dict[str, Any]]) -> dict[str, Any]:
    """Checkpoint chosen on validation only: best val mean reward, then lowest val env CE, then earliest."""
    best = min(
        evals, key=lambda e: (-e["val"]["policy"]["mean_reward"], e["val"]["env_ce"]["nats_per_token"], e["step"])
    )
    return {
        "step": best["step"],
        "rule": "max validation mean reward, then min validation env CE, then earliest",
        "val": best["val"],
        "test": best["test"],
    }


def run_demo(cfg: DemoConfig, command: str | None = None) -> dict[str, Any]:
    """Run the demo; writes ``report.json``, ``summary.md`` and ``echo_world_model.png`` into ``cfg.out``; returns
    the report."""
    cfg.validate()
    with torch_settings(cfg.threads):
        return _run(cfg, command)


@contextlib.contextmanager
def torch_settings(threads: int) -> Iterator[None]:
    """Thread count and deterministic algorithms for the run, restored afterwards (the demo may run in-process,
    e.g. in a test, and must not change global torch state for whoever runs next)."""
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det, warn_only=old_warn)


def _run(cfg: DemoConfig, command: str | None) -> dict[str, Any]:
    from rich.console import Console
    from tqdm.auto import tqdm

    from ..tokenize import tokenize_trajectory

    console = Console(quiet=not cfg.progress, stderr=True)
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
            "note": "disjoint ranges; a machine is a pure function of its seed",
        },
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "platform": platform.platform(),
        },
    }
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
            "novelty_of_test_observations": verbatim_overlap(train_ex, test_ex),
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
        try:
            # -- warm start -------------------------------------------------------------------------------
            sft = warm_start(
                model,
                train_seqs,
                tok,
                steps=cfg.sft_steps,
                batch_size=cfg.sft_batch,
                lr=cfg.sft_lr,
                warmup=cfg.sft_warmup,
                micro_batch=cfg.micro_batch,
                seed=cfg.seed,
                progress=progress,
            )
            clock.lap("warm_start")

            def evaluate(step: int) -> dict[str, Any]:
                pol = policy_success(runner, model, {"val": seeds.val, "test": seeds.test})
                return {
                    "step": step,
                    "val": {"env_ce": env_ce(model, ce_val, tok, cfg.micro_batch), "policy": pol["val"]},
                    "test": {"env_ce": env_ce(model, ce_test, tok, cfg.micro_batch), "policy": pol["test"]},
                }

            ev0 = evaluate(0)
            clock.lap("eval_after_warm_start")
            report["warm_start"] = {
                "steps": cfg.sft_steps,
                "batch": cfg.sft_batch,
                "lr": cfg.sft_lr,
                "losses": sft.losses,
                "tokens_seen": sft.tokens,
                "action_tokens_trained": sft.action_tokens,
                "env_tokens_trained": 0,
                "trains": "action tokens only (env tokens are inputs, never targets)",
                "after": ev0,
            }
            console.print(
                f"warm start done: test env CE {ev0['test']['env_ce']['nats_per_token']:.3f} nats/token, "
                f"test success {ev0['test']['policy']['success']:.2f}, "
                f"mean reward {ev0['test']['policy']['mean_reward']:.2f}"
            )
            start_state = copy.deepcopy(model.state_dict())
            rng = random.Random(cfg.seed)
            schedule = [rng.sample(seeds.train, cfg.rl_prompts) for _ in range(cfg.rl_steps)]

            # -- RL arms ----------------------------------------------------------------------------------
            arms: dict[str, Any] = {}
            for arm in cfg.arms:
                model.load_state_dict(start_state)
                objective = arm_config(arm, cfg.world_model_coeff)
                opt = torch.optim.AdamW(model.parameters(), lr=cfg.rl_lr, betas=(0.9, 0.95), weight_decay=0.0)
                gen = torch.Generator().manual_seed(cfg.seed + 1)
                torch.manual_seed(cfg.seed + 2)
                train_log: list[dict[str, Any]] = []
                evals = [ev0]
                bar = tqdm(range(1, cfg.rl_steps + 1), desc=f"RL {ARM_LABELS[arm]}", disable=not progress, leave=False)
                for step in bar:
                    batch_seeds = [s for s in schedule[step - 1] for _ in range(cfg.rl_group)]
                    results = runner.run(model, batch_seeds, temperature=cfg.temperature, generator=gen)
                    stats = rl_step(
                        model,
                        opt,
                        [r.sequence for r in results],
                        [r.reward for r in results],
                        cfg.rl_group,
                        objective,
                        tok,
                        micro_batch=cfg.micro_batch,
                        step=step - 1,
                        temperature=cfg.temperature,
                        advantage=cfg.advantage,
                    )
                    out_stats = outcome_stats(results)
                    train_log.append(
                        {
                            "step": step,
                            "seeds": schedule[step - 1],
                            "reward_mean": out_stats["mean_reward"],
                            **{k: v for k, v in out_stats.items() if k != "mean_reward"},
                            **stats,
                        }
                    )
                    bar.set_postfix(reward=f"{out_stats['mean_reward']:.2f}", env_ce=f"{stats['env_ce']:.2f}")
                    if step % cfg.eval_every == 0 or step == cfg.rl_steps:
                        evals.append(evaluate(step))
                final = evals[-1]
                arms[arm] = {
                    "label": ARM_LABELS[arm],
                    "objective": objective.model_dump(mode="json"),
                    "train": train_log,
                    "evals": evals,
                    "final": {"step": final["step"], "val": final["val"], "test": final["test"]},
                    "selected": _choose(evals),
                }
                clock.lap(f"rl_{arm}")
                ft = final["test"]
                console.print(
                    f"{ARM_LABELS[arm]:>20}: test env CE {ev0['test']['env_ce']['nats_per_token']:.3f} -> "
                    f"{ft['env_ce']['nats_per_token']:.3f} nats/token, success "
                    f"{ev0['test']['policy']['success']:.2f} -> {ft['policy']['success']:.2f}, "
                    f"mean reward {ev0['test']['policy']['mean_reward']:.2f} -> "
                    f"{ft['policy']['mean_reward']:.2f}"
                )
        finally:
            runner.close()
    report["arms"] = arms
    report["summary"] = summary_rows(report)
    report["timings_s"] = {**clock.phases, "total": clock.total()}  # the plot's title shows the total so far
    plot_report(report, out / PLOT_NAME)
    report["plots"] = [PLOT_NAME]
    clock.lap("plots_and_report")
    report["timings_s"] = {**clock.phases, "total": clock.total()}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "summary.md").write_text(summary_markdown(report))
    return report


def summary_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per arm: held-out (test) numbers after warm start, at the final step, and at the checkpoint chosen
    on validation."""
    rows = []
    for arm, a in report["arms"].items():
        start = a["evals"][0]["test"]
        fin = a["final"]["test"]
        sel = a["selected"]
        rows.append(
            {
                "arm": arm,
                "label": a["label"],
                "test_env_ce_start": start["env_ce"]["nats_per_token"],
                "test_env_ce_final": fin["env_ce"]["nats_per_token"],
                "test_env_ce_per_byte_final": fin["env_ce"]["nats_per_byte"],
                "test_novel_ce_start": start["env_ce"]["novel_nats_per_token"],
                "test_novel_ce_final": fin["env_ce"]["novel_nats_per_token"],
                "test_success_start": start["policy"]["success"],
                "test_success_final": fin["policy"]["success"],
                "test_mean_reward_start": start["policy"]["mean_reward"],
                "test_mean_reward_final": fin["policy"]["mean_reward"],
                "selected_step": sel["step"],
                "selected_test_env_ce": sel["test"]["env_ce"]["nats_per_token"],
                "selected_test_success": sel["test"]["policy"]["success"],
                "selected_test_mean_reward": sel["test"]["policy"]["mean_reward"],
            }
        )
    return rows


def summary_markdown(report: dict[str, Any]) -> str:
    """The summary as a Markdown table (held-out test seeds), as pasted into the example's README."""
    t = report["timings_s"]
    lines = [
        "| arm | env CE nats/token, start → final | novel lines only, start → final | nats/byte, final | "
        "success, start → final | mean reward, start → final | "
        "checkpoint chosen on validation: step, test env CE, test success |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["summary"]:
        lines.append(
            f"| {r['label']} | {r['test_env_ce_start']:.3f} → {r['test_env_ce_final']:.3f} | "
            f"{r['test_novel_ce_start']:.3f} → {r['test_novel_ce_final']:.3f} | {r['test_env_ce_per_byte_final']:.3f} | {r['test_success_start']:.3f} → {r['test_success_final']:.3f} | "
            f"{r['test_mean_reward_start']:.3f} → {r['test_mean_reward_final']:.3f} | "
            f"{r['selected_step']}, {r['selected_test_env_ce']:.3f}, {r['selected_test_success']:.3f} |"
        )
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in t.items() if k != "total")
    lines += ["", f"`{report['command']}`: wall time {t['total']:.0f} s ({phases})."]
    return "\n".join(lines) + "\n"
