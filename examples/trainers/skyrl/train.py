"""ECHO with SkyRL, as deep as SkyRL runs on a CPU: env rollouts as a ``GeneratorOutput``, the world masks, the
training tensors, and the PR #1716 auxiliary-loss hook body on a local model's ``action_log_probs``, for N steps.

    python examples/trainers/skyrl/train.py --steps 2 --world-model-coeff 0.05

SkyRL's generator, worker and trainer need CUDA + Ray (and SkyRL >= 0.4 needs Python 3.12), so this recipe plays
the worker: it computes ``action_log_probs`` of the response tokens with a tiny local model, the RL half with
SkyRL's own ``regular`` policy loss when ``skyrl_train`` imports (else the same token-mean PPO-clip formula), and
adds ``compute_aux_policy_loss(...)`` exactly as an ``EchoPolicyWorker`` would.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from openenv_echo.adapters.converters import to_skyrl
from openenv_echo.adapters.recipes import (
    RoleGradients,
    format_metrics,
    load_model,
    recipe_parser,
    shaped_rewards,
    step_rollouts,
    write_metrics,
)
from openenv_echo.adapters.rollouts import HFSampler
from openenv_echo.adapters.skyrl import compute_aux_policy_loss, get_aux_policy_loss_context, world_training_tensors
from openenv_echo.objective import EchoConfig, group_advantages
from openenv_echo.providers import LocalProcessProvider

METRICS = ("loss", "policy_loss", "world_loss", "echo/env_ce_per_token", "reward", "policy_loss_from")


def policy_loss_fn() -> tuple[Any, str]:
    """SkyRL's registered ``regular`` policy loss when skyrl_train imports, else the same formula (token mean)."""
    try:
        from omegaconf import OmegaConf
        from skyrl_train.utils.ppo_utils import PolicyLossRegistry

        algo = OmegaConf.create(
            {
                "policy_loss_type": "regular",
                "loss_reduction": "token_mean",
                "eps_clip_low": 0.2,
                "eps_clip_high": 0.2,
                "clip_ratio_c": 3.0,
                "use_tis": False,
                "tis_imp_ratio_cap": -1.0,
                "max_seq_len": 4096,
            }
        )
        regular = PolicyLossRegistry.get("regular")
        return (lambda lp, old, adv, mask: regular(lp, old, adv, algo, loss_mask=mask)[0]), "skyrl_train"
    except ImportError:

        def ppo_clip(lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            ratio = torch.exp(lp - old)
            loss = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
            return (loss * mask).sum() / mask.sum().clamp(min=1)

        return ppo_clip, "local"


def action_log_probs(model: Any, prompts: list[list[int]], responses: list[list[int]], width: int) -> torch.Tensor:
    """(B, width) log-probs of each response token (right-padded with 0), as SkyRL's worker computes them."""
    rows = []
    for p, r in zip(prompts, responses):
        ids = torch.tensor([p + r])
        logits = model(input_ids=ids).logits[0, len(p) - 1 : -1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r).unsqueeze(-1)).squeeze(-1)
        rows.append(torch.nn.functional.pad(lp, (0, width - len(r))))
    return torch.stack(rows)


def main() -> None:
    a = recipe_parser(__doc__).parse_args()

    model, tokenizer = load_model(a.model, seed=a.seed)  # <- your model
    optim = torch.optim.Adam(model.parameters(), lr=a.learning_rate)
    sampler = HFSampler(model, tokenizer, temperature=1.0)
    cfg = EchoConfig(world_model_coeff=a.world_model_coeff)
    policy_loss, source = policy_loss_fn()
    probe = RoleGradients()
    rows = []
    with LocalProcessProvider("terminal", max_sessions=64, idle_timeout_s=None, log_level="warning") as env:  # <- env
        for step in range(1, a.steps + 1):
            rollouts = step_rollouts(env.base_url, tokenizer, sampler, a, step)
            gen = to_skyrl(rollouts, cfg)  # GeneratorOutput + world_*_masks
            width = max(len(r) for r in gen["response_ids"])
            batch = world_training_tensors(gen, response_length=width)
            rewards = shaped_rewards(gen["rewards"], [len(r) for r in gen["response_ids"]])
            adv = group_advantages(rewards, a.group_size).float()
            loss_mask = torch.zeros(len(rollouts), width)
            roles = torch.full((len(rollouts), width), -1, dtype=torch.long)
            for i, r in enumerate(rollouts):
                loss_mask[i, : len(r.role_ids)] = torch.tensor(gen["loss_masks"][i], dtype=torch.float32)
                roles[i, : len(r.role_ids)] = torch.tensor(r.role_ids)
            lp = action_log_probs(model, gen["prompt_token_ids"], gen["response_ids"], width)
            probe.watch(lp, roles)
            old = lp.detach()  # on-policy: the sampler is the current model
            pol = policy_loss(lp, old, adv.unsqueeze(1).expand_as(lp), loss_mask)
            ctx = get_aux_policy_loss_context(batch, cfg)
            experience = SimpleNamespace(extras=batch)
            aux, metrics = compute_aux_policy_loss(
                action_log_probs=lp,
                policy_loss=pol,
                experience=experience,
                aux_policy_loss_context=ctx,
                echo_config=cfg,
                step=step - 1,
            )
            loss = pol + aux if aux is not None else pol
            optim.zero_grad()
            loss.backward()
            optim.step()
            row: dict[str, Any] = {
                "loss": float(loss.detach()),
                "policy_loss": float(pol.detach()),
                "world_loss": float(aux.detach()) if aux is not None else 0.0,
                "echo/env_ce_per_token": float(metrics["echo/env_ce_per_token"]),
                "reward": float(rewards.mean()),
                "policy_loss_from": source,
            }
            line = format_metrics(step, row, METRICS)
            grad = probe.take()
            if a.probe:
                row["grad"] = grad
                line += " | grad→ " + " ".join(f"{k}={v:.3g}" for k, v in sorted(grad.items()))
            print(line, flush=True)
            rows.append(row)
    write_metrics(a.json, a.world_model_coeff, rows)


if __name__ == "__main__":
    main()
