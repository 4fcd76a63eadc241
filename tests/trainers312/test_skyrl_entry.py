"""The SkyRL entrypoint with ECHO (``openenv_echo.adapters.skyrl.entry``): SkyRL's ``override_entrypoint`` dispatch
reaches it with λ and the role coefficients as overrides, the policy worker SkyRL picks gets the ECHO mixin under
SkyRL's Ray options, and SkyRL's own training loop (``BasePPOExp.run`` → ``RayPPOTrainer.train``) runs an ECHO
step on a CPU.

On a CPU two calls of SkyRL's set-up cannot run, and only they are replaced (``CPUEchoPPOExp``):
``BasePPOExp.get_inference_client`` (vLLM servers, CUDA only; SkyRL's documented hook) answers with a local model
(``CPUInferenceClient``), and ``BasePPOExp._setup_trainer`` imports the FSDP/Megatron workers (``flash_attn``,
CUDA + NCCL) and builds them as Ray GPU actors; the CPU version builds the same generator and trainer through the
entrypoint's own hooks and gives the trainer one in-process CPU policy worker (``CPUDispatch``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

ray = pytest.importorskip("ray")
from skyrl.backends.skyrl_train.workers.worker import PolicyWorkerBase  # noqa: E402
from skyrl.train.trainer import RayPPOTrainer  # noqa: E402
from skyrl.train.utils.callbacks import TrainingCallback  # noqa: E402

from openenv_echo.adapters.rollouts import HFSampler  # noqa: E402
from openenv_echo.adapters.skyrl import entry as skyrl_entry  # noqa: E402
from openenv_echo.adapters.skyrl.entry import EchoPPOExp  # noqa: E402
from openenv_echo.adapters.skyrl.generator import EchoGymGenerator  # noqa: E402
from openenv_echo.adapters.skyrl.gym import ENV_ID  # noqa: E402
from openenv_echo.adapters.skyrl.loss import EchoPolicyWorkerMixin  # noqa: E402
from openenv_echo.adapters.skyrl.trainer import EchoPPOTrainer, echo_policy_worker  # noqa: E402
from openenv_echo.providers import LocalProcessProvider  # noqa: E402
from openenv_echo.roles import Role  # noqa: E402
from openenv_echo.testing.recipes import SYSTEM_PROMPT, tiny_causal_lm  # noqa: E402
from openenv_echo.testing.skyrl_cpu import CPUDispatch, CPUInferenceClient, CPUPolicyWorker  # noqa: E402

ECHO_ARGS = [
    "trainer.algorithm.policy_loss_type=echo_regular",
    "trainer.algorithm.world_model_coeff=0.05",
    "trainer.algorithm.world_loss_target=warning_plus_env",
    "trainer.algorithm.world_role_coeffs={env_output: 1.0, warning: 0.5}",
    "environment.skyrl_gym.openenv_echo.action_field=command",
    "trainer.logger=console",
]


def test_skyrls_override_entrypoint_reaches_echo_with_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from skyrl.train.entrypoints import main_base

    seen: list[Any] = []
    monkeypatch.setattr(skyrl_entry, "run", seen.append)  # what would start Ray and train
    argv = ["main_base", "trainer.override_entrypoint=openenv_echo.adapters.skyrl.entry", *ECHO_ARGS]
    monkeypatch.setattr(sys, "argv", [*argv, "environment.skyrl_gym.openenv_echo.base_url=http://127.0.0.1:9"])
    main_base.main()  # SkyRL's own CLI entry: dispatches before its strict parse, which would refuse our keys
    (cfg,) = seen
    algo = cfg.trainer.algorithm
    assert (algo.world_model_coeff, algo.world_loss_target) == (0.05, "warning_plus_env")
    assert skyrl_entry.echo_config(algo).role_coeffs == {Role.ENV_OUTPUT: 1.0, Role.WARNING: 0.5}
    env = cfg.environment
    assert (env.env_class, env.skyrl_gym.openenv_echo.base_url) == (ENV_ID, "http://127.0.0.1:9")
    with pytest.raises(ValueError, match="world_model_coeff"):  # validated before anything starts
        skyrl_entry.main([*ECHO_ARGS, "trainer.algorithm.world_model_coeff=-1"])
    assert len(seen) == 1


def test_the_policy_worker_skyrl_picks_gets_the_mixin_under_skyrls_ray_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    skyrl_worker = ray.remote(num_gpus=1)(PolicyWorkerBase)  # how SkyRL declares its FSDP/Megatron workers
    echo = echo_policy_worker(skyrl_worker)
    assert echo._default_options == {"num_gpus": 1}
    cls = echo.__ray_metadata__.modified_class.__ray_actor_class__
    assert cls.__mro__[1:3] == (EchoPolicyWorkerMixin, PolicyWorkerBase)
    assert echo_policy_worker(echo) is echo
    built: list[tuple[Any, ...]] = []
    monkeypatch.setattr(RayPPOTrainer, "build_models", lambda self, *workers: built.append(workers))
    critic, ref = object(), object()
    EchoPPOTrainer.build_models(object.__new__(EchoPPOTrainer), skyrl_worker, critic, ref)
    ((policy, c, r),) = built
    assert (c, r) == (critic, ref)
    assert issubclass(policy.__ray_metadata__.modified_class.__ray_actor_class__, EchoPolicyWorkerMixin)


class _Logs(TrainingCallback):  # type: ignore[misc]
    def __init__(self) -> None:
        self.logs: list[dict[str, Any]] = []

    def on_log(self, trainer: Any, callback_input: Any, control: Any) -> None:
        self.logs.append(dict(callback_input.logs or {}))


class CPUEchoPPOExp(EchoPPOExp):
    """``EchoPPOExp`` with the two CPU replacements the module docstring names, and SkyRL's own prompt dataset
    filtered in this process (``BasePPOExp`` filters it in 8 spawned processes: 30 s at load 11 on 2 cores)."""

    def get_train_dataset(self) -> Any:
        from skyrl.train.dataset import PromptDataset

        return PromptDataset(
            datasets=self.cfg.data.train_data,
            tokenizer=self.tokenizer,
            max_prompt_length=self.cfg.trainer.max_prompt_length,
            num_workers=1,
        )

    def get_inference_client(self) -> CPUInferenceClient:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(self.cfg.trainer.policy.model.path)
        eos = [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        sampler = HFSampler(self.model, self.tokenizer, eos_ids=eos)
        return CPUInferenceClient(sampler, self.tokenizer, self.cfg.generator.sampling_params.max_generate_length)

    def _setup_trainer(self) -> Any:
        client = self.get_inference_client()
        generator = self.get_generator(self.cfg, self.tokenizer, client)
        trainer = self.get_trainer(
            self.cfg, self.get_tracker(), self.tokenizer, self.train_dataset, self.eval_dataset, client, generator, None
        )
        trainer.trajectory_logger = self.get_trajectory_logger()
        trainer.dispatch = CPUDispatch(CPUPolicyWorker(self.cfg.trainer, self.model))
        self.logs = _Logs()
        trainer.add_callback(self.logs)
        self.trainer = trainer
        return trainer


def _policy_and_data(tmp_path: Path, tokenizer: Any) -> tuple[Path, Path]:
    model_dir = tmp_path / "policy"
    tokenizer.save_pretrained(model_dir)
    tiny_causal_lm(tokenizer).save_pretrained(model_dir)
    data = tmp_path / "train.jsonl"
    rows = [  # SkyRL's dataset layout: prompt, env_class, and the env's extras (one world per prompt)
        {"prompt": [{"role": "system", "content": SYSTEM_PROMPT}], "env_class": ENV_ID,
         "reset_options": {"seed": seed, "max_steps": 2}}
        for seed in (0, 1)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model_dir, data


@pytest.mark.trainer
@pytest.mark.timeout(900)
@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash_attn installed: a GPU install")
def test_the_entrypoint_runs_through_ray_to_the_first_gpu_only_call(qwen_tokenizer: Any, tmp_path: Path) -> None:
    """``python -m skyrl.train.entrypoints.main_base trainer.override_entrypoint=...`` as a SkyRL user runs it, on a
    CPU: SkyRL's dispatch, ``main``, ``initialize_ray`` (local Ray), the ``echo_entrypoint`` Ray task with the config
    pickled into it, ``EchoPPOExp.__init__`` (tokenizer, SkyRL's dataset), then ``BasePPOExp._setup_trainer``, whose
    first call, the FSDP worker import, needs ``flash_attn`` (CUDA only): where SkyRL stops on a CPU."""
    model_dir, data = _policy_and_data(tmp_path, qwen_tokenizer)
    cmd = [sys.executable, "-m", "skyrl.train.entrypoints.main_base"]
    cmd += ["trainer.override_entrypoint=openenv_echo.adapters.skyrl.entry", *ECHO_ARGS]
    cmd += ["environment.skyrl_gym.openenv_echo.base_url=http://127.0.0.1:9", f"trainer.policy.model.path={model_dir}"]
    cmd += [f"data.train_data=['{data}']", "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=1"]
    cmd += ["trainer.eval_interval=-1", f"trainer.ckpt_path={tmp_path / 'ckpt'}", "generator.n_samples_per_prompt=2"]
    cmd += [f"trainer.export_path={tmp_path / 'export'}", "trainer.placement.colocate_all=false"]
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]), "RAY_ADDRESS": ""}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "ray::echo_entrypoint()" in out, out[-4000:]
    trace = out[out.index("ray::echo_entrypoint()") :]  # the Ray task's traceback, relayed by ray.get in main
    assert "in _setup_trainer" in trace and "fsdp_worker.py" in trace, out[-4000:]
    assert "No module named 'flash_attn'" in trace, out[-4000:]
    assert "Total dataset size: 2" in out  # EchoPPOExp.__init__ ran SkyRL's dataset inside the task


@pytest.fixture(scope="module")
def terminal() -> Iterator[str]:
    with LocalProcessProvider("terminal", max_sessions=8, idle_timeout_s=None, log_level="warning") as env:
        yield env.base_url


@pytest.mark.trainer
@pytest.mark.timeout(900)
def test_skyrls_training_loop_runs_an_echo_step_on_cpu(terminal: str, qwen_tokenizer: Any, tmp_path: Path) -> None:
    model_dir, data = _policy_and_data(tmp_path, qwen_tokenizer)
    cfg = skyrl_entry.parse_cfg(
        [
            *ECHO_ARGS,
            f"environment.skyrl_gym.openenv_echo.base_url={terminal}",
            f"trainer.policy.model.path={model_dir}",
            f"data.train_data=['{data}']",
            "data.dataloader.num_workers=0",
            "trainer.placement.colocate_all=false",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=1",
            "trainer.micro_train_batch_size_per_gpu=1",
            "trainer.policy.optimizer_config.lr=0.001",
            "trainer.eval_interval=-1",
            "trainer.ckpt_interval=-1",
            "trainer.resume_mode=none",
            f"trainer.ckpt_path={tmp_path / 'ckpt'}",
            f"trainer.export_path={tmp_path / 'export'}",
            "generator.n_samples_per_prompt=2",
            "generator.max_turns=2",
            "generator.sampling_params.max_generate_length=10",
            "generator.max_input_length=4096",
            "generator.inference_engine.enable_ray_prometheus_stats=false",  # vLLM's metrics: no vLLM here
        ]
    )
    exp = CPUEchoPPOExp(cfg)
    before = {n: p.detach().clone() for n, p in exp.get_inference_client().sampler.model.named_parameters()}
    exp.run()  # SkyRL's BasePPOExp.run: asyncio.run(trainer.train())
    assert isinstance(exp.trainer, EchoPPOTrainer) and isinstance(exp.trainer.generator, EchoGymGenerator)
    assert exp.trainer.global_step == 1
    (logs,) = exp.logs.logs  # one step, logged by SkyRL's loop
    assert logs["trainer/global_step"] == 1
    assert logs["policy/loss_metrics/echo/world_loss"] > 0  # λ reached the registered loss through the batch
    assert logs["policy/grad_norm"] > 0
    after = dict(exp.trainer.dispatch.policy.model.model.named_parameters())
    assert any(not torch.equal(after[n], p) for n, p in before.items())  # the optimizer stepped the policy
