"""Masks survive trajectory -> JSON -> HTTP/WebSocket -> JSON -> JSONL -> tokenize unchanged (real server)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from openenv_echo.client import EnvClient
from openenv_echo.roles import Role
from openenv_echo.tokenization import TitoBuilder, compare_assemblies, tokenize_offline, tokenize_trajectory
from openenv_echo.trajectory import Trajectory, read_trajectories

MESSAGES = ["hello there", '{"key": [1, 2, "x"]}', "  spaced\tout  ", "日本語 🚀", "", "bye"]


def _rollout(base_url: str, tok: Any, path: Path, *, return_tokens: bool = False) -> tuple[Any, Trajectory]:
    """Drive a real episode while assembling TITO live from the replies; returns (live result, recorded)."""
    builder = TitoBuilder(tok)
    system = [{"role": "system", "content": "Repeat after me."}]
    with EnvClient(base_url, writer=path) as client:
        first = client.reset(seed=1, messages=system, return_tokens=return_tokens)
        prompt = builder.start(system, reset=first)
        for msg in MESSAGES:
            ids = builder.codec.encode_content(msg) + list(builder.scaffold.eot_ids)  # "sampled" by the policy
            assert prompt[-len(builder.scaffold.generation_prompt_ids) :] == list(
                builder.scaffold.generation_prompt_ids
            )
            builder.add_action(ids)
            result = client.step({"message": msg}, action_text=msg, action_token_ids=ids)
            prompt = prompt + ids + builder.add_observation(result)
            if result.done:
                break
        recorded = client.trajectory
    assert recorded is not None
    return builder.finish(episode_id=recorded.episode_id, reward=recorded.total_reward), recorded


def _same(a: Any, b: Any) -> None:
    assert a.input_ids.tolist() == b.input_ids.tolist()
    assert a.role_ids.tolist() == b.role_ids.tolist()
    for role in Role:
        assert a.mask(role).tolist() == b.mask(role).tolist()
    assert a.obs_count == b.obs_count


def test_masks_survive_the_wire_round_trip(
    running_server: Callable[..., str], toks: dict[str, Any], tmp_path: Path
) -> None:
    url = running_server("echo")
    for family in ("qwen", "llama"):
        tok = toks[family]
        path = tmp_path / f"{family}.jsonl"
        live, recorded = _rollout(url, tok, path)
        [loaded] = read_trajectories(path)
        assert loaded == recorded
        from_disk = tokenize_trajectory(loaded, tok)
        _same(live, from_disk)
        _same(live, tokenize_trajectory(Trajectory.from_json(recorded.to_json()), tok))
        assert from_disk.episode_id == recorded.episode_id
        # the echo env's roles arrive intact: "[echo] " is warning, the echoed text env_output, the empty
        # message produced a format warning
        assert from_disk.role_text(tok, Role.WARNING).count("[echo] ") == len(MESSAGES) - 1
        assert "WARNING: empty message" in from_disk.role_text(tok, Role.WARNING)
        assert from_disk.role_text(tok, Role.ENV_OUTPUT) == "".join(m + "\n" for m in MESSAGES if m)
        assert from_disk.role_text(tok, Role.ACTION).count(
            tok.convert_ids_to_tokens(TitoBuilder(tok).scaffold.eot_ids[0])
        ) == len(MESSAGES)
        # offline assembly of the same loaded episode differs only where BPE merged across a role boundary
        off = tokenize_offline(loaded, tok)
        cmp = compare_assemblies(from_disk, off, tok)
        assert set(cmp.kinds()) <= {"segmentation"}, cmp.report()


def test_server_side_tokens_are_used_and_equal_client_side(
    running_server: Callable[..., str], toks: dict[str, Any], tmp_path: Path
) -> None:
    tok = toks["qwen"]
    url = running_server("echo", tokenizer=tok)
    live_server, recorded = _rollout(url, tok, tmp_path / "s.jsonl", return_tokens=True)
    assert all(s.observation.tokens is not None for s in recorded.steps)
    [loaded] = read_trajectories(tmp_path / "s.jsonl")
    tt = tokenize_trajectory(loaded, tok)
    assert tt.stats["server_tokens_used"] == len(loaded.steps) + 1  # every step plus the reset
    _same(live_server, tt)
    # with the tokens stripped, client-side encoding gives the very same sequence
    for obs in [loaded.reset, *[s.observation for s in loaded.steps]]:
        assert obs is not None
        obs.tokens = None
    client_side = tokenize_trajectory(loaded, tok)
    assert client_side.stats["server_tokens_used"] == 0
    _same(tt, client_side)
