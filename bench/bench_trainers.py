"""Benchmark: a real trainer's train step with the ECHO term (``world_model_coeff > 0``) against the same step with
``world_model_coeff = 0``, on the same batch, per trainer.

* **TRL**: ``EchoGRPOTrainer.compute_loss`` (TRL's own ``_compute_loss``, its log-prob pass and loss type ``dapo``)
  + backward + AdamW step, on one generation batch built once by TRL's ``_generate_and_score_completions``;
* **torchrl**: ``EchoGRPOLoss`` (torchrl's ``GRPOLoss`` forward through ``TransformersWrapper``, masking ``rlhf``)
  + backward + AdamW step, on one ``rollout_batch``;
* **skyrl** (Python 3.12, ``.venv-trainers``): SkyRL 0.4's policy-worker step (``forward_backward`` over
  micro-batches + ``optim_step``, ``CPUPolicyWorker``) with ``echo_regular`` at λ against SkyRL's built-in
  ``regular`` loss (the plain step), on one ``TrainingInputBatch`` built by SkyRL's own functions.

The batch is real: episodes on the terminal env server (a child process), sampled by the model, assembled token-in-
token-out with per-token roles (``run_rollouts``). Generation is outside the timed step (it is the same for both
coefficients). Each round times the two coefficients back to back in rotating order on identical model copies; the
reported figure is the median of the per-round ratios of this process's CPU time (robust to other processes on a
shared machine); wall-time ratios are printed for reference. Target per trainer: ratio <= 1.03.

Run: ``python bench/bench_trainers.py [--rounds 9] [--groups 2] [--group-size 4] [--hidden 128] [--layers 2]
[--threads 1] [--trainers trl,torchrl,skyrl]``; by default every trainer this venv imports (the others are named as
not measured, with the venv that measures them).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from openenv_echo.adapters.rollouts import HFSampler, Rollout, group_reset_options, run_rollouts
from openenv_echo.objective import EchoConfig, group_advantages
from openenv_echo.providers import LocalProcessProvider
from openenv_echo.testing.recipes import SYSTEM_PROMPT, command_action, terminal_worlds, tiny_causal_lm
from openenv_echo.tokenization import build_tokenizer

TARGET = 1.03
Step = Callable[[], tuple[float, float]]


def timed(fn: Callable[[], None]) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def make_rollouts(tok: Any, model: Any, groups: int, group_size: int, turns: int) -> list[Rollout]:
    with LocalProcessProvider("terminal", max_sessions=64, idle_timeout_s=None, log_level="warning") as env:
        opts = group_reset_options(terminal_worlds(groups, max_steps=turns), group_size)
        return run_rollouts(
            env.base_url,
            tok,
            HFSampler(model, tok),
            opts,
            [[{"role": "system", "content": SYSTEM_PROMPT}]] * len(opts),
            to_action=command_action,
            max_turns=turns,
            max_completion_length=1024,
            max_new_tokens=16,
        )


def trl_steps(tok: Any, base: Any, rollouts: list[Rollout], group_size: int, coeffs: list[float]) -> dict[float, Step]:
    from datasets import Dataset
    from trl import GRPOConfig

    from openenv_echo.adapters.converters import to_trl
    from openenv_echo.adapters.trl import EchoGRPOTrainer

    out = {}
    for coeff in coeffs:
        model = copy.deepcopy(base)
        args = GRPOConfig(
            output_dir=os.path.join(".cache", "bench_trainers"),
            per_device_train_batch_size=len(rollouts),
            num_generations=group_size,
            max_completion_length=1024,
            max_steps=1,
            use_cpu=True,
            bf16=False,
            report_to="none",
            save_strategy="no",
            loss_type="dapo",
        )
        rows = [{"prompt": [{"role": "system", "content": SYSTEM_PROMPT}]}] * len(rollouts)
        trainer = EchoGRPOTrainer(
            model=model,
            reward_funcs=[lambda completions, env_reward, **_: [r - i / 1000 for i, r in enumerate(env_reward)]],
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tok,
            rollout_func=lambda prompts, trainer: to_trl(rollouts),
            echo_config=EchoConfig(world_model_coeff=coeff),
        )
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; one micro-batch per step here
        inputs = trainer._generate_and_score_completions(rows)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

        def step(trainer: Any = trainer, model: Any = model, inputs: Any = inputs, opt: Any = opt) -> None:
            opt.zero_grad(set_to_none=True)
            trainer.compute_loss(model, inputs).backward()
            opt.step()

        out[coeff] = lambda step=step: timed(step)
    return out


def torchrl_steps(
    tok: Any, base: Any, rollouts: list[Rollout], group_size: int, coeffs: list[float]
) -> dict[float, Step]:
    import tensordict
    from torchrl.modules.llm import TransformersWrapper

    from openenv_echo.adapters.torchrl import EchoGRPOLoss, rollout_batch

    tensordict.set_list_to_stack(True).set()
    rewards = torch.tensor([r.reward - len(r.completion_ids) / 1000 for r in rollouts], dtype=torch.float64)
    adv = group_advantages(rewards, group_size).float().tolist()
    batch = rollout_batch(rollouts, tok, adv)
    out = {}
    for coeff in coeffs:
        model = copy.deepcopy(base)
        wrapper = TransformersWrapper(model, tokenizer=tok, generate=False, pad_output=True, input_mode="history")
        loss_fn = EchoGRPOLoss(wrapper, masking_strategy="rlhf", echo_config=EchoConfig(world_model_coeff=coeff))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

        def step(loss_fn: Any = loss_fn, opt: Any = opt) -> None:
            opt.zero_grad(set_to_none=True)
            res = loss_fn(batch.copy())
            sum(v for k, v in res.items() if isinstance(k, str) and k.startswith("loss_") and v is not None).backward()
            opt.step()

        out[coeff] = lambda step=step: timed(step)
    return out


def skyrl_steps(
    tok: Any, base: Any, rollouts: list[Rollout], group_size: int, coeffs: list[float]
) -> dict[float, Step]:
    from skyrl.train.config import TrainerConfig

    from openenv_echo.adapters.skyrl.loss import register_echo_policy_loss, world_weights
    from openenv_echo.roles import Role
    from openenv_echo.testing.skyrl_cpu import CPUPolicyWorker, training_batch

    echo = register_echo_policy_loss("regular")
    rewards = [r.reward - len(r.completion_ids) / 1000 for r in rollouts]
    out = {}
    for coeff in coeffs:
        cfg = TrainerConfig()
        cfg.algorithm.policy_loss_type = echo if coeff > 0 else "regular"  # the plain step: SkyRL's built-in loss
        cfg.algorithm.temperature = 1.0
        cfg.algorithm.use_kl_loss = False
        cfg.micro_train_batch_size_per_gpu = group_size
        cfg.policy.optimizer_config.lr = 1e-5
        worker = CPUPolicyWorker(cfg, copy.deepcopy(base))
        weights = None
        if coeff > 0:
            weights = world_weights([r.role_ids for r in rollouts], EchoConfig(world_model_coeff=coeff))
        batch = training_batch(
            worker,
            [r.prompt_ids for r in rollouts],
            [r.completion_ids for r in rollouts],
            rewards,
            [[1 if x == Role.ACTION.code else 0 for x in r.role_ids] for r in rollouts],
            [r.logprobs for r in rollouts],
            [str(i // group_size) for i in range(len(rollouts))],
            pad_token_id=int(tok.pad_token_id),
            world_weight=weights,
        )

        def step(worker: Any = worker, batch: Any = batch) -> None:
            worker.forward_backward(batch)
            worker.optim_step()

        out[coeff] = lambda step=step: timed(step)
    return out


BUILDERS: dict[str, tuple[Callable[..., dict[float, Step]], str, str]] = {
    "trl": (trl_steps, "trl", ".venv (make setup)"),
    "torchrl": (torchrl_steps, "torchrl", ".venv (make setup)"),
    "skyrl": (skyrl_steps, "skyrl", ".venv-trainers (make setup-trainers)"),
}


def measure(steps: dict[float, Step], rounds: int, warmup: int) -> tuple[float, float, dict[float, float]]:
    """(paired CPU ratio, paired wall ratio, median wall per coefficient) of the coefficient > 0 over = 0."""
    keys = sorted(steps)  # [0.0, coeff]
    wall: dict[float, list[float]] = {k: [] for k in keys}
    cpu: dict[float, list[float]] = {k: [] for k in keys}
    for r in range(warmup + rounds):
        for k in keys if r % 2 == 0 else keys[::-1]:
            dw, dc = steps[k]()
            if r >= warmup:
                wall[k].append(dw)
                cpu[k].append(dc)
    lo, hi = keys
    cpu_ratio = statistics.median(a / b for a, b in zip(cpu[hi], cpu[lo]))
    wall_ratio = statistics.median(a / b for a, b in zip(wall[hi], wall[lo]))
    return cpu_ratio, wall_ratio, {k: statistics.median(v) for k, v in wall.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--coeff", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--trainers", default=None, help="comma-separated (default: every one this venv imports)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    tok = build_tokenizer("qwen")
    base = tiny_causal_lm(tok, seed=0, hidden=args.hidden, layers=args.layers)
    rollouts = make_rollouts(tok, base, args.groups, args.group_size, args.turns)
    roles = [x for r in rollouts for x in r.role_ids]
    print(
        f"batch: {len(rollouts)} episodes ({args.groups} worlds x {args.group_size}), completion tokens "
        f"{len(roles)} (env_output {roles.count(2)}, warning {roles.count(3)}, action {roles.count(1)}); "
        f"model Qwen2 hidden={args.hidden} layers={args.layers} vocab={len(tok)}; threads={args.threads}; "
        f"rounds={args.rounds}"
    )
    if args.trainers:
        names = [t.strip() for t in args.trainers.split(",") if t.strip()]
    else:
        names = [n for n, (_, module, _) in BUILDERS.items() if importlib.util.find_spec(module) is not None]
    for name, (_, module, venv) in BUILDERS.items():
        if name not in names:
            print(
                f"{name}: not measured by this run ({module} {'is not in this venv' if importlib.util.find_spec(module) is None else 'not selected'}; it runs in {venv})"
            )
    results = {}
    for name in names:
        steps = BUILDERS[name][0](tok, base, rollouts, args.group_size, [0.0, args.coeff])
        results[name] = measure(steps, args.rounds, args.warmup)
    print(f"\n{'trainer':<10}{'step λ=0 (s)':>14}{'step λ>0 (s)':>14}{'CPU ratio':>11}{'wall ratio':>12}  target")
    verdicts = []
    for name, (cpu_ratio, wall_ratio, med) in results.items():
        ok = cpu_ratio <= TARGET
        verdicts.append(ok)
        print(
            f"{name:<10}{med[0.0]:>14.4f}{med[args.coeff]:>14.4f}{cpu_ratio:>10.3f}x{wall_ratio:>11.3f}x  "
            f"<= {TARGET}x {'MET' if ok else 'NOT MET'}"
        )
    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"VERDICT: {'MET' if verdicts and all(verdicts) else 'NOT MET'} (every measured trainer's CPU ratio <= {TARGET}x)"
    )


if __name__ == "__main__":
    main()
