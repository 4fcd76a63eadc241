"""ECHO with Tinker against a real Tinker-API server: SkyRL's local one (JAX on CPU, a tiny model built here), N steps.

    python examples/trainers/tinker/train.py --steps 2 --world-model-coeff 0.05        # in .venv-trainers (Python 3.12)
    python examples/trainers/tinker/train.py --base-url URL --base-model NAME --model TOKENIZER   # any Tinker-API server

What it does (copy it and change the marked lines for your model and env):
1. starts the terminal env server in a child process and, without ``--base-url``, SkyRL's Tinker-API server
   (``LocalTinkerServer``) over a tiny random Qwen3 saved with the offline ChatML tokenizer;
2. ``create_lora_training_client``; per step ``save_weights_and_get_sampling_client`` (the current weights);
3. episodes: ``--groups`` worlds × ``--group-size`` runs, sampled by the server with log-probs (``TinkerSampler``),
   assembled token in, token out with per-token roles (``step_rollouts``); GRPO advantages from the env's reward;
4. ``build_datums``: policy datums (``importance_sampling``: advantages on action targets, the sampler's log-probs)
   and env datums (``cross_entropy``: ``λ·c_role/N`` on observation targets), next-token aligned;
5. ``echo_step``: both ``forward_backward`` calls, then ``optim_step``. ``--semantics`` says how the server turns
   per-token losses into a gradient: ``sum`` (hosted Tinker, the default with ``--base-url``) or ``mean_per_datum``
   (SkyRL's local server, the default without): then the env datums' current log-probs come from a ``forward``
   first and every datum is rescaled so that the applied gradient is the RFC's (``for_mean_per_datum``);
6. checks the loss the server reports (its per-token ``elementwise_loss`` summed) against the same loss computed
   here from the datums it was sent and the log-probs it returned, and probes ``∂loss/∂ℓ`` per role (the RFC's
   loss: the datums as built, before any rescaling).
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

import tinker
import torch
from tinker import types

from openenv_echo.adapters.tinker import TinkerSampler, build_datums, echo_step, reference_loss, reported_loss
from openenv_echo.objective import EchoConfig, group_advantages
from openenv_echo.providers import LocalProcessProvider
from openenv_echo.roles import Role
from openenv_echo.testing.recipes import (
    RoleGradients,
    format_metrics,
    recipe_parser,
    shaped_rewards,
    step_rollouts,
    write_metrics,
)

METRICS = ("server_loss", "reference_loss", "policy_loss", "world_loss", "grad_norm", "reward", "datums")
LOSSES = {"policy": ("rl", "rl_rows", "importance_sampling"), "world": ("env", "env_rows", "cross_entropy")}


def load_tokenizer(name: str | None) -> Any:
    if name:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name)
    from openenv_echo.tokenization import build_tokenizer

    return build_tokenizer("qwen")


def main() -> None:
    ap = recipe_parser(__doc__)
    ap.add_argument("--base-url", default=None, help="a Tinker-API server (default: start SkyRL's local one)")
    ap.add_argument("--base-model", default=None, help="the server's base model (with --base-url)")
    ap.add_argument("--lora-rank", type=int, default=4)
    ap.add_argument("--semantics", choices=["sum", "mean_per_datum"], default=None, help="the server's loss reduction")
    a = ap.parse_args()
    if a.base_url and not a.base_model:
        ap.error("--base-url needs --base-model")

    tokenizer = load_tokenizer(a.model)  # <- your tokenizer (the server's model's)
    cfg = EchoConfig(world_model_coeff=a.world_model_coeff)
    probe = RoleGradients()
    rows = []
    semantics = a.semantics or ("sum" if a.base_url else "mean_per_datum")
    with contextlib.ExitStack() as stack:
        if a.base_url:
            url, base_model, key = a.base_url, a.base_model, None
        else:
            from openenv_echo.testing.tinker_server import LocalTinkerServer, tiny_checkpoint

            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="echo-tinker-model-")))
            checkpoint = tiny_checkpoint(tmp / "model", tokenizer, seed=a.seed)
            url, base_model, key = (
                stack.enter_context(LocalTinkerServer(checkpoint)).base_url,
                str(checkpoint),
                "tml-local",
            )
        env = stack.enter_context(
            LocalProcessProvider("terminal", max_sessions=64, idle_timeout_s=None, log_level="warning")  # <- env
        )
        service = tinker.ServiceClient(base_url=url, **({"api_key": key} if key else {}))
        training = service.create_lora_training_client(base_model=base_model, rank=a.lora_rank, seed=a.seed)
        for step in range(1, a.steps + 1):
            sampler = TinkerSampler(training.save_weights_and_get_sampling_client(), [tokenizer.eos_token_id])
            rollouts = step_rollouts(env.base_url, tokenizer, sampler, a, step)
            rewards = shaped_rewards([r.reward for r in rollouts], [len(r.completion_ids) for r in rollouts])
            ids = [r.prompt_ids + r.completion_ids for r in rollouts]
            roles = [[Role.CONTEXT.code] * len(r.prompt_ids) + r.role_ids for r in rollouts]
            sampled = [[0.0] * len(r.prompt_ids) + r.logprobs for r in rollouts]
            adv = group_advantages(rewards, a.group_size).tolist()
            datums = build_datums(
                ids, roles, adv, sampled, cfg, step=step - 1, obs_count=[r.obs_count for r in rollouts]
            )
            results = echo_step(training, datums, types.AdamParams(learning_rate=a.learning_rate), semantics=semantics)
            sent = results["sent"]

            row: dict[str, Any] = {"server_loss": 0.0, "reference_loss": 0.0, "policy_loss": 0.0, "world_loss": 0.0}
            reference = torch.zeros((), dtype=torch.float64)
            for kind, (attr, rows_attr, loss_fn) in LOSSES.items():
                if kind not in results:
                    continue
                batch, batch_rows = getattr(datums, attr), getattr(datums, rows_attr)

                def watch(
                    k: int, lp: torch.Tensor, batch_rows: list[int] = batch_rows, roles: list[list[int]] = roles
                ) -> None:
                    probe.watch(lp, torch.tensor(roles[batch_rows[k]][1:]))  # target t is token t+1

                ref = reference_loss(batch, results[kind], loss_fn, watch=watch)  # the RFC's loss, its ∂/∂ℓ
                reference = reference + ref
                row[f"{kind}_loss"] = float(ref.detach())
                sent_fn = loss_fn if semantics == "sum" else "importance_sampling"
                row["server_loss"] += reported_loss(results[kind])
                row["reference_loss"] += float(reference_loss(getattr(sent, attr), results[kind], sent_fn))
            if reference.requires_grad:  # no datum at all when λ = 0 and every group tied: nothing to probe
                reference.backward()  # ∂loss/∂ℓ per target: what each backward call receives
            row["grad_norm"] = results["optim"].metrics.get("skyrl.ai/grad_norm") if results["optim"].metrics else None
            row["reward"] = float(rewards.mean())
            row["datums"] = len(datums.rl) + len(datums.env)
            row["policy_datums"] = len(datums.rl)  # 0 when every GRPO group tied (all advantages 0)
            row["env_datums"] = len(datums.env)  # 0 at λ = 0, or when no episode got an observation back
            row["env_errors"] = [r.end for r in rollouts if r.end.startswith("error")]  # steps the env refused
            grad = probe.take()
            if a.probe:
                row["grad"] = grad
            print(format_metrics(step, row, METRICS), flush=True)
            rows.append(row)
    write_metrics(a.json, a.world_model_coeff, rows)


if __name__ == "__main__":
    main()
