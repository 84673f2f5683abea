"""Ray, found and started: the optional dependency checked with one clear message, and a
connection to a cluster (an embedded local one by default, or one by address)."""
from __future__ import annotations

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


def connect(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Joins the Ray cluster at `address` ("auto", "ray://host:10001", "host:6379"), or starts a
    local one on this machine (num_cpus: the CPUs it offers; default all). A process already
    connected stays on its cluster."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address:
        ray.init(address=address, **options)
    else:
        ray.init(num_cpus=num_cpus, **options)
    return ray
