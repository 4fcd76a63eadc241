"""The CPU reference demo: the quick mode end to end as a smoke test on both envs (real env server, tokenizer, model,
objective; structure only, no effect sign from a short run), the learning machinery on effects that cannot come from
luck (generic pretraining, action-only SFT, direct CE, the zero-gradient skip), and the pieces whose failure would
silently corrupt its numbers (KV-cached sampling, TITO, λ choice, references, intervals, claims, the READMEs)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

# the quick run trains a model and plays episodes: about a minute of CPU, much longer wall time on a loaded machine
pytestmark = pytest.mark.timeout(1200)

from openenv_echo.demo import ARMS, DemoConfig, Seeds  # noqa: E402
from openenv_echo.demo.envs import TERMINAL  # noqa: E402
from openenv_echo.envs.splits import TASK_SPLITS  # noqa: E402
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


# -- the quick mode: a smoke test of every phase (structure only; no effect sign is asserted) -------------------
def test_quick_mode_writes_report_tables_and_plot(quick_report: tuple[dict[str, Any], Path]) -> None:
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
        "start_checkpoint",
        "baselines",
        "lambda_selection",
        "arms",
        "sweep_runs",
        "summary",
        "comparisons",
        "timings_s",
        "load_average",
        "plots",
        "versions",
    ):
        assert key in on_disk, key
    assert on_disk["config"]["mode"] == "quick"
    assert "SMOKE TEST" in on_disk["note"]
    assert set(on_disk["arms"]) == set(ARMS) == {"grpo", "grpo_echo", "direct_ce"}
    seeds = on_disk["seeds"]
    assert not set(seeds["train"]) & set(seeds["test"])
    assert not set(seeds["train"]) & set(seeds["validation"])
    assert not set(seeds["validation"]) & set(seeds["test"])
    timings = on_disk["timings_s"]
    for phase in (
        "server_start",
        "expert_episodes",
        "start_generic_pretraining",
        "start_sft",
        "rl_grpo",
        "rl_direct_ce",
        "test_eval",
    ):
        assert timings[phase] >= 0, phase
    assert timings["total"] > 0 and timings["cpu_total"] > 0
    phases = [v for k, v in timings.items() if k not in ("total", "cpu_total")]
    assert sum(phases) <= timings["total"] + 0.01 * len(phases)  # consecutive laps of one wall clock, 0.01 s rounding
    load = on_disk["load_average"]
    assert len(load["start"]) == len(load["end"]) == 3 and load["cores"] >= 1
    assert 0 <= load["mean_1min_at_laps"] <= load["max_1min_at_laps"]
    md = (out / "summary.md").read_text()
    assert "SMOKE TEST" in md and "wall time" in md
    from openenv_echo.demo.tables import summary_markdown

    assert md == summary_markdown(on_disk)
    png = out / on_disk["plots"][0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000
    assert on_disk["model"]["tokenizer"]["vocab"] == on_disk["model"]["vocab_size"]
    assert "LocalProcessProvider" in on_disk["environment"]["server"]
    nov = on_disk["data"]["novelty_of_test_observations"]
    assert 0 <= nov["hostname_seen_in_training"] <= nov["held_out_machines"] == len(seeds["test"])


def test_report_has_references_arms_seeds_and_lambda_selection(quick_report: tuple[dict[str, Any], Path]) -> None:
    report, _ = quick_report
    b = report["baselines"]
    assert b["uniform"] == pytest.approx(math.log(report["model"]["vocab_size"]))
    for k in ("uniform", "unigram", "bigram", "start"):
        assert isinstance(b[k], float) and 0 < b[k] < 20, k
    start = report["start_checkpoint"]
    assert b["start"] == start["after"]["test"]["env_ce"]["nats_per_token"]
    assert b["smoothing"]["split"] == "validation"
    corpus = start["generic_pretraining"]["corpus"]
    assert corpus["chars"] > 100_000 and corpus["tokens"] > 10_000 and len(corpus["sha256"]) == 64
    assert start["generic_pretraining"]["tokens_seen"] > 0 and start["sft"]["action_tokens_trained"] > 0
    # the SFT checkpoint is chosen on validation by its rule: the highest mean reward, ties to the later one
    picks = start["sft"]["checkpoints"]
    assert [p["step"] for p in picks] == list(range(1, report["config"]["sft_steps"] + 1))  # quick: every step
    best = max(picks, key=lambda p: (p["val_policy"]["mean_reward"], p["step"]))
    assert start["sft"]["chosen_step"] == best["step"]
    assert start["after"]["val"]["policy"] == best["val_policy"]  # the start is that checkpoint
    sel = report["lambda_selection"]
    assert sel["split"] == "validation" and sel["values"] == report["config"]["lambdas"]
    assert [r["lambda"] for r in sel["validation"]] == sel["values"] and sel["chosen"] > 0
    assert report["arms"]["grpo_echo"]["lambda"] == sel["chosen"] and report["arms"]["grpo"]["lambda"] == 0
    n_seeds = report["config"]["n_seeds"]
    for arm, a in report["arms"].items():
        assert len(a["seeds"]) == n_seeds, arm
        summ = a["summary"]["test_env_ce"]
        per_seed = [s["final"]["test"]["env_ce"]["nats_per_token"] for s in a["seeds"]]
        assert summ["per_seed"] == per_seed and summ["mean"] == pytest.approx(sum(per_seed) / len(per_seed))
        assert "ci95" in summ
        assert set(a["summary"]["test_success"]) >= {"mean", "ci95", "binomial_ci95"}
    # test is evaluated once, only for the chosen settings: the other λ of the sweep have no test figures
    assert all("final" not in r for r in report["sweep_runs"])
    assert {r["lambda"] for r in report["sweep_runs"]} == set(sel["values"]) - {0.0, sel["chosen"]}
    assert sel["seeds"] == report["seeds"]["rl"][: report["config"]["sweep_seeds"]]
    assert n_seeds > report["config"]["sweep_seeds"]  # the quick mode exercises seeds outside the sweep too
    env_ce = report["arms"]["grpo"]["summary"]["test_env_ce"]
    assert env_ce["n"] == len(env_ce["per_seed"]) >= 2  # several seeds, so an interval exists
    assert env_ce["mean"] == pytest.approx(math.fsum(env_ce["per_seed"]) / env_ce["n"])
    assert env_ce["ci95"][0] <= env_ce["mean"] <= env_ce["ci95"][1]
    assert set(report["comparisons"]["echo_minus_grpo"]) == {
        "test_env_ce",
        "test_all_env_ce",
        "test_warning_env_ce",
        "test_novel_env_ce",
        "test_success",
        "test_mean_reward",
    }
    # the chosen arms carry held-out curves at every curve point, starting from the shared start
    from openenv_echo.demo.experiment import curve_steps

    steps = [0, *curve_steps(DemoConfig.preset("quick"))]
    for arm, a in report["arms"].items():
        assert [p["step"] for p in a["curve"]] == steps, arm
        for s in a["seeds"]:
            assert [p["step"] for p in s["test_curve"]] == steps
            assert s["test_curve"][0]["test"] == start["after"]["test"]
            assert s["test_curve"][-1]["test"] == s["final"]["test"]


def test_every_run_starts_from_the_same_checkpoint_with_the_same_prompts(
    quick_report: tuple[dict[str, Any], Path],
) -> None:
    report, _ = quick_report
    runs = [s for a in report["arms"].values() for s in a["seeds"]] + report["sweep_runs"]
    starts = {json.dumps(r["evals"][0], sort_keys=True) for r in runs}
    assert len(starts) == 1
    first = {s["seed"]: s["train"] for s in report["arms"]["grpo"]["seeds"]}
    for r in runs:  # within an RL seed every run sees the same machines in the same order
        assert [t["step"] for t in r["train"]] == list(range(1, report["config"]["rl_steps"] + 1))
        assert [t["seeds"] for t in r["train"]] == [t["seeds"] for t in first[r["seed"]]]
        assert all(s in report["seeds"]["train"] for t in r["train"] for s in t["seeds"])
        assert all(t["env_tokens"] > 0 and t["action_tokens"] > 0 for t in r["train"])
    # the objectives are what the arms say: λ = 0 trains no env token, direct CE trains no action token
    assert all(t["world_loss"] == 0.0 for s in report["arms"]["grpo"]["seeds"] for t in s["train"])
    assert all(t["world_loss"] > 0.0 for s in report["arms"]["grpo_echo"]["seeds"] for t in s["train"])
    assert all(t["policy_loss"] == 0.0 for s in report["arms"]["direct_ce"]["seeds"] for t in s["train"])
    ce = report["arms"]["grpo_echo"]["seeds"][0]["final"]["test"]["env_ce"]
    assert ce["tokens"] == report["data"]["env_ce_sets"]["test"]["env_tokens"]
    assert ce["nats_per_byte"] == pytest.approx(ce["nats_per_token"] * ce["tokens"] / ce["bytes"])


def test_a_rerun_resumes_from_the_stored_checkpoints(quick_report: tuple[dict[str, Any], Path]) -> None:
    """Rerunning the same configuration into the same directory reuses the start checkpoint and every run (same
    numbers, no training), and the report says it is complete."""
    from openenv_echo.demo import run_demo

    report, out = quick_report
    assert report["status"] == {
        "complete": True,
        "rl_seeds_done": report["seeds"]["rl"],
        "rl_seeds_planned": report["seeds"]["rl"],
    }
    stored = {p.name: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()}
    assert "start.pt" in stored and len(stored) == 1 + len(report["lambda_selection"]["values"]) + 1 + 3
    again = run_demo(DemoConfig.preset("quick", out=out, progress=False), command="openenv-echo demo --quick")
    assert again["arms"] == json.loads(json.dumps(report["arms"]))
    assert again["baselines"] == report["baselines"]
    # nothing was retrained or re-evaluated: no stored checkpoint was rewritten
    assert {p.name: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()} == stored


def test_summarize_rebuilds_a_finished_runs_summaries_tables_and_plot(
    quick_report: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    """`python -m openenv_echo.demo.summarize OUT` re-derives every summary from the per-seed results alone."""
    import shutil

    from openenv_echo.demo.summarize import main
    from openenv_echo.demo.tables import summary_markdown

    _, out = quick_report
    copy = tmp_path / "out"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("checkpoints"))
    report = json.loads((copy / "report.json").read_text())  # as written (a rerun may have rewritten it)
    stripped = json.loads((copy / "report.json").read_text())
    for key in ("summary", "comparisons"):
        del stripped[key]
    for a in stripped["arms"].values():
        del a["summary"], a["curve"]
    (copy / "report.json").write_text(json.dumps(stripped))
    (copy / "summary.md").unlink()
    (copy / report["plots"][0]).unlink()
    main([str(copy)])
    assert json.loads((copy / "report.json").read_text()) == report
    assert (copy / "summary.md").read_text() == summary_markdown(report)
    assert (copy / report["plots"][0]).read_bytes()[:4] == b"\x89PNG"


def test_cli_quick_output_says_it_is_a_smoke_test(quick_report: tuple[dict[str, Any], Path]) -> None:
    from openenv_echo.demo.experiment import SMOKE_NOTE
    from openenv_echo.demo.tables import summary_markdown

    report, _ = quick_report
    assert "SMOKE TEST" in SMOKE_NOTE and "not evidence" in SMOKE_NOTE
    assert summary_markdown(report).startswith(f"**{SMOKE_NOTE}**")  # what `openenv-echo demo --quick` prints


# -- the learning machinery, on effects that cannot come from luck ------------------------------------------------
def test_direct_ce_arm_lowers_env_ce_on_a_fixed_batch() -> None:
    """Five direct-CE steps on a fixed batch of expert episodes lower that batch's env CE by far more than any noise
    (from about ln V at initialisation); five GRPO steps with equal rewards (λ = 0) leave it exactly unchanged."""
    from openenv_echo.demo.evaluate import build_ce_set, env_ce
    from openenv_echo.demo.model import build_scratch_model
    from openenv_echo.demo.policy import corpus_of
    from openenv_echo.demo.rollout import env_server, expert_episodes
    from openenv_echo.demo.train import arm_config, rl_step
    from openenv_echo.tokenize import build_tokenizer

    with env_server(TERMINAL) as (url, _):
        eps = expert_episodes(url, TERMINAL, [1000, 1001], max_env_steps=3)
    tok = build_tokenizer("qwen", corpus=corpus_of(TERMINAL, eps), vocab_size=1024)
    ce_set = build_ce_set("fixed", [1000, 1001], eps, tok, set())
    seqs = ce_set.sequences
    for arm, rewards in (("grpo", [0.5, 0.5]), ("direct_ce", [0.0, 1.0])):
        torch.manual_seed(0)
        model = build_scratch_model("nano", tok, max_positions=4096, seed=0)
        before = env_ce(model, ce_set, tok)["nats_per_token"]
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for step in range(5):
            rl_step(model, opt, seqs, rewards, 2, arm_config(arm, 0.1), tok, micro_batch=2, step=step)
        after = env_ce(model, ce_set, tok)["nats_per_token"]
        if arm == "grpo":
            assert after == before
        else:
            assert after < before - 1.0, (before, after)


# -- the sampler: KV-cached, batched, token-in-token-out ------------------------------------------------------
def test_cached_greedy_sampling_matches_full_forward_and_tito() -> None:
    """Greedy actions from the batched KV-cache sampler are exactly the argmax of a full forward pass over the
    assembled TITO sequence, so the cache bookkeeping (holes, positions, per-episode caches) is right."""
    from openenv_echo.demo.model import build_scratch_model
    from openenv_echo.demo.rollout import PolicyRunner, env_server
    from openenv_echo.tokenize import build_tokenizer

    tok = build_tokenizer("qwen")
    model = build_scratch_model("tiny", tok, max_positions=2048, seed=0)
    with env_server(TERMINAL) as (url, _):
        runner = PolicyRunner(url, tok, TERMINAL, max_env_steps=3, max_context=2048, max_action_tokens=6)
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
    with env_server(TERMINAL) as (url, _):
        runner = PolicyRunner(url, tok, TERMINAL, max_env_steps=2, max_context=2048, max_action_tokens=6)
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
    assert moved["skipped"] == 0.0 and moved["grad_norm"] > 0 and moved["groups_with_reward_variance"] == 1
    w1 = weights()
    assert not torch.equal(w0, w1)
    flat = step([0.5, 0.5], "grpo")  # no variance, λ = 0: nothing to learn, the weights must not move
    assert flat["skipped"] == 1.0 and flat["grad_norm"] == 0.0 and flat["world_loss"] == 0.0
    assert flat["groups_with_reward_variance"] == 0
    assert torch.equal(weights(), w1)
    echo = step([0.5, 0.5], "grpo_echo")  # same rewards, λ > 0: the world term still trains
    assert echo["skipped"] == 0.0 and echo["world_loss"] > 0
    assert not torch.equal(weights(), w1)


# -- pieces ------------------------------------------------------------------------------------------------
def _run(lam: float, val_reward: float, val_ce: float, arm: str = "grpo_echo", seed: int = 0) -> dict[str, Any]:
    val = {"policy": {"success": val_reward, "mean_reward": val_reward}, "env_ce": {"nats_per_token": val_ce}}
    return {
        "arm": arm,
        "lambda": lam,
        "seed": seed,
        "evals": [{"step": 0, "val": val}],
        "updates": 1,
        "policy_updates": 1,
    }


def test_lambda_is_chosen_on_validation_by_the_written_rule() -> None:
    from openenv_echo.demo.summarize import LAMBDA_RULE, choose_lambda

    runs = [
        _run(0.0, 0.30, 3.0, "grpo"),
        _run(0.01, 0.30, 2.9),  # qualifies (reward >= GRPO's), CE 2.9
        _run(0.05, 0.35, 2.7),  # qualifies, lowest CE: chosen
        _run(0.1, 0.20, 2.5),  # lowest CE but below GRPO's reward: not eligible
        _run(1.0, 0.9, 0.1, "direct_ce"),  # the reference arm never enters the sweep
    ]
    sel = choose_lambda(runs, [0.0, 0.01, 0.05, 0.1])
    assert sel["chosen"] == 0.05 and sel["qualified"] == [0.01, 0.05]
    assert sel["split"] == "validation" and sel["rule"] == LAMBDA_RULE
    assert [r["env_ce"]["mean"] for r in sel["validation"]] == [3.0, 2.9, 2.7, 2.5]
    # none qualifies: the highest validation reward, then lower CE
    runs = [_run(0.0, 0.5, 3.0, "grpo"), _run(0.01, 0.2, 2.0), _run(0.05, 0.4, 2.9), _run(0.1, 0.4, 2.8)]
    assert choose_lambda(runs, [0.0, 0.01, 0.05, 0.1])["chosen"] == 0.1
    # means over seeds decide, not one seed
    runs = [
        _run(0.0, 0.3, 3.0, "grpo", 0),
        _run(0.0, 0.3, 3.0, "grpo", 1),
        _run(0.01, 0.3, 2.0, seed=0),
        _run(0.01, 0.3, 3.2, seed=1),
        _run(0.1, 0.3, 2.5, seed=0),
        _run(0.1, 0.3, 2.5, seed=1),
    ]
    sel = choose_lambda(runs, [0.0, 0.01, 0.1])
    assert sel["chosen"] == 0.1
    env_ce = sel["validation"][1]["env_ce"]  # λ = 0.01, seeds 2.0 and 3.2: mean 2.6 inside a spread interval
    assert env_ce["mean"] == pytest.approx(2.6) and env_ce["ci95"][0] < 2.0 and env_ce["ci95"][1] > 3.2
    with pytest.raises(ValueError, match="no run"):
        choose_lambda(runs, [0.0, 0.5])


def test_seeds_are_disjoint_and_validated() -> None:
    s = Seeds.make(10, 3, 4)
    s.check_disjoint()
    assert len(set(s.train) | set(s.val) | set(s.test)) == 17
    # the demo's splits are the env's own task splits (the seeds OpenEnv's task routes serve)
    assert set(s.train) <= set(TASK_SPLITS["train"])
    assert set(s.val) <= set(TASK_SPLITS["validation"])
    assert set(s.test) <= set(TASK_SPLITS["test"])
    with pytest.raises(ValueError):
        Seeds.make(0, 3, 4)
    with pytest.raises(ValueError, match="split has"):
        Seeds.make(10, len(TASK_SPLITS["validation"]) + 1, 4)
    with pytest.raises(ValueError):
        Seeds(train=[1, 2], val=[2], test=[3]).check_disjoint()


@pytest.mark.parametrize(
    "overrides",
    [
        {"model": "gpt5"},
        {"rl_group": 1},
        {"lambdas": (0.01, 0.1)},
        {"lambdas": (0.0,)},
        {"lambdas": (0.0, -0.1)},
        {"lambdas": (0.0, 0.1, 0.1)},
        {"n_seeds": 0},
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
    with env_server(TERMINAL) as (url, _):
        train = expert_episodes(url, TERMINAL, [1000, 1001, 1002], max_env_steps=8)
        test = expert_episodes(url, TERMINAL, [2_000_000, 2_000_001], max_env_steps=8)
    text = "".join(x for t in test for x in env_texts(t))
    assert any(ord(c) > 127 for c in text)  # the multi-byte path is exercised
    seen = training_lines(train)
    ce = build_ce_set("test", [2_000_000, 2_000_001], test, tok, seen)
    assert 0 < ce.novel_tokens < ce.env_tokens and ce.counts["warning"] > 0
    for seq, env, warn, novel in zip(
        ce.sequences, *(ce.masks[p] for p in ("env_output", "warning", "novel")), strict=True
    ):
        roles = torch.from_numpy(seq.role_ids.astype("int64"))
        assert bool((roles[env] == Role.ENV_OUTPUT.code).all()) and bool((roles[warn] == Role.WARNING.code).all())
        assert not bool((novel & ~env).any())  # novel lines are env_output targets
    for seq, traj, novel in zip(ce.sequences, test, ce.masks["novel"], strict=True):
        all_lines = training_lines([traj])
        assert not bool(novel_target_mask(seq, traj, tok, all_lines).any())  # everything seen: nothing novel
        everything = novel_target_mask(seq, traj, tok, set())
        assert bool(everything.any()) and not bool((novel & ~everything).any())
        # the novel tokens decode to text made only of novel lines' characters
        decoded = str(tok.decode(seq.input_ids[novel.numpy()].tolist()))
        novel_lines = [
            line.strip()
            for x in env_texts(traj)
            for line in x.splitlines()
            if line.strip() and line.strip() not in seen
        ]
        assert decoded.split() == " ".join(novel_lines).split()


# -- references and intervals --------------------------------------------------------------------------------------
def test_ngram_references_match_hand_computation_and_choose_smoothing_on_validation() -> None:
    from openenv_echo.demo.ngram import BIGRAM_A, UNIGRAM_K, Targets, bigram_nats, reference_lines, unigram_logp

    def t(pairs: list[tuple[int, int]]) -> Targets:
        return Targets(torch.tensor([p for p, _ in pairs]), torch.tensor([w for _, w in pairs]))

    train = t([(0, 1), (1, 2), (0, 1), (1, 2), (2, 1)])  # unigram counts: 1 -> 3, 2 -> 2; V = 4
    lp = unigram_logp(train, 4, 1.0)
    assert lp.exp().tolist() == pytest.approx([1 / 9, 4 / 9, 3 / 9, 1 / 9])
    held = t([(0, 1), (3, 2)])
    # p(1|0) = (2 + a p(1)) / (2 + a); p(2|3) = (0 + a p(2)) / (0 + a) = p(2)
    a = 3.0
    want = -(math.log((2 + a * 4 / 9) / (2 + a)) + math.log(3 / 9)) / 2
    assert bigram_nats(train, held, 4, lp, a) == pytest.approx(want)
    # validation full of a token never seen in training: the largest add-k wins on validation; test never decides
    val = t([(0, 3), (0, 3)])
    refs = reference_lines(train, val, held, 4)
    assert refs["smoothing"]["unigram_add_k"] == max(UNIGRAM_K)
    assert refs["smoothing"]["bigram_interpolation_a"] in BIGRAM_A
    assert refs["uniform"] == pytest.approx(math.log(4))
    assert refs["unigram"] == pytest.approx(-float(unigram_logp(train, 4, max(UNIGRAM_K))[held.target].mean()))
    assert refs["bigram"] < refs["unigram"]  # (0 -> 1) is a sure bigram in training


def test_intervals_match_textbook_values() -> None:
    from openenv_echo.demo.stats import gap_closed, mean_ci, paired_difference, wilson

    m = mean_ci([1.0, 2.0, 3.0])
    assert m["mean"] == 2.0 and m["ci95"] == pytest.approx([2 - 4.303 / math.sqrt(3), 2 + 4.303 / math.sqrt(3)])
    assert mean_ci([5.0])["ci95"] is None
    d = paired_difference([3.0, 4.0, 5.0], [1.0, 2.0, 3.0])
    assert d["mean"] == 2.0 and d["ci95"] == pytest.approx([2.0, 2.0])
    assert wilson(0, 10) == pytest.approx([0.0, 0.2775], abs=1e-4)
    assert wilson(5, 10) == pytest.approx([0.2366, 0.7634], abs=1e-4)
    assert gap_closed(5.0, 4.5, 4.0) == 0.5 and gap_closed(5.0, 4.5, 5.2) is None
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_gap_closed_needs_an_established_direct_ce_drop() -> None:
    from openenv_echo.demo.summarize import direct_drop

    assert direct_drop(2.0, [1.9, 1.88, 1.91])["established"]  # interval above 0
    noisy = direct_drop(2.0, [1.99, 2.02, 1.995])  # mean drop > 0 but the interval reaches below 0
    assert noisy["mean"] < 0.01 and noisy["ci95"][0] < 0 and not noisy["established"]
    assert not direct_drop(2.0, [2.1, 2.05, 2.2])["established"]
    assert direct_drop(2.0, [1.9])["established"] and not direct_drop(2.0, [2.1])["established"]  # one seed


def test_quick_report_defines_gap_closed_only_for_an_established_drop(
    quick_report: tuple[dict[str, Any], Path],
) -> None:
    report, _ = quick_report
    drop = report["comparisons"]["direct_ce_drop"]
    start = report["baselines"]["start"]
    direct = [s["final"]["test"]["env_ce"]["nats_per_token"] for s in report["arms"]["direct_ce"]["seeds"]]
    assert drop["per_seed"] == pytest.approx([start - d for d in direct])
    for arm in ARMS:
        s = report["arms"][arm]["summary"]
        assert (s["gap_closed"] is not None) == drop["established"]
        ce = [x["final"]["test"]["env_ce"]["nats_per_token"] for x in report["arms"][arm]["seeds"]]
        assert s["test_env_ce_change"]["per_seed"] == pytest.approx([c - start for c in ce])


def test_hostnames_shared_with_training_are_counted() -> None:
    from openenv_echo.demo.evaluate import hostnames_seen
    from openenv_echo.envs.terminal.machine import generate_machine

    train = list(range(1000, 1040))
    names = {generate_machine(s).hostname for s in train}
    test = list(range(2_000_000, 2_000_020))
    expected = sum(generate_machine(s).hostname in names for s in test)
    assert hostnames_seen(train, test) == {"held_out_machines": 20.0, "hostname_seen_in_training": float(expected)}
    assert hostnames_seen(train, train[:5])["hostname_seen_in_training"] == 5.0


ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "echo_world_model"


def _committed() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The recorded terminal run, the sql run, and the terminal run's report after its first seed."""
    paths = ("results/report.json", "results-sql/report.json", "results/report-after-seed-0.json")
    report, sql, first = (json.loads((EXAMPLE / p).read_text()) for p in paths)
    return report, sql, first


def test_readme_tables_are_rendered_from_the_committed_report() -> None:
    from openenv_echo.demo.tables import default_run_line, readme_block, summary_markdown

    for results in ("results", "results-sql"):
        report = json.loads((EXAMPLE / results / "report.json").read_text())
        assert (EXAMPLE / results / "summary.md").read_text() == summary_markdown(report), results
    report, sql, first = _committed()
    readme = (EXAMPLE / "README.md").read_text()
    assert readme_block(readme) == summary_markdown(report).strip()
    assert default_run_line(first) in readme.replace("\n", " ")
    assert summary_markdown(sql).strip() in readme  # the sql run's tables, in full


def test_top_level_readme_demo_section_is_rendered_from_the_committed_reports() -> None:
    from openenv_echo.demo.tables import README_BEGIN, README_END, block, readme_section

    report, sql, first = _committed()
    section = block((ROOT / "README.md").read_text(), README_BEGIN, README_END)
    assert section == readme_section(report, sql, first).strip()
    # the one-seed report is the recorded run's own first seed: same command's start, same seed-0 runs
    assert first["start_checkpoint"] == report["start_checkpoint"] and first["config"]["n_seeds"] == 5
    assert first["arms"]["grpo"]["seeds"][0]["final"] == report["arms"]["grpo"]["seeds"][0]["final"]
    # the committed evidence is what the issue asks of it: a complete run of >= 5 RL seeds on the terminal env, one
    # seed on sql, neither a smoke test
    assert report["status"]["complete"] and len(report["seeds"]["rl"]) >= 5 and report["config"]["mode"] == "full"
    assert report["environment"]["name"] == "terminal" and sql["environment"]["name"] == "sql"
    assert sql["config"]["mode"] == "full" and sql["status"]["complete"]
    sel = report["lambda_selection"]
    assert sel["chosen"] < max(sel["values"]), "the chosen λ is interior: a larger one was swept and rejected"


# -- the start checkpoint: generic text, then the action tokens as the only SFT targets ----------------------------
def test_generic_corpus_is_the_stdlib_docstrings_read_without_importing(tmp_path: Path) -> None:
    from openenv_echo.demo.corpus import stdlib_docstrings

    lib = tmp_path / "python3.x"
    (lib / "pkg").mkdir(parents=True)
    (lib / "tests").mkdir()
    (lib / "site-packages").mkdir()
    (lib / "pkg" / "mod.py").write_text(
        '"""Module doc."""\nraise SystemExit("imported!")\nclass A:\n    """Class doc."""\n    def f(self):\n'
        '        """Method doc."""\n'
    )
    (lib / "tests" / "test_x.py").write_text('"""Test doc."""\n')
    (lib / "site-packages" / "dep.py").write_text('"""Dependency doc."""\n')
    (lib / "broken.py").write_text("def (:\n")
    corpus = stdlib_docstrings(str(lib))
    assert corpus.texts == ("Module doc.", "Class doc.", "Method doc.") and corpus.files == 1
    assert corpus.chars == len("Module doc.Class doc.Method doc.") and corpus.source == "python3.x"
    real = stdlib_docstrings()
    assert real.chars > 500_000 and real.files > 100 and real.describe()["sha256"] == real.sha256


def test_pack_chunks_joins_texts_with_end_of_text() -> None:
    from openenv_echo.demo.train import pack_chunks
    from openenv_echo.tokenize import build_tokenizer

    tok = build_tokenizer("qwen")
    chunks = pack_chunks(tok, ["alpha beta", "gamma"] * 50, 16)
    flat = chunks.flatten().tolist()
    eos = tok.eos_token_id
    assert chunks.shape[1] == 16 and flat.count(eos) >= 49
    first = tok("alpha beta", add_special_tokens=False)["input_ids"]
    assert flat[: len(first) + 1] == [*first, eos]
    with pytest.raises(ValueError, match="fewer than one chunk"):
        pack_chunks(tok, ["a"], 4096)


def test_start_checkpoint_phases_learn_their_own_targets_only() -> None:
    """Generic pretraining lowers the generic text's NLL; SFT's gradient reaches only the logits that predict action
    tokens, and a few SFT steps on two expert episodes lower their action NLL by far more than noise."""
    from openenv_echo.demo.evaluate import build_ce_set
    from openenv_echo.demo.model import build_scratch_model
    from openenv_echo.demo.policy import corpus_of
    from openenv_echo.demo.rollout import env_server, expert_episodes
    from openenv_echo.demo.train import (
        action_targets,
        forward_logps,
        pack_chunks,
        pretrain_generic,
        sft_actions,
    )
    from openenv_echo.objective import token_logps
    from openenv_echo.tokenize import build_tokenizer, collate

    with env_server(TERMINAL) as (url, _):
        eps = expert_episodes(url, TERMINAL, [1000, 1001], max_env_steps=3)
    text = ["The quick brown fox jumps over the lazy dog. " * 4, "Return the sum of a and b. " * 6] * 8
    tok = build_tokenizer("qwen", corpus=[*text, *corpus_of(TERMINAL, eps)], vocab_size=1024)
    model = build_scratch_model("nano", tok, max_positions=4096, seed=0)
    chunks = pack_chunks(tok, text, 32)

    def generic_nll() -> float:
        with torch.no_grad():
            return float(-token_logps(model(input_ids=chunks).logits, chunks)[:, 1:].mean())

    before = generic_nll()
    g = pretrain_generic(model, chunks, steps=20, batch_size=4, lr=1e-2, warmup=1, seed=0)
    assert len(g.losses) == 20 and generic_nll() < before - 2.0

    ce_set = build_ce_set("fixed", [1000, 1001], eps, tok, set())
    seqs = ce_set.sequences
    b = collate(seqs, tokenizer=tok)
    act = action_targets(b["role_ids"], b["attention_mask"])
    assert bool(act.any()) and not bool((act & (b["role_ids"] != Role.ACTION.code)).any())

    def action_nll() -> float:
        with torch.no_grad():
            return float(-forward_logps(model, b)[act].mean())

    # the SFT gradient reaches exactly the logits that predict an action token: env text is input, never a target
    grads: list[torch.Tensor] = []

    def keep_grad(module: torch.nn.Module, args: Any, out: torch.Tensor) -> None:
        out.register_hook(grads.append)

    hook = model.lm_head.register_forward_hook(keep_grad)
    sft_actions(model, seqs[:1], tok, steps=1, batch_size=1, lr=1e-3, warmup=1, micro_batch=1, seed=0, optimizer=None)
    hook.remove()
    rows = grads[0][0].abs().sum(-1) > 0  # (T,): logits row t predicts token t + 1
    roles = torch.from_numpy(seqs[0].role_ids.astype("int64"))
    assert torch.equal(rows[:-1], roles[1:] == Role.ACTION.code) and not bool(rows[-1])

    a0 = action_nll()
    s = sft_actions(
        model, seqs, tok, steps=15, batch_size=2, lr=1e-2, warmup=1, micro_batch=1, seed=0, optimizer=g.optimizer
    )
    assert s.targets == 15 * int(act.sum()) and len(s.losses) == 15
    assert action_nll() < a0 - 1.0
    assert len(s.optimizer["state"]) > 0  # the AdamW state the RL arms continue


def test_sql_actions_come_from_the_policys_json() -> None:
    from openenv_echo.demo.envs import DEMO_ENVS, SQL, sql_action

    assert sql_action('{"query": "SELECT 1"}') == {"query": "SELECT 1"}
    assert sql_action(' {"answer": "42"}\n') == {"answer": "42"}
    assert sql_action("SELECT 1") == {} and sql_action("[1]") == {} and sql_action('{"query": 5}') == {}
    assert sql_action('{"query": "a", "drop": "b"}') == {"query": "a"}
    assert sql_action("[" * 100_000) == {}
    for a in SQL.expert(2_000_000):  # the expert's text parses back to the expert's action
        assert sql_action(SQL.action_text(a)) == a
    assert set(DEMO_ENVS) == {"terminal", "sql"}
    assert DEMO_ENVS["terminal"].to_action(" ls -la\n") == {"command": "ls -la"}


def test_sql_env_quick_run_end_to_end(tmp_path: Path) -> None:
    """`openenv-echo demo --env sql --quick`: every phase on the second env (structure only)."""
    from openenv_echo.demo import run_demo

    report = run_demo(DemoConfig.preset("quick", env="sql", out=tmp_path, progress=False), command="q")
    assert report["environment"]["name"] == "sql" and report["config"]["env"] == "sql"
    assert "SMOKE TEST" in report["note"]
    assert "hostname_seen_in_training" not in report["data"]["novelty_of_test_observations"]
    assert report["data"]["env_ce_sets"]["test"]["env_tokens"] > 0  # the sql engine's answers are env_output
    for a in report["arms"].values():  # (an untrained policy's text may get only harness warnings back: no env tokens)
        assert len(a["seeds"]) == 2 and all(len(s["train"]) == report["config"]["rl_steps"] for s in a["seeds"])
    assert (tmp_path / "summary.md").read_text().startswith("**QUICK MODE IS A SMOKE TEST")


# -- claims: only where the interval excludes 0 ------------------------------------------------------------------
def test_claims_are_made_only_where_the_interval_excludes_zero(quick_report: tuple[dict[str, Any], Path]) -> None:
    import copy

    from openenv_echo.demo.tables import headline, sign

    assert sign({"mean": -0.2, "ci95": [-0.3, -0.1]}) == -1 and sign({"mean": 0.2, "ci95": [0.1, 0.3]}) == 1
    assert sign({"mean": 0.1, "ci95": [-0.1, 0.3]}) == 0 and sign({"mean": 0.5, "ci95": None}) == 0
    report = copy.deepcopy(quick_report[0])
    diff = report["comparisons"]["echo_minus_grpo"]
    diff["test_env_ce"] = {"mean": -0.5, "ci95": [-0.7, -0.3], "per_seed": [-0.5, -0.5], "n": 2}
    assert "predicts held-out env tokens better than GRPO" in headline(report)
    diff["test_env_ce"] = {"mean": -0.5, "ci95": [-0.9, 0.1], "per_seed": [-0.9, -0.1], "n": 2}
    text = headline(report)
    assert "no measurable difference in held-out env CE" in text and "better than GRPO" not in text
    diff["test_success"] = {"mean": 0.1, "ci95": [-0.1, 0.3], "per_seed": [0.0, 0.2], "n": 2}
    assert "no measurable difference in either" in headline(report)
    diff["test_success"] = {"mean": 0.1, "ci95": [0.05, 0.15], "per_seed": [0.05, 0.15], "n": 2}
    assert "a difference whose interval excludes 0" in headline(report)
    assert "improve" not in headline(report)
