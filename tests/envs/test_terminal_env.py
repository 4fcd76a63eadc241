"""TerminalEnvironment: role tagging, the submit verifier, step limits, the scripted policies."""

from __future__ import annotations

import pytest
from terminal_env.server import INCIDENT_KINDS, NON_EXPERTS, TerminalAction, TerminalEnvironment, expert_actions

from openenv_echo.roles import Role
from openenv_echo.server.environment import EnvError


def _env(seed: int = 3, **kw) -> TerminalEnvironment:
    env = TerminalEnvironment()
    env.reset(seed=seed, **kw)
    return env


def _step(env: TerminalEnvironment, cmd: str):
    return env.step(TerminalAction(command=cmd))


def test_reset_is_context_plus_login_banner():
    env = TerminalEnvironment()
    obs = env.reset(seed=3)
    assert [s.role for s in obs.segments] == [Role.CONTEXT, Role.ENV_OUTPUT]
    task, banner = obs.segments
    assert "submit <kind> <service>" in task.text and env.machine.incident.alert in task.text
    assert env.machine.incident.kind not in task.text.split("one of:")[0]  # the alert does not leak the answer
    assert banner.text.startswith("Welcome to Ubuntu") and "Last login:" in banner.text
    assert obs.reward is None and not obs.done and obs.steps_left == 30


def test_step_roles_echo_output_notice():
    env = _env()
    obs = _step(env, "cat /etc/hostname")
    assert [(s.role, s.text) for s in obs.segments] == [
        (Role.WARNING, "$ cat /etc/hostname\n"),
        (Role.ENV_OUTPUT, env.machine.hostname + "\n"),
    ]
    assert (obs.exit_code, obs.reward, obs.done, obs.cwd) == (0, 0.0, False, "/root")
    obs = _step(env, "cat /var/log/nginx/access.log")
    assert [s.role for s in obs.segments] == [Role.WARNING, Role.ENV_OUTPUT, Role.WARNING]
    assert obs.truncated and obs.segments[2].text.lstrip("\n").startswith("[harness: output truncated")
    obs = _step(env, "nosuchcmd")
    assert [(s.role, s.text) for s in obs.segments] == [
        (Role.WARNING, "$ nosuchcmd\n"),
        (Role.ENV_OUTPUT, "bash: nosuchcmd: command not found\n"),
    ]
    obs = _step(env, "echo $(id)")
    assert [s.role for s in obs.segments] == [Role.WARNING, Role.WARNING]
    assert obs.text == obs.segments[0].text + obs.segments[1].text


def test_submit_scores_and_ends():
    env = _env(seed=4)
    kind, svc = env.machine.incident.kind, env.machine.incident.service
    obs = _step(env, f"submit {kind} {svc}.service")
    assert obs.done and obs.reward == 1.0
    assert [s.role for s in obs.segments] == [Role.WARNING, Role.WARNING]
    assert obs.metadata["expected"] == {"kind": kind, "service": svc}
    wrong_kind = next(k for k in INCIDENT_KINDS if k != kind)
    assert _step(_env(seed=4), f"submit {wrong_kind} {svc}").reward == 0.0
    assert _step(_env(seed=4), f"submit {kind} nginx").reward == 0.5
    assert _step(_env(seed=4), f"submit {wrong_kind} nginx").reward == 0.0


@pytest.mark.parametrize("cmd", ["submit", "submit disk_full", "submit not_a_kind nginx", "submit a b c"])
def test_malformed_submit_is_a_format_warning_not_an_answer(cmd):
    env = _env()
    obs = _step(env, cmd)
    assert not obs.done and obs.reward == 0.0
    assert obs.segments[1].role == Role.WARNING and "usage: submit <kind> <service>" in obs.segments[1].text


def test_step_limit_ends_with_zero():
    env = _env(max_steps=3)
    assert not _step(env, "ls").done
    assert not _step(env, "ls").done
    obs = _step(env, "ls")
    assert obs.done and obs.reward == 0.0 and obs.steps_left == 0
    assert obs.segments[-1].role == Role.WARNING and "step limit (3)" in obs.segments[-1].text


def test_bad_input_is_an_observation():
    env = _env()
    obs = _step(env, "cat " + "x" * 5000)
    assert obs.exit_code == 2 and "5004 characters exceeds" in obs.segments[-1].text
    assert obs.segments[0].text.endswith("… [4492 more characters]\n")
    obs = _step(env, "cat /etc/hostname\x00/etc/shadow")
    assert obs.segments[-1].role == Role.WARNING and "control character '\\x00'" in obs.segments[-1].text
    with pytest.raises(ValueError):  # invalid Unicode never gets past the wire model...
        TerminalAction(command="cat \udcff")
    obs = env.step(TerminalAction.model_construct(command="cat \udcff"))  # ...and the env refuses it anyway
    assert "lone surrogate" in obs.segments[-1].text and "\\udcff" in obs.segments[0].text
    assert all(s.text.encode("utf-8") for s in obs.segments)
    obs = _step(env, "")
    assert [s.text for s in obs.segments] == ["$ \n"]


def test_reset_options_are_validated():
    with pytest.raises(EnvError):
        TerminalEnvironment().reset(seed=1, incident="alien_invasion")
    with pytest.raises(EnvError):
        TerminalEnvironment().reset(seed=1, max_steps=0)
    env = TerminalEnvironment()
    env.reset(seed=1, incident="port_conflict")
    assert env.machine.incident.kind == "port_conflict"
    assert env.state.model_dump()["seed"] == 1 and "incident" not in env.state.model_dump()


@pytest.mark.parametrize("kind", INCIDENT_KINDS)
def test_expert_solves_every_kind_on_a_range_of_seeds(kind):
    for seed in range(200, 206):
        env = _env(seed=seed, incident=kind)
        actions = expert_actions(seed, kind)
        for a in actions:
            obs = env.step(TerminalAction(**a))
        assert obs.done and obs.reward == 1.0, (seed, kind, obs.text)
        assert len(actions) <= 8


def test_expert_with_natural_incidents_and_non_experts():
    for seed in range(300, 310):
        env = _env(seed=seed)
        for a in expert_actions(seed):
            obs = env.step(TerminalAction(**a))
        assert obs.reward == 1.0
    totals = {}
    for name, policy in NON_EXPERTS.items():
        rewards = []
        for seed in range(300, 312):
            env = _env(seed=seed)
            for a in policy(seed):
                obs = env.step(TerminalAction(**a))
                if obs.done:
                    break
            rewards.append(obs.reward)
        totals[name] = sum(rewards) / len(rewards)
    assert all(v < 0.5 for v in totals.values()), totals


def test_episodes_are_byte_identical_for_a_seed():
    def run(seed: int) -> list[str]:
        env = _env(seed=seed)
        texts = [env.reset(seed=seed).text]
        for a in expert_actions(seed) + [{"command": "date"}]:
            if env.done:
                break
            texts.append(env.step(TerminalAction(**a)).model_dump_json())
        return texts

    assert run(21) == run(21)
    assert run(21)[0] != run(22)[0]
