"""The CPU reference demo: the quick mode end to end (real env server, real tokenizer, real model, the objective),
plus the pieces whose failure would silently corrupt its numbers (KV-cached sampling, TITO, checkpoint choice)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

from openenv_echo.demo import ARMS, DemoConfig, Seeds  # noqa: E402
from openenv_echo.roles import Role  # noqa: E402
from openenv_echo.trajectory import ObservationRecord, StepRecord, Trajectory  # noqa: E402
from openenv_echo.wire import env_output, warning  # noqa: E402


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    from openenv_echo.demo import run_demo

    out = tmp_path_factory.mktemp("demo")
    cfg = DemoConfig.preset("quick", out=out, progress=False)
    report = run_demo(cfg, command="openenv-echo demo --quick")
    return report, out


# -- acceptance: the quick mode ----------------------------------------------------------------------------
def test_quick_mode_writes_report_and_plot(quick_report: tuple[dict[str, Any], Path]) -> None:
    report, out = quick_report
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["summary"] == json.loads(json.dumps(report["summary"]))
    for key in (
        "command",
        "config",
        "seeds",
        "environment",
        "model",
        "data",
        "warm_start",
        "arms",
        "summary",
        "timings_s",
        "plots",
        "versions",
    ):
        assert key in on_disk, key
    assert on_disk["config"]["mode"] == "quick"
    assert set(on_disk["arms"]) == set(ARMS)
    seeds = on_disk["seeds"]
    assert not set(seeds["train"]) & set(seeds["test"])
    assert not set(seeds["train"]) & set(seeds["validation"])
    assert not set(seeds["validation"]) & set(seeds["test"])
    timings = on_disk["timings_s"]
    for phase in (
        "server_start",
        "expert_episodes",
        "warm_start",
        "rl_grpo",
        "rl_grpo_echo",
        "rl_verifier_free",
        "total",
    ):
        assert timings[phase] >= 0, phase
    table = (out / "summary.md").read_text()
    for row in on_disk["summary"]:
        assert f"| {row['label']} | {row['test_env_ce_start']:.3f} → {row['test_env_ce_final']:.3f} |" in table
    assert "wall time" in table
    png = out / on_disk["plots"][0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000
    # the model, tokenizer and env really are what the report says
    assert on_disk["model"]["parameters"] > 1_000_000
    assert on_disk["model"]["tokenizer"]["vocab"] == on_disk["model"]["vocab_size"]
    assert "LocalProcessProvider" in on_disk["environment"]["server"]
    assert on_disk["data"]["expert_test_reward"] == 0.0 or on_disk["data"]["expert_test_reward"] > 0


def test_every_arm_starts_from_the_same_checkpoint(quick_report: tuple[dict[str, Any], Path]) -> None:
    report, _ = quick_report
    starts = [json.dumps(a["evals"][0], sort_keys=True) for a in report["arms"].values()]
    assert len(set(starts)) == 1
    assert report["warm_start"]["env_tokens_trained"] == 0
    assert report["warm_start"]["action_tokens_trained"] > 0
    for arm, a in report["arms"].items():
        assert [t["step"] for t in a["train"]] == list(range(1, report["config"]["rl_steps"] + 1)), arm
        assert a["evals"][-1]["step"] == report["config"]["rl_steps"]
        # same prompt seeds for every arm; all training prompts are train seeds
        assert [t["seeds"] for t in a["train"]] == [t["seeds"] for t in report["arms"]["grpo"]["train"]]
        assert all(s in report["seeds"]["train"] for t in a["train"] for s in t["seeds"])
        assert all(t["env_tokens"] > 0 and t["action_tokens"] > 0 for t in a["train"])


def test_echo_arms_lower_held_out_env_ce(quick_report: tuple[dict[str, Any], Path]) -> None:
    report, _ = quick_report
    rows = {r["arm"]: r for r in report["summary"]}
    for arm in ("grpo_echo", "verifier_free"):
        assert rows[arm]["test_env_ce_final"] < rows[arm]["test_env_ce_start"], rows[arm]
    # the λ = 0 arm trains no env token: its world loss is exactly 0 at every step
    assert all(t["world_loss"] == 0.0 for t in report["arms"]["grpo"]["train"])
    assert all(t["world_loss"] > 0.0 for t in report["arms"]["grpo_echo"]["train"])
    assert all(t["policy_loss"] == 0.0 for t in report["arms"]["verifier_free"]["train"])
    ce = report["arms"]["grpo_echo"]["final"]["test"]["env_ce"]
    assert ce["tokens"] == report["data"]["env_ce_sets"]["test"]["env_tokens"]
    assert ce["nats_per_byte"] == pytest.approx(ce["nats_per_token"] * ce["tokens"] / ce["bytes"])
    # the novel-line CE is a subset of the same targets: unseen lines exist in held-out machines and are scored
    assert 0 < ce["novel_tokens"] == report["data"]["env_ce_sets"]["test"]["novel_line_tokens"] < ce["tokens"]
    assert 0 < ce["novel_nats_per_token"] < 20


# -- the sampler: KV-cached, batched, token-in-token-out ------------------------------------------------------
def test_cached_greedy_sampling_matches_full_forward_and_tito() -> None:
    """Greedy actions from the batched KV-cache sampler are exactly the argmax of a full forward pass over the
    assembled TITO sequence, so the cache bookkeeping (holes, positions, per-episode caches) is right."""
    from openenv_echo.demo.model import build_scratch_model
    from openenv_echo.demo.rollout import PolicyRunner, env_server
    from openenv_echo.tokenize import build_tokenizer

    tok = build_tokenizer("qwen")
    model = build_scratch_model("tiny", tok, max_positions=2048, seed=0)
    with env_server() as (url, _):
        runner = PolicyRunner(url, tok, max_env_steps=3, max_context=2048, max_action_tokens=6)
        try:
            results = runner.run(model, [11, 11, 12], temperature=0.0, generator=None)
        finally:
            runner.close()
    assert [r.seed for r in results] == [11, 11, 12]
    for r in results:
        ids = torch.tensor(r.sequence.input_ids)
        roles = torch.tensor(r.sequence.role_ids)
        with torch.no_grad():
            argmax = model(input_ids=ids[None]).logits[0].argmax(-1)
        pos = torch.nonzero(roles == Role.ACTION.code).flatten()
        assert len(pos) > 0
        assert torch.equal(argmax[pos - 1], ids[pos])
        # the recorded trajectory carries the sampled ids verbatim (token-in-token-out)
        sampled = [i for st in r.trajectory.steps for i in (st.action_token_ids or [])]
        assert sampled == ids[pos].tolist()
        assert r.turns == len(r.trajectory.steps) == 3
    assert results[0].sequence.input_ids.tolist() == results[1].sequence.input_ids.tolist()  # greedy, same seed


def test_rl_step_skips_zero_gradient_batches_and_trains_otherwise() -> None:
    """With no reward variance and λ = 0 the gradient is exactly zero: the step must leave the weights untouched even
    though AdamW has momentum from an earlier step; a reward difference, or λ > 0, must move them."""
    from openenv_echo.demo.model import build_scratch_model
    from openenv_echo.demo.rollout import PolicyRunner, env_server
    from openenv_echo.demo.train import arm_config, rl_step
    from openenv_echo.tokenize import build_tokenizer

    tok = build_tokenizer("qwen")
    model = build_scratch_model("tiny", tok, max_positions=2048, seed=0)
    with env_server() as (url, _):
        runner = PolicyRunner(url, tok, max_env_steps=2, max_context=2048, max_action_tokens=6)
        try:
            results = runner.run(model, [21, 21], temperature=1.0, generator=torch.Generator().manual_seed(0))
        finally:
            runner.close()
    seqs = [r.sequence for r in results]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def weights() -> torch.Tensor:
        return torch.cat([p.detach().flatten().clone() for p in model.parameters()])

    def step(rewards: list[float], arm: str) -> dict[str, float]:
        return rl_step(model, opt, seqs, rewards, 2, arm_config(arm, 0.1), tok, micro_batch=2, step=0)

    w0 = weights()
    moved = step([1.0, 0.0], "grpo")  # a reward difference: a real update (and Adam momentum from now on)
    assert moved["skipped"] == 0.0 and moved["grad_norm"] > 0
    w1 = weights()
    assert not torch.equal(w0, w1)
    flat = step([0.5, 0.5], "grpo")  # no variance, λ = 0: nothing to learn, the weights must not move
    assert flat["skipped"] == 1.0 and flat["grad_norm"] == 0.0 and flat["world_loss"] == 0.0
    assert torch.equal(weights(), w1)
    echo = step([0.5, 0.5], "grpo_echo")  # same rewards, λ > 0: the world term still trains
    assert echo["skipped"] == 0.0 and echo["world_loss"] > 0
    assert not torch.equal(weights(), w1)


# -- pieces ------------------------------------------------------------------------------------------------
def test_checkpoint_is_chosen_on_validation_not_test() -> None:
    from openenv_echo.demo.run import _choose

    def ev(step: int, val_reward: float, test_reward: float, val_ce: float = 5.0) -> dict[str, Any]:
        pol = {"success": 0.0, "mean_reward": 0.0}
        return {
            "step": step,
            "val": {"policy": {**pol, "mean_reward": val_reward}, "env_ce": {"nats_per_token": val_ce}},
            "test": {"policy": {**pol, "mean_reward": test_reward}, "env_ce": {"nats_per_token": 1.0}},
        }

    chosen = _choose([ev(0, 0.1, 0.9), ev(4, 0.5, 0.0), ev(8, 0.5, 0.2, val_ce=4.0)])
    assert chosen["step"] == 8  # best validation reward, then lower validation CE; test numbers ignored


def test_seeds_are_disjoint_and_validated() -> None:
    s = Seeds.make(10, 3, 4)
    s.check_disjoint()
    assert len(set(s.train) | set(s.val) | set(s.test)) == 17
    with pytest.raises(ValueError):
        Seeds.make(0, 3, 4)
    with pytest.raises(ValueError):
        Seeds(train=[1, 2], val=[2], test=[3]).check_disjoint()


@pytest.mark.parametrize(
    "overrides",
    [
        {"model": "gpt5"},
        {"rl_group": 1},
        {"world_model_coeff": 0.0},
        {"arms": ("grpo", "ppo")},
        {"arms": ()},
        {"n_test": 0},
        {"temperature": 0.0},
        {"max_context": 100},
        {"no_such_option": 1},
    ],
)
def test_bad_config_is_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        DemoConfig.preset("quick", **overrides)


def test_bad_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="quick"):
        DemoConfig.preset("medium")


def test_cli_rejects_bad_options(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from openenv_echo.demo.cli import demo

    app = typer.Typer()
    app.command()(demo)
    result = CliRunner().invoke(app, ["--quick", "--out", str(tmp_path), "--model", "nope"])
    assert result.exit_code != 0
    assert "model" in result.output
    assert not (tmp_path / "report.json").exists()


def test_verbatim_overlap_counts_lines_seen_in_training() -> None:
    from openenv_echo.demo.evaluate import verbatim_overlap

    def traj(*outputs: str) -> Trajectory:
        return Trajectory(
            steps=[
                StepRecord(
                    action={"command": "x"}, observation=ObservationRecord(segments=[warning("$ x\n"), env_output(o)])
                )
                for o in outputs
            ]
        )

    stats = verbatim_overlap([traj("a\nb\n", "c\n")], [traj("a\nz\n", "c\n")])
    assert stats["held_out_lines"] == 3
    assert stats["lines_seen_in_training"] == pytest.approx(2 / 3)
    assert stats["observations_seen_in_training"] == pytest.approx(1 / 2)


def test_novel_line_mask_maps_env_targets_to_their_lines() -> None:
    """Each env target token is flagged novel exactly when its line never occurs in training; tokens that split a
    multi-byte character ('●' in `systemctl status`, unknown to a tokenizer trained on other text) are handled."""
    from openenv_echo.demo.evaluate import build_ce_set, env_texts, novel_target_mask, training_lines
    from openenv_echo.demo.rollout import env_server, expert_episodes
    from openenv_echo.tokenize import build_tokenizer

    tok = build_tokenizer("qwen")
    with env_server() as (url, _):
        train = expert_episodes(url, [1000, 1001, 1002], max_env_steps=8)
        test = expert_episodes(url, [900000, 900001], max_env_steps=8)
    text = "".join(x for t in test for x in env_texts(t))
    assert any(ord(c) > 127 for c in text)  # the multi-byte path is exercised
    seen = training_lines(train)
    ce = build_ce_set("test", [900000, 900001], test, tok, seen)
    assert 0 < ce.novel_tokens < ce.env_tokens
    for seq, traj, novel in zip(ce.sequences, test, ce.novel, strict=True):
        all_lines = training_lines([traj])
        assert not bool(novel_target_mask(seq, traj, tok, all_lines).any())  # everything seen: nothing novel
        everything = novel_target_mask(seq, traj, tok, set())
        assert bool(everything.any()) and not bool((novel & ~everything).any())
        # the novel tokens decode to text made only of novel lines' characters
        decoded = tok.decode(seq.input_ids[novel.numpy()].tolist())
        novel_lines = [
            line.strip()
            for x in env_texts(traj)
            for line in x.splitlines()
            if line.strip() and line.strip() not in seen
        ]
        assert decoded.split() == " ".join(novel_lines).split()
