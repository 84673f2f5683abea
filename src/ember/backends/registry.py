"""Backends by name: the built-in ones plus plugins found through the `ember.backends`
entry-point group (each entry point loads a zero-argument factory returning a Backend)."""
from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

from ember.backends.api import Backend
from ember.support.errors import EmberError

BackendFactory = Callable[..., Backend]
_BUILTIN: dict[str, BackendFactory] = {}
_EXPLICIT: set[str] = set()  # run only when named: left out of backend="auto" (simulated devices)


def register_backend(name: str, factory: BackendFactory, explicit: bool = False) -> None:
    if name in _BUILTIN:
        raise ValueError(f"backend '{name}' is registered twice")
    _BUILTIN[name] = factory
    if explicit:
        _EXPLICIT.add(name)


def _plugins() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group="ember.backends")}


def available_backends() -> list[str]:
    return sorted(set(_BUILTIN) | set(_plugins()))


def automatic_backends() -> list[str]:
    """The backends backend="auto" considers: every available one but those run only when named."""
    return [name for name in available_backends() if name not in _EXPLICIT]


def get_backend(name: str, **options) -> Backend:
    """A backend instance; `options` (e.g. num_threads) go to its factory."""
    if name in _BUILTIN:
        try:
            return _BUILTIN[name](**options)
        except TypeError as err:
            raise EmberError(f"backend '{name}' does not take options {sorted(options)}: {err}") from None
    plugin = _plugins().get(name)
    if plugin is None:
        raise EmberError(f"unknown backend '{name}' (available: {', '.join(available_backends())})")
    try:
        backend = plugin.load()(**options)
    except Exception as err:  # a plugin's import or constructor failing is its failure, named
        raise EmberError(f"backend plugin '{name}' ({plugin.value}) failed to load: "
                         f"{type(err).__name__}: {err}") from err
    if not isinstance(backend, Backend):
        raise EmberError(f"backend plugin '{name}' did not return an ember Backend")
    return backend
