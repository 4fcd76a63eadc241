"""ECHO with prime-rl on a CPU: verifiers' own env machinery plays the terminal env, and the loss weights prime-rl
would receive train a tiny model, for N steps.

    python examples/trainers/prime-rl/train.py --steps 2 --world-model-coeff 0.05

What runs (verifiers 0.4, for real): ``EchoEnv`` (``openenv-echo-verifiers``) loaded by verifiers' loader, its
``serving()`` context, ``run_episode`` per episode, verifiers' interception server, ``TrainClient`` with the
``renderers`` Qwen3 renderer (prompt tokenization, turn bridging, per-token content attribution), the trace graph
(``MessageNode.loss_weights``, ``Branch``), and the null harness's chat program (in this process, see
``InProcessChatHarness``). The env server is the openenv-echo terminal env in a child process.

What is a stand-in, and why — prime-rl needs Python 3.12, vLLM and CUDA (it is not on PyPI either):

1. prime-rl's vLLM engine (``/inference/v1/generate``) → ``generate_app``: the tiny model sampling on the CPU, same
   wire; it shares the model object with the trainer, so each step samples from the updated weights;
2. prime-rl's orchestrator: GRPO credit (``GRPOAlgorithm``: reward minus the group mean, on every sampled token)
   and ``trace_to_samples`` (``training_samples``: verifiers' ``Branch`` API, prime-rl's rules) are restated here;
3. prime-rl's trainer: the loss is prime-rl's sum of components, each over its own token count — the ``ce``
   component exactly as prime-rl computes it from the sample's ``ce_weights`` (``Σ w·(-log p) / N_ce``); the ``rl``
   component is openenv-echo's clipped policy loss (token mean), not prime-rl's DPPO+KL.

Reward: the env's, minus ``BREVITY_PER_TOKEN`` per sampled token (so a random model's groups have non-zero
advantages), as in the other recipes. ``--probe`` prints how much of the loss's gradient reaches each role's
predictions: env_output only when ``--world-model-coeff`` > 0, never warnings or template tokens.
"""

from __future__ import annotations

import asyncio
from typing import Any

import torch
import verifiers.v1 as vf
from renderers.base import load_tokenizer
from renderers.configs import Qwen3RendererConfig
from verifiers.v1.runtimes import SubprocessConfig

from openenv_echo.adapters.prime_rl import WorldWeightsConfig, training_samples
from openenv_echo.adapters.verifiers import EchoEnvConfig, EchoTasksetConfig, offline_renderer_tokenizer
from openenv_echo.objective import EchoBatch, EchoConfig, echo_loss
from openenv_echo.providers import LocalProcessProvider
from openenv_echo.roles import PAD_ROLE_CODE, Role
from openenv_echo.server import BackgroundServer
from openenv_echo.testing.generate_server import generate_app
from openenv_echo.testing.recipes import (
    BREVITY_PER_TOKEN,
    SYSTEM_PROMPT,
    RoleGradients,
    format_metrics,
    recipe_parser,
    terminal_worlds,
    tiny_causal_lm,
    write_metrics,
)

METRICS = ("loss", "rl_loss", "ce_loss", "reward", "samples", "ce_tokens", "env_output", "warning", "tito_gap")
MODEL_NAME = "policy"


async def play(env: Any, ctx: Any, tasks: list[Any], group_size: int) -> list[list[Any]]:
    """Each task played ``group_size`` times, all episodes at once (a GRPO group per task); the clean traces of
    each group (prime-rl drops failed ones)."""
    episodes = await asyncio.gather(*(env.run_episode(t, ctx) for t in tasks for _ in range(group_size)))
    groups = [episodes[g * group_size : (g + 1) * group_size] for g in range(len(tasks))]
    return [[tr for ep in group if ep.ok for tr in ep.traces if tr.ok] for group in groups]


def assign_grpo_advantages(traces: list[Any]) -> list[float]:
    """prime-rl's ``GRPOAlgorithm.score_group``, restated: reward minus the group mean on every sampled token;
    the reward here is the env's minus ``BREVITY_PER_TOKEN`` per token of the episode (the prompt is the same
    within a group, so this is the completion's length: actions and observations). Returns the rewards."""
    rewards = [tr.reward - BREVITY_PER_TOKEN * sum(len(n.token_ids) for n in tr.nodes) for tr in traces]
    mean = sum(rewards) / max(len(rewards), 1)
    for tr, r in zip(traces, rewards):
        for node in tr.nodes:
            if any(node.mask):
                node.advantages = [r - mean] * sum(node.mask)
    return rewards


def padded(rows: list[list[Any]], fill: Any, dtype: torch.dtype) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [fill] * (width - len(r)) for r in rows], dtype=dtype)


def trainer_loss(
    model: Any, samples: list[dict[str, Any]], probe: RoleGradients
) -> tuple[torch.Tensor, dict[str, Any]]:
    """prime-rl's trainer step, on the samples it would receive: ``rl / N_rl + ce / N_ce`` from one forward."""
    ids = padded([s["token_ids"] for s in samples], 0, torch.long)
    attention = padded([[1] * len(s["token_ids"]) for s in samples], 0, torch.long)
    mask = padded([s["mask"] for s in samples], False, torch.bool)
    inference = padded([s["logprobs"] for s in samples], 0.0, torch.float32)
    adv = padded([s["advantages"] or [0.0] * len(s["token_ids"]) for s in samples], 0.0, torch.float32)
    ce_w = padded([s["ce_weights"] or [0.0] * len(s["token_ids"]) for s in samples], 0.0, torch.float32)
    roles = padded([s["role_ids"] for s in samples], PAD_ROLE_CODE, torch.long)
    logits = model(input_ids=ids, attention_mask=attention).logits.float()
    # log p(token t | tokens < t) at position t; position 0 has none (never a target of either component)
    logps = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    logps = torch.cat([torch.zeros_like(logps[:, :1]), logps], dim=1)
    probe.watch(logps, roles)
    # rl component: the clipped policy loss on the sampled tokens, mean over them (prime-rl: rl / rl_scale)
    policy_roles = torch.where(mask, Role.ACTION.code, torch.where(roles == PAD_ROLE_CODE, PAD_ROLE_CODE, 0))
    batch = EchoBatch(role_ids=policy_roles, advantages=adv, old_logps=inference)
    rl = echo_loss(logps, batch, EchoConfig()).policy_loss
    # ce component, as prime-rl's ce_loss_fn / compute_loss: Σ w·(-log p) over ce tokens / their count
    ce_mask = ce_w != 0
    n_ce = int(ce_mask.sum())
    ce = (ce_w * -logps)[ce_mask].sum() / max(n_ce, 1)
    gap = (logps.detach() - inference)[mask].abs().mean()
    metrics = {"rl_loss": float(rl.detach()), "ce_loss": float(ce.detach()), "ce_tokens": n_ce, "tito_gap": float(gap)}
    return rl + ce, metrics


def main() -> None:
    p = recipe_parser(__doc__)
    p.add_argument("--renderer", choices=("qwen3", "auto"), default="qwen3", help="auto: renderers picks by model name")
    p.set_defaults(max_new_tokens=10)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    renderer = Qwen3RendererConfig(enable_thinking=False) if a.renderer == "qwen3" else None
    if a.model:  # <- your model: a from_pretrained directory holding its tokenizer too
        from transformers import AutoModelForCausalLM

        tokenizer_dir = a.model
        model = AutoModelForCausalLM.from_pretrained(a.model).float()
    else:
        tokenizer_dir = offline_renderer_tokenizer()
        model = tiny_causal_lm(load_tokenizer(tokenizer_dir), seed=a.seed)
    tokenizer = load_tokenizer(tokenizer_dir)
    engine = BackgroundServer(
        generate_app(model, tokenizer, model_name=MODEL_NAME, default_max_tokens=a.max_new_tokens)
    )
    with LocalProcessProvider("terminal", max_sessions=64, idle_timeout_s=None, log_level="warning") as server:
        cfg = EchoEnvConfig(  # <- your env: the server, one reset per world, the ECHO weights
            taskset=EchoTasksetConfig(
                id="openenv-echo-verifiers",
                base_url=server.base_url,
                resets=terminal_worlds(a.steps * a.groups, max_steps=a.max_turns, first_seed=a.seed),
                instructions=SYSTEM_PROMPT,
            ),
            agent=vf.AgentConfig(
                runtime=SubprocessConfig(), max_turns=a.max_turns, max_output_tokens=a.max_completion_length
            ),
            echo=WorldWeightsConfig(world_model_coeff=a.world_model_coeff),
        )
        client = vf.TrainClientConfig(
            base_url=engine.start() + "/v1", renderer=renderer, renderer_model_name=tokenizer_dir
        )
        try:
            ctx = vf.ModelContext(
                model=MODEL_NAME,
                client=client,
                sampling=vf.SamplingConfig(max_tokens=a.max_new_tokens, temperature=1.0),
            )
            rows = asyncio.run(train(vf.load_environment(cfg), ctx, model, a))
        finally:
            engine.stop()
    write_metrics(a.json, a.world_model_coeff, rows)


async def train(env: Any, ctx: Any, model: Any, a: Any) -> list[dict[str, Any]]:
    """``a.steps`` steps: play ``a.groups`` worlds ``a.group_size`` times each, credit, one optimizer step."""
    optim = torch.optim.Adam(model.parameters(), lr=a.learning_rate)
    probe = RoleGradients()
    tasks = list(env.taskset)
    rows = []
    async with env.serving():
        for step in range(1, a.steps + 1):
            groups = await play(env, ctx, tasks[(step - 1) * a.groups : step * a.groups], a.group_size)
            rewards = [r for group in groups for r in assign_grpo_advantages(group)]
            traces = [tr for group in groups for tr in group]
            samples = [s for tr in traces for s in training_samples(tr)]
            loss, row = trainer_loss(model, samples, probe)
            optim.zero_grad()
            loss.backward()
            optim.step()  # the engine shares the model: the next step samples from the new weights
            row.update(loss=float(loss.detach()), reward=sum(rewards) / max(len(rewards), 1), samples=len(samples))
            row["env_output"] = sum(int(tr.metrics["echo/env_output_tokens"]) for tr in traces)
            row["warning"] = sum(int(tr.metrics["echo/warning_tokens"]) for tr in traces)
            grad = probe.take()
            if a.probe:
                row["grad"] = grad
            print(format_metrics(step, row, METRICS), flush=True)
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
