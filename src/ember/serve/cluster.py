"""Ray, found and started: the optional dependency checked with one clear message, a
connection to a cluster (an embedded local one by default, or one by address), and the
addresses of an application's replicas where Serve runs with direct ingress."""
from __future__ import annotations

import os
import time
from typing import Any

from ember.support.errors import EmberError

INSTALL_HINT = "pip install 'ember[serve]' (Ray Serve, an optional extra)"


class RayMissingError(EmberError):
    """Ray (or Ray Serve) is not installed."""


def require_ray(serve: bool = False) -> Any:
    """The `ray` module, or RayMissingError saying how to install it."""
    try:
        import ray

        if serve:
            import ray.serve  # noqa: F401
    except ImportError as err:
        raise RayMissingError(f"this needs Ray{' Serve' if serve else ''}, which is not installed "
                              f"({err}); install it with: {INSTALL_HINT}") from None
    return ray


# Ray Serve's direct ingress (Ray 2.60): each replica of an application's ingress deployment
# answers HTTP on a port of its own, and requests skip Serve's proxy and the RPC from the proxy
# to the replica. A cluster-wide switch, read from the environment when Serve's controller and
# replicas start (so when the cluster starts).
DIRECT_INGRESS_ENV = "RAY_SERVE_ENABLE_DIRECT_INGRESS"
# How long a direct-ingress replica being stopped keeps answering (Serve's default, 30 s, is for
# an external load balancer to deregister it; a local cluster has none, and the wait made each
# deployment's removal take 35 s).
DRAIN_ENV = "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"
LOCAL_DRAIN_SECONDS = "2"
# Where a replica runs the deployment's methods: Serve's default is an event loop on a thread of
# its own, so every request (and each chunk of its body) crosses from the HTTP loop's thread to
# that one and back. Ember's replica does nothing blocking on its loop (models run on a pool
# thread), so a local cluster runs it on the HTTP loop itself: a ResNet-18 replica's CPU
# outside the model fell from 3.7 to 3.0 s a minute under load (serve_load's replicas part).
USER_CODE_THREAD_ENV = "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD"


def connect(address: str | None = None, num_cpus: int | None = None, direct_ingress: bool = False) -> Any:
    """Joins the Ray cluster at `address` ("auto", "ray://host:10001", "host:6379"), or starts a
    local one on this machine (num_cpus: the CPUs it offers; default all). A process already
    connected stays on its cluster. direct_ingress: a local cluster started here serves with
    Ray Serve's direct ingress (see DIRECT_INGRESS_ENV); a cluster joined must have been
    started with it (deploy checks)."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address:
        ray.init(address=address, **options)
        return ray
    # The local cluster's processes take the switch from this process's environment when
    # they start; this process's own environment is left as it was.
    saved = {name: os.environ.get(name) for name in (DIRECT_INGRESS_ENV, DRAIN_ENV, USER_CODE_THREAD_ENV)}
    os.environ.setdefault(USER_CODE_THREAD_ENV, "0")
    if direct_ingress:
        os.environ[DIRECT_INGRESS_ENV] = "1"
        os.environ.setdefault(DRAIN_ENV, LOCAL_DRAIN_SECONDS)
    try:
        ray.init(num_cpus=num_cpus, **options)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return ray


def replica_urls(application: str, host: str, expected: int, timeout: float = 60.0) -> list[str]:
    """http://host:port{route prefix} of each running replica of `application`'s ingress
    deployment, where the cluster serves with direct ingress ([] where it does not). Waits up to
    `timeout` seconds for `expected` replicas to have their ports. host: the address the
    replicas listen on (Serve's HTTP host); the node's address where that is all interfaces."""
    ray = require_ray(serve=True)
    from ray.serve.context import _get_global_client

    client = _get_global_client()
    if client is None:
        raise EmberError("Ray Serve is not running in this cluster: deploy an application first")
    controller = client._controller
    deadline = time.monotonic() + timeout
    while True:
        urls = []
        for group in ray.get(controller.get_target_groups.remote(application)):
            if group.app_name != application or str(getattr(group.protocol, "value", group.protocol)) != "HTTP":
                continue
            prefix = group.route_prefix.rstrip("/")
            for target in group.targets:
                if not target.name.startswith("SERVE_REPLICA::"):  # Serve's proxy: no direct ingress
                    continue
                address = target.ip if host in ("0.0.0.0", "::") else host
                urls.append(f"http://{address}:{target.port}{prefix}")
        if len(urls) >= expected or time.monotonic() > deadline:
            return sorted(urls)
        time.sleep(0.2)
