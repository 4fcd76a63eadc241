"""A real local Ray cluster for the fleet tests: a head and a second node process on this machine, on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Ray turns 127.0.0.1 into the machine's outward address unless told it runs as a one-machine cluster; the tests
# must only ever talk to loopback. Read at `import ray`, so set before it.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")  # a loaded 2-core machine starts raylets slowly


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """Address of a two-node Ray cluster (head + a second raylet), torn down after the session."""
    import ray
    from ray.cluster_utils import Cluster

    from openenv_echo.providers.ray import keep_on_loopback

    keep_on_loopback()  # again, in case another test imported ray before this conftest set the variable
    from ray._private.services import get_node_ip_address

    assert get_node_ip_address() == "127.0.0.1", "Ray would leave loopback: refusing to start the cluster"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        assert cluster.address.startswith("127.0.0.1:"), cluster.address
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()
