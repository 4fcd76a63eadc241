"""Episodes on the env server, only through the client: scripted expert episodes and policy rollouts.

``env_server`` starts the server of a demo env (a local process, or the env's Docker image built from
``envs/<env>_env/server/Dockerfile``). ``expert_episodes`` records the scripted expert. ``PolicyRunner`` runs a
batch of policy episodes: the model samples token ids, the ids are decoded only to form the command sent to the
server, and the sequence that will be trained on is assembled by ``TitoBuilder`` from the *sampled ids* plus the
role-tagged observations (token-in-token-out, never re-tokenized).

The sampler keeps a per-episode KV cache across turns: the next prompt is always the previous prompt + the sampled
ids + the TITO delta (RFC 0003 §6), so each turn only the new ids are run through the model. A turn's batch cache is
reserved once, for its cached positions, the new ids and the action cap (``kvcache.ReservedLayer``), so decoding
writes in place instead of copying the cache at every token. The new ids are run episode by episode at their place
in that batch layout (``prefill``), so that the pads a padded batch would compute for the shorter chunks never are;
the sampled tokens are then decoded for the whole batch at once. At the end, the ids the model was actually fed are
checked against the assembled sequence.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from ..client import EnvClient
from ..tokenization import TitoBuilder, TokenizedTrajectory
from ..trajectory import Trajectory
from .envs import DemoEnv
from .kvcache import ReservedLayer

SAMPLER = "per-episode prefill"
"""The sampler's revision, recorded with every run it samples (``report["versions"]``, probe records): runs of
another revision (before it, ``"padded prefill"``) round floats otherwise, so a probe pairs its runs with a probe's
of the same revision only."""

STEP_TIMEOUT_S, RESET_TIMEOUT_S = 60.0, 120.0
"""Step and reset wall-time limits of the demo's server: generous, because the demo is run on shared, loaded CPUs
where the server's defaults (2 s / 10 s, sized for a serving fleet) stop honest steps."""


@contextlib.contextmanager
def env_server(env: DemoEnv, docker: bool = False, sessions: int = 64) -> Iterator[tuple[str, str]]:
    """Start the env's server for ``sessions`` concurrent episodes; yields ``(base_url, description)`` and stops it
    afterwards."""
    from ..envs import spec_of
    from ..providers import DockerProvider, LocalProcessProvider

    if docker:
        provider: Any = DockerProvider.for_env(
            spec_of(env.name), max_sessions=sessions, step_timeout_s=STEP_TIMEOUT_S, reset_timeout_s=RESET_TIMEOUT_S
        )
        what = f"docker image {provider.image} (envs/{env.name}_env/server/Dockerfile)"
    else:
        provider = LocalProcessProvider(
            env.name,
            max_sessions=sessions,
            idle_timeout_s=None,
            log_level="warning",
            step_timeout_s=STEP_TIMEOUT_S,
            reset_timeout_s=RESET_TIMEOUT_S,
        )
        what = "local process (LocalProcessProvider)"
    url = provider.start()
    try:
        yield url, what
    finally:
        provider.stop()


def messages(env: DemoEnv) -> list[dict[str, str]]:
    return [{"role": "system", "content": env.system_prompt}]


def expert_episodes(
    url: str,
    env: DemoEnv,
    seeds: list[int],
    max_env_steps: int,
    *,
    kinds: tuple[str, ...] = (),
    progress: bool = False,
    desc: str = "expert",
) -> list[Trajectory]:
    """One scripted expert episode per seed (of the task distribution ``kinds``, see ``DemoEnv.reset_options``),
    recorded by the client (actions carry their text, no token ids)."""
    from tqdm.auto import tqdm

    out: list[Trajectory] = []
    with EnvClient(url, env_name=env.name) as client:
        for seed in tqdm(seeds, desc=desc, disable=not progress, leave=False):
            opts = env.reset_options(seed, kinds)
            result = client.reset(seed=seed, messages=messages(env), max_steps=max_env_steps, **opts)
            for action in env.expert(seed, opts.get(env.kind_option))[:max_env_steps]:
                result = client.step(action, action_text=env.action_text(action))
                if result.done:
                    break
            assert client.trajectory is not None
            out.append(client.trajectory.model_copy(deep=True))
    return out


def answer(traj: Trajectory) -> dict[str, Any]:
    """Outcome of an episode: reward, whether it submitted, and the expected answer (from the verdict)."""
    reward = traj.total_reward
    last = traj.steps[-1].observation if traj.steps else None
    meta = last.metadata if last is not None else {}
    return {
        "reward": reward,
        "submitted": "answer" in meta,
        "answer": meta.get("answer"),
        "expected": meta.get("expected"),
    }


# -- policy rollouts ----------------------------------------------------------------------------------------
@dataclass
class Episode:
    """One policy episode in flight."""

    seed: int
    client: EnvClient
    builder: TitoBuilder
    pending: list[int] = field(default_factory=list)  # ids the model has not been fed yet
    fed: list[int] = field(default_factory=list)  # every id fed so far (checked against the builder at the end)
    kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer (H, L, D) keys/values
    action: list[int] = field(default_factory=list)
    done: bool = False
    reward: float = 0.0
    end: str = ""  # submitted | step_limit | context_limit
    turns: int = 0
    submitted: bool = False
    correct_kind: bool = False

    @property
    def pos(self) -> int:
        return len(self.fed)


@dataclass
class RolloutResult:
    """A finished policy episode: the trained-on sequence plus its outcome."""

    seed: int
    sequence: TokenizedTrajectory
    trajectory: Trajectory
    reward: float
    end: str
    turns: int
    submitted: bool


class PolicyRunner:
    """Runs batches of policy episodes against the env server (one client session per episode)."""

    def __init__(
        self,
        url: str,
        tokenizer: Any,
        env: DemoEnv,
        *,
        max_env_steps: int,
        max_context: int,
        max_action_tokens: int,
        kinds: tuple[str, ...] = (),
        workers: int = 4,
    ) -> None:
        self.url = url
        self.kinds = kinds
        self.env = env
        self.tokenizer = tokenizer
        self.max_env_steps = max_env_steps
        self.max_context = max_context
        self.max_action_tokens = max_action_tokens
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
        probe = TitoBuilder(tokenizer)
        self.stop_ids = set(probe.scaffold.eot_ids) | {int(tokenizer.eos_token_id)}
        self.pool = ThreadPoolExecutor(max_workers=workers)

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    # -- one batch -------------------------------------------------------------------------------------------
    @torch.no_grad()
    def run(
        self, model: torch.nn.Module, seeds: list[int], *, temperature: float, generator: torch.Generator | None
    ) -> list[RolloutResult]:
        """Play one episode per seed (seeds may repeat: a GRPO group); ``temperature=0`` is greedy."""
        was_training = model.training
        model.eval()
        episodes = [
            Episode(seed=s, client=EnvClient(self.url, env_name=self.env.name), builder=TitoBuilder(self.tokenizer))
            for s in seeds
        ]
        try:
            list(self.pool.map(self._reset, episodes))
            for _turn in range(self.max_env_steps):
                live = [e for e in episodes if not e.done]
                if not live:
                    break
                self._sample_turn(model, live, temperature, generator)
                list(self.pool.map(self._step, live))
            return [self._finish(e) for e in episodes]
        finally:
            for e in episodes:
                e.client.close()
            model.train(was_training)

    def _reset(self, e: Episode) -> None:
        opts = self.env.reset_options(e.seed, self.kinds)
        result = e.client.reset(seed=e.seed, messages=messages(self.env), max_steps=self.max_env_steps, **opts)
        e.pending = e.builder.start(messages(self.env), reset=result)

    def _step(self, e: Episode) -> None:
        ids = e.action
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        result = e.client.step(self.env.to_action(text), action_text=text, action_token_ids=list(ids))
        e.builder.add_action(ids)
        e.turns += 1
        delta = e.builder.add_observation(result)
        e.pending = [ids[-1], *delta]  # the last sampled id was never fed to the model
        if result.done:
            e.done, e.reward = True, float(result.reward or 0.0)
            e.submitted = "answer" in result.metadata
            e.end = "submitted" if e.submitted else "step_limit"
        elif len(e.builder) + self.max_action_tokens + 1 > self.max_context:
            e.done, e.reward, e.end = True, 0.0, "context_limit"

    def _finish(self, e: Episode) -> RolloutResult:
        if e.fed + e.pending != e.builder.ids:
            raise AssertionError(
                "token-in-token-out violated: the ids fed to the sampler differ from the assembled sequence"
            )
        seq = e.builder.finish(reward=e.reward)
        if len(seq) > self.max_context:  # the last observation overflowed: train on the first max_context tokens
            seq = seq.truncate(self.max_context)
        assert e.client.trajectory is not None
        return RolloutResult(
            seed=e.seed,
            sequence=seq,
            trajectory=e.client.trajectory.model_copy(deep=True),
            reward=e.reward,
            end=e.end or "step_limit",
            turns=e.turns,
            submitted=e.submitted,
        )

    # -- batched sampling with per-episode KV caches -------------------------------------------------------
    def _sample_turn(
        self, model: torch.nn.Module, live: list[Episode], temperature: float, generator: torch.Generator | None
    ) -> None:
        """Feed each episode's pending ids, then sample its action ids until an end-of-turn id or the cap."""
        from transformers import Cache

        b = len(live)
        past = max((e.kv[0][0].shape[1] if e.kv else 0) for e in live)
        chunk = max(len(e.pending) for e in live)
        # the batch cache: each episode's cached positions right-aligned, holes (mask 0) on the left, then its new
        # ids right-aligned in the chunk (pads, mask 0, before them)
        valid = torch.zeros((b, past + chunk), dtype=torch.long)
        config: Any = model.config  # the HF model's config (typed as a plain Module here)
        head: torch.nn.Module = model.get_output_embeddings()  # type: ignore[operator]  # the LM head
        shape = (
            b,
            config.num_key_value_heads,
            past,
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        )
        like = next(model.parameters())  # the cache's dtype and device
        layers: list[Any] = []
        for li in range(config.num_hidden_layers):
            layer = ReservedLayer(past + chunk + self.max_action_tokens)
            k, v = layer.reserve((like, like), shape)
            for i, e in enumerate(live):
                if e.kv:
                    n = e.kv[li][0].shape[1]
                    k[i, :, past - n :] = e.kv[li][0]
                    v[i, :, past - n :] = e.kv[li][1]
            layers.append(layer)
        for i, e in enumerate(live):
            if e.kv:
                valid[i, past - e.kv[0][0].shape[1] : past] = 1
            valid[i, past + chunk - len(e.pending) :] = 1
        last = prefill(model, layers, valid, [e.pending for e in live], [e.pos for e in live])
        logits = head(last[:, None, :])[:, -1, :]  # the batch's head in one product, as a batched pass has it
        for e in live:
            e.fed.extend(e.pending)
            e.pending = []
            e.action = []
        for layer in layers:
            layer.fill(past + chunk)
        cache = Cache(layers=layers)
        generating = torch.ones(b, dtype=torch.bool)
        stops = torch.tensor(sorted(self.stop_ids), dtype=torch.long)
        for _ in range(self.max_action_tokens):
            logits = logits.float()
            if torch.isnan(logits).any():
                raise FloatingPointError("NaN logits while sampling")
            if temperature == 0:
                nxt = logits.argmax(-1)
            else:
                nxt = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator).squeeze(-1)
            for i in torch.nonzero(generating).flatten().tolist():
                live[i].action.append(int(nxt[i]))
            lengths = torch.tensor([len(e.action) for e in live])
            finished = generating & (torch.isin(nxt, stops) | (lengths >= self.max_action_tokens))
            generating &= ~finished
            if not bool(generating.any()):
                break
            feed = torch.where(generating, nxt, torch.full_like(nxt, self.pad_id))
            step_pos = torch.tensor([e.pos for e in live], dtype=torch.long)
            valid = torch.cat([valid, generating.long().unsqueeze(1)], dim=1)
            out = model(
                input_ids=feed[:, None],
                attention_mask=valid,
                position_ids=step_pos[:, None],
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            for i in torch.nonzero(generating).flatten().tolist():
                live[i].fed.append(int(nxt[i]))
        # split the batch cache back into per-episode caches (real positions only)
        mask = valid.bool()
        for i, e in enumerate(live):
            keep = torch.nonzero(mask[i]).flatten()
            e.kv = [(layer.keys[i].index_select(1, keep), layer.values[i].index_select(1, keep)) for layer in layers]
            assert e.kv[0][0].shape[1] == len(e.fed), "KV cache and fed ids disagree"


def prefill(
    model: torch.nn.Module,
    layers: list[ReservedLayer],
    valid: torch.Tensor,
    pending: list[list[int]],
    first: list[int],
) -> torch.Tensor:
    """Run each episode's ``pending`` ids (at positions from ``first``) through ``model``'s decoder at its place in
    the batch layout (``valid``: its cached positions and its new ids right-aligned in the chunk), writing their keys
    and values into the batch cache ``layers``; returns the (B, D) final hidden states of each episode's last id.

    One episode at a time, so that the pads that right-align the shorter chunks are never computed (on the demo's
    skewed observation lengths, most of a padded batch), at the batch layout's positions and masks. It is the padded
    batch's computation; its matrix products have fewer rows, and at some shapes those round the last bit otherwise
    (``bench/bench_prefill.py`` checks the demo's shapes). Fresh episodes with the same ids (a GRPO group's first
    turn: nothing cached, so first position 0) are run once."""
    from transformers import Cache

    width = valid.shape[1]
    keys = torch.arange(width)
    dtype = next(model.parameters()).dtype
    last: list[torch.Tensor] = []
    ran: dict[tuple[int, ...], int] = {}  # a fresh episode's ids -> the row that ran them
    for i, (ids, pos) in enumerate(zip(pending, first, strict=True)):
        n, key = len(ids), tuple(ids)
        twin = ran.get(key) if pos == 0 else None
        if twin is not None:
            for layer in layers:
                layer.copy_row(twin, i)
            last.append(last[twin])
            continue
        seen = valid[i].bool() & (keys[None, :] <= torch.arange(width - n, width)[:, None])
        mask = torch.zeros((1, 1, n, width), dtype=dtype).masked_fill_(~seen, float("-inf"))
        out = model.base_model(  # type: ignore[operator]  # a transformers CausalLM's decoder stack
            input_ids=torch.tensor([ids], dtype=torch.long),
            attention_mask=mask,
            position_ids=torch.arange(pos, pos + n)[None, :],
            past_key_values=Cache(layers=[layer.row(i, width - n) for layer in layers]),
            use_cache=True,
        )
        last.append(out.last_hidden_state[0, -1])
        if pos == 0:
            ran[key] = i
    return torch.stack(last)
