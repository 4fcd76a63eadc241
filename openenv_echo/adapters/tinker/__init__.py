"""Tinker adapter (one folder): ECHO as real ``tinker.types.Datum`` objects (``datums``; ``pip install
openenv-echo[tinker]``). SkyRL's local Tinker-API server for CPU tests is ``openenv_echo.testing.tinker_server``."""

from __future__ import annotations

from .datums import (
    CUSTOM_INPUT_RANKS,
    POLICY_LOSSES,
    EchoDatums,
    ServerSemantics,
    TinkerSampler,
    build_custom_datums,
    build_datums,
    datums_from_tokenized,
    echo_custom_loss,
    echo_datum_loss,
    echo_step,
    for_mean_per_datum,
    reference_loss,
    reported_loss,
)

__all__ = [
    "CUSTOM_INPUT_RANKS",
    "POLICY_LOSSES",
    "EchoDatums",
    "ServerSemantics",
    "TinkerSampler",
    "build_custom_datums",
    "build_datums",
    "datums_from_tokenized",
    "echo_custom_loss",
    "echo_datum_loss",
    "echo_step",
    "for_mean_per_datum",
    "reference_loss",
    "reported_loss",
]
