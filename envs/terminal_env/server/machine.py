"""World generation: one seed -> one Linux host (files, logs, configs, processes, services, disks, an incident).

The builder (``world_builder``) lays down a healthy machine as structured events, ``incidents`` plants the incident
into them, and ``world_files`` writes everything into the virtual filesystem of the final ``Machine``.
"""

from __future__ import annotations

from .incidents import plant_incident
from .machine_state import Machine
from .world_builder import INCIDENT_KINDS, Builder
from .world_files import write_world

__all__ = ["INCIDENT_KINDS", "generate_machine"]


def generate_machine(seed: int, incident: str | None = None) -> Machine:
    """The machine of ``seed``; ``incident`` forces the incident kind (one of ``INCIDENT_KINDS``)."""
    if incident is not None and incident not in INCIDENT_KINDS:
        raise ValueError(f"unknown incident kind {incident!r}; known: {', '.join(INCIDENT_KINDS)}")
    b = Builder(seed)
    b.build_base()
    kind = b.rng.choice(INCIDENT_KINDS)
    culprit = b.rng.choice(b.apps)
    plant_incident(b, incident or kind, culprit)
    assert b.incident is not None
    return write_world(b)
