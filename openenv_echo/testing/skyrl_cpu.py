"""SkyRL's policy worker on a CPU: SkyRL's own step with the three GPU-only parts replaced, and nothing else.

``CPUPolicyWorker`` is SkyRL 0.4's ``PolicyWorkerBase`` (``forward``, ``forward_backward``,
``_forward_backward_micro``, ``optim_step``: micro-batching, the registered policy loss called with SkyRL's
``AlgorithmConfig``, the KL and entropy terms, metric reduction) with ``EchoPolicyWorkerMixin``. What is ours,
and why:

* **the model wrapper** (``CPUModelWrapper``): SkyRL's ``HFModelWrapper`` imports ``flash_attn`` at module
  level, which does not install without CUDA. Ours does what its padded path does (position ids from the
  attention mask, logits / temperature, SkyRL's own ``logprobs_from_logits`` and ``chunked_entropy_from_logits``,
  ``log_probs[:, -num_actions-1:-1]``);
* **the strategy** (``CPUStrategy``): FSDP/Megatron need CUDA + NCCL; ours is one process:
  ``loss.backward()``, gradient-norm clipping at ``max_grad_norm``, ``optimizer.step()``, scheduler step;
* **the device**: SkyRL moves every micro-batch to ``torch.cuda.current_device()``; the worker answers ``"cpu"``
  for the duration of its own calls (``cpu_as_current_device``), and the Ray actor set-up is skipped.

``training_batch`` builds the ``TrainingInputBatch`` with SkyRL's own functions
(``convert_prompts_responses_to_batch_tensors``, the registered advantage estimator,
``apply_loss_reduction_to_advantages_minibatch``) and the worker's own ``forward`` for the old log-probs.
``CPUDispatch`` stands in for ``RayPPOTrainer``'s worker dispatch, so the trainer's own step
(``fwd_logprobs_values_reward``, ``compute_advantages_and_returns``, ``train_critic_and_policy``) and its loop
(``RayPPOTrainer.train``: weight sync set-up, the step, the sync after it) run on it. ``CPUInferenceClient``
stands in for SkyRL's inference engine client (vLLM servers, CUDA only): the calls ``SkyRLGymGenerator`` makes,
answered by a local model; it samples from the very model the CPU worker trains, so the weight sync SkyRL does
after each step has nothing to carry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import torch
from skyrl.backends.skyrl_train.distributed.dispatch import MeshRank
from skyrl.backends.skyrl_train.distributed.strategy import DistributedStrategy
from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
from skyrl.backends.skyrl_train.utils.ppo_utils import (
    PolicyLossRegistry,
    apply_loss_reduction_to_advantages_minibatch,
    compute_advantages_and_returns,
)
from skyrl.backends.skyrl_train.utils.torch_utils import chunked_entropy_from_logits, logprobs_from_logits
from skyrl.backends.skyrl_train.workers.worker import PolicyWorkerBase
from skyrl.train.config import TrainerConfig
from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors

from ..adapters.skyrl.loss import WORLD_WEIGHT_KEY, EchoPolicyWorkerMixin


@contextmanager
def cpu_as_current_device() -> Iterator[None]:
    """``torch.cuda.current_device()`` answers ``"cpu"`` inside the block (SkyRL's worker asks it per micro-batch)."""
    with mock.patch.object(torch.cuda, "current_device", return_value="cpu"):
        yield


class CPUStrategy(DistributedStrategy):  # type: ignore[misc]
    """One process, no sharding: SkyRL's ``DistributedStrategy`` interface for a CPU worker."""

    def __init__(self, max_grad_norm: float = 1.0) -> None:
        self.max_grad_norm = float(max_grad_norm)
        self.world_size = 1

    def setup_distributed(self) -> None:
        return None

    def backward(self, loss: torch.Tensor, model: Any, optimizer: Any, **kwargs: Any) -> None:
        loss.backward()  # type: ignore[no-untyped-call]

    def optimizer_step(self, optimizer: Any, model: Any, scheduler: Any, name: str = "model", **kwargs: Any) -> Any:
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
        if scheduler is not None:
            scheduler.step()
        return grad_norm

    def all_reduce(self, data: Any, op: str = "mean", group: Any = None) -> Any:
        return data  # one process: the reduction over the group is the value itself

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the CPU worker keeps no checkpoints")

    def load_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the CPU worker keeps no checkpoints")

    def save_hf_model(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the CPU worker keeps no checkpoints")


class CPUModelWrapper(torch.nn.Module):
    """A Hugging Face causal LM behind ``HFModelWrapper``'s call: ``(action_log_probs, output)`` of the last
    ``num_actions`` positions, for left-padded ``sequences`` (SkyRL's padded path)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.on_action_log_probs: Callable[[torch.Tensor], None] | None = None
        """Called with each grad-enabled ``action_log_probs`` (a gradient probe's hook point)."""

    def forward(
        self,
        sequences: torch.Tensor,
        num_actions: int,
        attention_mask: torch.Tensor,
        temperature: float = 1.0,
        return_output: bool = False,
        compute_entropy: bool = False,
        entropy_requires_grad: bool = True,
        **_: Any,
    ) -> Any:
        position_ids = attention_mask.long().cumsum(-1) - 1
        position_ids.masked_fill_(attention_mask == 0, 1)
        output = dict(self.model(sequences, attention_mask=attention_mask, position_ids=position_ids))
        logits = output["logits"].float() / temperature
        log_probs = logprobs_from_logits(logits, torch.roll(sequences, shifts=-1, dims=1))
        if compute_entropy:
            output["entropy"] = chunked_entropy_from_logits(
                logits, requires_grad=entropy_requires_grad, attention_mask=attention_mask
            )
        action_log_probs = log_probs[:, -num_actions - 1 : -1]
        if self.on_action_log_probs is not None and action_log_probs.requires_grad:
            self.on_action_log_probs(action_log_probs)
        return (action_log_probs, output) if return_output else action_log_probs


class _OneProcessMesh:
    def get_group(self, name: str) -> None:
        return None


class CPUPolicyWorker(EchoPolicyWorkerMixin, PolicyWorkerBase):  # type: ignore[misc]
    """SkyRL's policy worker in this process on a CPU (see the module docstring for what is ours)."""

    def __init__(self, cfg: TrainerConfig, model: torch.nn.Module, *, num_training_steps: int = 1000) -> None:
        from transformers import get_scheduler

        # PolicyWorkerBase.__init__ would set up a Ray actor (ports, GPU ids, log redirection): set its fields here
        self.cfg = cfg
        self.profiler = None
        self.record_memory = False
        self.model = CPUModelWrapper(model)
        opt = cfg.policy.optimizer_config
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=opt.lr, betas=tuple(opt.adam_betas), weight_decay=opt.weight_decay
        )
        self.scheduler = get_scheduler(
            opt.scheduler, self.optimizer, num_warmup_steps=opt.num_warmup_steps, num_training_steps=num_training_steps
        )
        self.strategy = CPUStrategy(opt.max_grad_norm)
        self.mesh_rank = MeshRank(dp=0, sp=0, tp=0, pp=0, world_size=1, dp_size=1, pp_size=1)
        self.device_mesh = _OneProcessMesh()
        self.policy_loss_fn = PolicyLossRegistry.get(cfg.algorithm.policy_loss_type)

    def forward(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        with cpu_as_current_device():
            return super().forward(data, *args, **kwargs)

    def _forward_backward_micro(self, experience: Any, *args: Any, **kwargs: Any) -> Any:
        with cpu_as_current_device():
            return super()._forward_backward_micro(experience, *args, **kwargs)

    def train_step(self, data: TrainingInputBatch) -> dict[str, float]:
        """One mini-batch: SkyRL's ``forward_backward`` then ``optim_step``; returns its metrics plus
        ``grad_norm``."""
        out = self.forward_backward(data)
        metrics = dict(out.metrics)
        metrics["grad_norm"] = float(self.optim_step())
        return metrics


class CPUDispatch:
    """The calls ``RayPPOTrainer``'s step makes on its ``WorkerDispatch``, answered by one ``CPUPolicyWorker``
    in this process (SkyRL's dispatch drives Ray actor groups of GPU workers): a mini-batch is "staged" as its
    slice of the batch, as SkyRL stages one chunk per data-parallel rank (here one rank)."""

    def __init__(self, policy: CPUPolicyWorker) -> None:
        self.policy = policy

    def _worker(self, model: str) -> CPUPolicyWorker:
        if model != "policy":
            raise NotImplementedError(f"the CPU dispatch holds the policy worker only, not {model!r}")
        return self.policy

    def get_lcm_dp_size(self) -> int:
        return 1

    def forward(self, model: str, data: TrainingInputBatch, **_: Any) -> Any:
        return self._worker(model).forward(data)

    def stage_data(
        self, model: str, data: TrainingInputBatch, mini_batch_boundaries: Sequence[tuple[int, int]]
    ) -> list[list[TrainingInputBatch]]:
        return [[data[start:end]] for start, end in mini_batch_boundaries]

    def forward_from_staged(self, model: str, chunk_refs: Sequence[TrainingInputBatch], **_: Any) -> Any:
        return self._worker(model).forward(chunk_refs[0])

    def forward_backward_from_staged(self, model: str, chunk_refs: Sequence[TrainingInputBatch], **_: Any) -> Any:
        return self._worker(model).forward_backward(chunk_refs[0])

    def optim_step(self, model: str, model_id: str | None = None) -> float:
        return float(self._worker(model).optim_step())

    def empty_cache(self, model: str | None = None) -> None:
        return None

    def init_weight_sync_state(self, inference_engine_client: Any) -> None:
        return None  # the CPU engine samples from the worker's own model object

    async def save_weights_for_sampler(self) -> None:
        return None  # likewise: the sampler reads the weights the optimizer just stepped

    def get_timing_metrics(self) -> dict[str, float]:
        return {}

    def finalize_pending_saves(self, model: str) -> None:
        return None  # the CPU worker keeps no checkpoints


class CPUInferenceClient:
    """The calls ``SkyRLGymGenerator`` makes on its inference engine client (``generate``, ``finish_session``),
    answered by ``sampler`` (e.g. ``openenv_echo.adapters.rollouts.HFSampler`` over the policy's model)."""

    def __init__(self, sampler: Any, tokenizer: Any, max_new_tokens: int) -> None:
        self.sampler, self.tokenizer, self.max_new_tokens = sampler, tokenizer, int(max_new_tokens)

    async def generate(self, engine_input: Any, model: Any = None) -> dict[str, Any]:
        samples = self.sampler([list(p) for p in engine_input["prompt_token_ids"]], self.max_new_tokens)
        eos = set(getattr(self.sampler, "eos_ids", ()))
        return {
            "responses": [self.tokenizer.decode(ids) for ids, _ in samples],
            "response_ids": [list(ids) for ids, _ in samples],
            "stop_reasons": ["stop" if ids and ids[-1] in eos else "length" for ids, _ in samples],
            "response_logprobs": [list(lps) for _, lps in samples],
        }

    async def finish_session(self, session_id: str) -> None:
        return None


def training_batch(
    worker: CPUPolicyWorker,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    rewards: Sequence[float],
    loss_masks: Sequence[Sequence[int]],
    rollout_logprobs: Sequence[Sequence[float]],
    uids: Sequence[str],
    *,
    pad_token_id: int,
    world_weight: torch.Tensor | None = None,
) -> TrainingInputBatch:
    """A one-mini-batch ``TrainingInputBatch`` as SkyRL's trainer builds it: tensors (right-aligned responses),
    outcome rewards on each response's last token, advantages from the configured estimator grouped by ``uids``,
    old log-probs from the worker's ``forward``, and the loss reduction folded into the advantages.
    ``world_weight`` (B, response_len), from ``openenv_echo.adapters.skyrl.loss.world_weights``, is added
    under ``WORLD_WEIGHT_KEY``."""
    algo = worker.cfg.algorithm
    token_rewards = [[0.0] * (len(r) - 1) + [float(x)] for r, x in zip(responses, rewards)]
    sequences, attention_mask, response_mask, rew, loss_mask, logprobs, _, _ = (
        convert_prompts_responses_to_batch_tensors(
            pad_token_id,
            [list(p) for p in prompts],
            [list(r) for r in responses],
            token_rewards,
            [list(m) for m in loss_masks],
            [list(x) for x in rollout_logprobs],
        )
    )
    advantages, returns = compute_advantages_and_returns(
        token_level_rewards=rew,
        response_mask=response_mask,
        index=np.array(list(uids)),
        adv_estimator=algo.advantage_estimator,
        config=algo,
        grpo_norm_by_std=algo.grpo_norm_by_std,
        gamma=algo.gamma,
        lambd=algo.lambd,
    )
    batch = TrainingInputBatch(
        {
            "sequences": sequences,
            "attention_mask": attention_mask,
            "response_mask": response_mask,
            "loss_mask": loss_mask,
            "rollout_logprobs": logprobs,
        }
    )
    batch.metadata = {"response_length": int(response_mask.shape[1])}
    old = worker.forward(batch)
    batch["action_log_probs"] = torch.tensor(
        [row["logprobs"] for row in old.loss_fn_outputs], dtype=torch.float32
    ).reshape(response_mask.shape)
    batch["base_action_log_probs"] = batch["action_log_probs"].clone()  # the reference = the policy before the step
    batch["advantages"] = apply_loss_reduction_to_advantages_minibatch(
        advantages=advantages,
        loss_mask=loss_mask,
        loss_reduction=algo.loss_reduction,
        micro_batch_size=worker.cfg.micro_train_batch_size_per_gpu,
        max_seq_len=algo.max_seq_len,
    )
    batch["returns"] = returns
    if world_weight is not None:
        if tuple(world_weight.shape) != tuple(loss_mask.shape):
            raise ValueError(f"world_weight {tuple(world_weight.shape)} != response tensors {tuple(loss_mask.shape)}")
        batch[WORLD_WEIGHT_KEY] = world_weight.to(torch.float32)
    return batch


__all__ = [
    "CPUDispatch",
    "CPUInferenceClient",
    "CPUModelWrapper",
    "CPUPolicyWorker",
    "CPUStrategy",
    "cpu_as_current_device",
    "training_batch",
]
