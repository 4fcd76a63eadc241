"""Import this checkout's ``openenv_echo.objective`` with torch alone, for the GPU check.

A GPU machine often has torch and transformers but none of the project's server dependencies (fastapi, uvicorn,
httpx, pydantic, ...). :func:`load_objective` imports the objective without running the top-level
``openenv_echo/__init__.py`` (which imports the server): it registers a bare ``openenv_echo`` package pointing at
this checkout, so only ``openenv_echo/objective/`` and ``openenv_echo/roles.py`` are executed, and they import
nothing but torch and the standard library, except ``EchoConfig``'s ``pydantic``. Where pydantic is missing, a
stand-in provides the part of its API that ``objective/_config.py`` uses: fields with defaults and default
factories, the declared validators, enum/nested-model coercion, ``extra="forbid"`` and ``frozen``. It checks no
types or numeric bounds (the GPU check builds only valid configurations), and the check's conformance section
proves the configurations it builds behave exactly as the RFC says.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
import typing
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def load_objective() -> tuple[types.ModuleType, str]:
    """``(openenv_echo.objective, where pydantic came from: "installed" or "stand-in")``."""
    if "openenv_echo" not in sys.modules:
        pkg = types.ModuleType("openenv_echo", "the objective only (scripts/gpu/standalone.py)")
        pkg.__path__ = [str(ROOT / "openenv_echo")]
        sys.modules["openenv_echo"] = pkg
    try:
        importlib.import_module("pydantic")
        source = "installed"
    except ImportError:
        sys.modules["pydantic"] = _pydantic_standin()
        source = "stand-in"
    return importlib.import_module("openenv_echo.objective"), source


_MISSING: Any = object()


class _Field:
    def __init__(self, default: Any, default_factory: Callable[[], Any] | None) -> None:
        self.default, self.default_factory = default, default_factory

    def make(self) -> Any:
        return self.default_factory() if self.default_factory is not None else self.default


class _Validator:
    def __init__(self, fn: Any, fields: tuple[str, ...], mode: str) -> None:
        self.fn, self.fields, self.mode = fn, fields, mode


def _coerce(tp: Any, v: Any) -> Any:
    """What pydantic's lax mode does for the annotations of ``_config.py``: enums, nested models, dict keys."""
    if typing.get_origin(tp) is dict and isinstance(v, dict):
        kt, vt = typing.get_args(tp)
        return {_coerce(kt, k): _coerce(vt, x) for k, x in v.items()}
    if isinstance(tp, type) and issubclass(tp, Enum) and not isinstance(v, tp):
        return tp(v)
    if isinstance(tp, type) and issubclass(tp, _BaseModel) and isinstance(v, dict):
        return tp(**v)
    if tp is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    return v


class _BaseModel:
    model_config: typing.ClassVar[dict[str, Any]] = {}
    _fields: typing.ClassVar[dict[str, _Field]] = {}
    _validators: typing.ClassVar[list[_Validator]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields: dict[str, _Field] = {}
        validators: list[_Validator] = []
        for klass in reversed(cls.__mro__):
            for name in inspect.get_annotations(klass):
                if name.startswith("_") or name == "model_config":
                    continue
                value = klass.__dict__.get(name, _MISSING)
                fields[name] = value if isinstance(value, _Field) else _Field(value, None)
            validators += [v for v in klass.__dict__.values() if isinstance(v, _Validator)]
        cls._fields, cls._validators = fields, validators

    def __init__(self, **data: Any) -> None:
        cls = type(self)
        extra = set(data) - set(cls._fields)
        if extra and cls.model_config.get("extra") == "forbid":
            raise ValueError(f"{cls.__name__}: unexpected fields {sorted(extra)}")
        hints = typing.get_type_hints(cls)
        for name, spec in cls._fields.items():
            v = data[name] if name in data else spec.make()
            if v is _MISSING:
                raise ValueError(f"{cls.__name__}: field {name!r} is required")
            v = self._run(name, "before", v)
            v = self._run(name, "after", _coerce(hints.get(name), v))
            object.__setattr__(self, name, v)
        for val in cls._validators:
            if not val.fields and val.mode == "after":
                val.fn(self)

    def _run(self, name: str, mode: str, v: Any) -> Any:
        for val in type(self)._validators:
            if name in val.fields and val.mode == mode:
                fn = val.fn.__func__ if isinstance(val.fn, classmethod) else val.fn
                v = fn(type(self), v)
        return v

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self).model_config.get("frozen"):
            raise TypeError(f"{type(self).__name__} is frozen")
        object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(getattr(self, n) == getattr(other, n) for n in self._fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self._fields)})"


def _pydantic_standin() -> types.ModuleType:
    mod = types.ModuleType("pydantic", "a stand-in for the part of pydantic objective/_config.py uses")
    mod.VERSION = "stand-in"  # type: ignore[attr-defined]

    def field(default: Any = _MISSING, *, default_factory: Callable[[], Any] | None = None, **_: Any) -> Any:
        return _Field(default, default_factory)

    def field_validator(*names: str, mode: str = "after") -> Callable[[Any], _Validator]:
        return lambda fn: _Validator(fn, names, mode)

    def model_validator(*, mode: str) -> Callable[[Any], _Validator]:
        return lambda fn: _Validator(fn, (), mode)

    mod.BaseModel = _BaseModel  # type: ignore[attr-defined]
    mod.ConfigDict = dict  # type: ignore[attr-defined]
    mod.Field = field  # type: ignore[attr-defined]
    mod.field_validator = field_validator  # type: ignore[attr-defined]
    mod.model_validator = model_validator  # type: ignore[attr-defined]
    return mod
