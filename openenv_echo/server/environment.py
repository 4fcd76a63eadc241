"""``Environment``: the base class an openenv-echo environment implements.

Subclasses implement ``_reset`` and ``_step`` and return role-tagged ``Observation``s; the base class owns the
episode bookkeeping that OpenEnv's runtime validator checks (``episode_id`` echoes the reset's, ``step_count``
counts steps since reset) and refuses steps before a reset or after the episode is done, so every environment
gets those guarantees without writing them.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Generic, TypeVar

from pydantic import Field

from ..wire import Action, EnvironmentMetadata, ErrorCode, Observation, State
from .tools import EnvTool

ActT = TypeVar("ActT", bound=Action)
ObsT = TypeVar("ObsT", bound=Observation)


MaxSteps = Annotated[int, Field(ge=1, le=1000, description="Steps before the episode ends without an answer.")]
"""Type of the conventional ``max_steps`` reset option (bounds and description published in the reset schema)."""


class EnvError(Exception):
    """An error the environment raises on purpose; the server turns it into an error frame with ``code`` (and
    ``extra``'s JSON-serialisable fields next to the message)."""

    code: ErrorCode = ErrorCode.EXECUTION_ERROR

    def __init__(self, message: str, code: ErrorCode | None = None, **extra: Any) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.extra = extra


class EpisodeNotStarted(EnvError):
    code = ErrorCode.EPISODE_NOT_STARTED


class EpisodeDone(EnvError):
    code = ErrorCode.EPISODE_DONE


class Environment(ABC, Generic[ActT, ObsT]):
    """One episode-at-a-time environment instance; the server makes one per WebSocket session.

    Class attributes declare the wire types and how the server may run the instance:

    * ``action_type`` / ``observation_type`` / ``state_type`` – pydantic models, published by ``/schema``;
    * ``BLOCKING`` – True when ``_step`` may block or burn CPU: the server then runs each session's instance in its
      own worker process, under the per-session limits (wall time, memory, disk) and killed when over them; there
      ``_reset`` runs on a second thread of that process and ``_step`` on its main thread, never both at once, so
      the instance must not tie resources to one thread; cheap environments leave it False and are stepped on the
      event loop, which is several times faster;
    * ``SUPPORTS_CONCURRENT_SESSIONS`` – False makes the server refuse ``max_sessions > 1``;
    * ``TOOLS`` – the MCP tools (``EnvTool``), each a typed front for one native action;
    * ``TASK_SEEDS`` – task splits for OpenEnv's task routes: split name -> the seeds of its tasks (a task is the
      reset options ``{"seed": s}``); empty means the env has no task API (the routes answer 501);
    * ``DEFAULT_LIMITS`` – ``ServerLimits`` defaults this env needs instead of the server's (an env whose steps run
      real commands for seconds needs a longer step timeout); ``OPENENV_ECHO_*`` variables and flags still win.

    ``startup``/``shutdown`` run once per server (its lifespan), for resources the env's instances share.
    """

    action_type: ClassVar[type[Action]] = Action
    observation_type: ClassVar[type[Observation]] = Observation
    state_type: ClassVar[type[State]] = State
    name: ClassVar[str | None] = None
    description: ClassVar[str | None] = None
    version: ClassVar[str] = "1.0.0"
    BLOCKING: ClassVar[bool] = False
    SUPPORTS_CONCURRENT_SESSIONS: ClassVar[bool] = True
    TOOLS: ClassVar[tuple[EnvTool, ...]] = ()
    TASK_SEEDS: ClassVar[dict[str, range]] = {}
    DEFAULT_LIMITS: ClassVar[Mapping[str, Any]] = {}

    def __init__(self) -> None:
        self._episode_id: str | None = None
        self._step_count = 0
        self._started = False
        self._done = False

    # -- what subclasses implement -------------------------------------------------------------------------
    @abstractmethod
    def _reset(self, seed: int | None, *args: Any, **kwargs: Any) -> ObsT:
        """Start a new episode (deterministic for a given ``seed``) and return the first observation. Subclasses
        declare their reset options as keyword parameters (the server reads them from this signature)."""

    @abstractmethod
    def _step(self, action: ActT) -> ObsT:
        """Apply one validated action and return the resulting observation."""

    def extra_state(self) -> dict[str, Any]:
        """Env-specific fields added to ``state`` (next to ``episode_id`` and ``step_count``)."""
        return {}

    def close(self) -> None:
        """Release resources; called once when the session ends."""

    @classmethod
    async def startup(cls) -> None:
        """Called once when a server of this env starts, before any session (shared resources)."""

    @classmethod
    async def shutdown(cls) -> None:
        """Called once when the server stops, after every session was closed."""

    @classmethod
    async def not_ready(cls) -> str | None:
        """Why a new session would fail now (a service the env needs does not answer), or None. The probe port's
        ``/ready`` reports it, so an orchestrator routes sessions elsewhere without restarting the server."""
        return None

    # -- the public API the server (and tests) call -----------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ObsT:
        return self._begin(self._reset(seed, **kwargs), episode_id)

    def step(self, action: ActT) -> ObsT:
        self._check_steppable()
        return self._counted(self._step(action))

    # bookkeeping shared with async overrides of reset_async/step_async
    def _begin(self, obs: ObsT, episode_id: str | None) -> ObsT:
        self._episode_id = episode_id if episode_id is not None else str(uuid.uuid4())
        self._step_count = 0
        self._started = True
        self._done = bool(obs.done)
        return obs

    def _check_steppable(self) -> None:
        if not self._started:
            raise EpisodeNotStarted("step before reset: send a reset first")
        if self._done:
            raise EpisodeDone("the episode is done: send a reset to start a new one")

    def _counted(self, obs: ObsT) -> ObsT:
        self._step_count += 1
        self._done = bool(obs.done)
        return obs

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ObsT:
        """Async entry point; override for environments whose reset does real async I/O."""
        return self.reset(seed, episode_id, **kwargs)

    async def step_async(self, action: ActT) -> ObsT:
        """Async entry point; override for environments whose step does real async I/O."""
        return self.step(action)

    @property
    def state(self) -> State:
        return self.state_type(episode_id=self._episode_id, step_count=self._step_count, **self.extra_state())

    @property
    def done(self) -> bool:
        return self._done

    @classmethod
    def env_name(cls) -> str:
        return cls.name or cls.__name__

    @classmethod
    def get_metadata(cls) -> EnvironmentMetadata:
        doc = (cls.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        return EnvironmentMetadata(
            name=cls.env_name(),
            description=cls.description or doc or f"{cls.env_name()} environment",
            version=cls.version,
        )
