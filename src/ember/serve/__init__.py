"""Layer 12: Ember beyond one process, on Ray (an optional extra: pip install 'ember[serve]').

    app = ember.serve.deploy("model.onnx", replicas=2, max_batch=16, batch_wait_ms=5, port=8000)
    # POST http://127.0.0.1:8000/ {"inputs": {name: nested lists}} or an .npz; GET /ready, /metrics
    app = ember.serve.deploy("model.onnx", replicas=2, direct_ingress=True)
    # app.replica_urls: each replica's own address (no proxy hop; spread requests over them)
    m = ember.serve.split("model.onnx", memory_cap=64 << 20)   # segments on Ray actors, each under the cap
    m = ember.serve.compile_tuned_on_ray("model.onnx", num_threads=1)  # tune=True's rounds on Ray workers

Serving (serve/package.py, serve/replica.py): the model is compiled once here and shipped to
the replicas as artifacts; Ray Serve runs them, batching requests along the batch dimension
where the model has one. Splitting (serve/split.py): the partitioner's memory-constrained
segments, each on a Ray actor of its own (runtime/remote.py), tensors through Ray's object
store. Tuning (serve/tuning.py): the measured kernel search's rounds as parallel Ray tasks on
the nodes of this CPU model, merged into this machine's tuning cache. Nothing here imports Ray
until it is used."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ember.serve.cluster import INSTALL_HINT, RayMissingError, connect, replica_urls, require_ray
from ember.serve.package import ServedModel, prepare
from ember.serve.replica import ServeOptions
from ember.serve.split import split
from ember.serve.tuning import compile_tuned_on_ray, tune_on_ray
from ember.support.errors import EmberError

__all__ = ["INSTALL_HINT", "Deployment", "RayMissingError", "ServeOptions", "ServedModel", "compile_tuned_on_ray",
           "deploy", "prepare", "require_ray", "split", "tune_on_ray"]


@dataclass
class Deployment:
    """A running application: its URL (Serve's proxy), the Ray Serve handle, what was deployed,
    and where the cluster serves with direct ingress, each replica's own URL (replica_urls:
    requests sent there skip the proxy; a client or load balancer spreads them)."""

    url: str
    name: str
    options: ServeOptions
    served: ServedModel
    handle: Any = field(repr=False, default=None)
    replica_urls: list[str] = field(default_factory=list)

    def status(self) -> dict[str, Any]:
        """The application's state and its model replicas by state (Ray Serve's view)."""
        from ray import serve

        app = serve.status().applications.get(self.name)
        if app is None:
            return {"status": "NOT_FOUND", "replicas": {}}
        replicas: dict[str, int] = {}
        for deployment_name, deployment in app.deployments.items():
            if deployment_name != self.options.name:  # the failover front is no model replica
                continue
            for state, count in deployment.replica_states.items():
                key = str(getattr(state, "value", state))
                replicas[key] = replicas.get(key, 0) + count
        return {"status": str(getattr(app.status, "value", app.status)), "replicas": replicas}

    def running_replicas(self) -> int:
        return int(self.status()["replicas"].get("RUNNING", 0))

    def shutdown(self) -> None:
        """Removes the application (the Ray cluster and Serve stay up)."""
        from ray import serve

        from ember.serve.replica import remove_store

        serve.delete(self.name)
        remove_store(self.name)


def deploy(model: Any, replicas: int = 1, max_batch: int = 1, batch_wait_ms: float = 5.0, *,
           address: str | None = None, host: str = "127.0.0.1", port: int = 8000, num_threads: int = 1,
           backend: str = "cpu", input_shapes: Mapping[str, Sequence[int]] | None = None,
           max_body_bytes: int = 64 << 20, name: str = "ember", route_prefix: str = "/",
           replica_cpus: float | None = None, max_ongoing_requests: int | None = None,
           num_cpus: int | None = None, batch_sizes: Sequence[int] | None = None,
           failover: bool = False, direct_ingress: bool = False) -> Deployment:
    """Compiles `model` once (an ONNX path or ModelProto, an Ember artifact or a
    CompiledModel) and serves it on Ray Serve at http://host:port{route_prefix}: `replicas`
    copies, each running its model on `num_threads` threads; requests batched up to
    `max_batch` rows or `batch_wait_ms` where the model has a symbolic leading batch
    dimension (compiled for `batch_sizes` rows, default 1, 2, 4, ... max_batch; a batch runs
    on the smallest that holds it, padded). address: a Ray cluster to join (default: start a
    local one with `num_cpus`). Returns once every replica is ready; callers inside the
    cluster may use `.handle.predict.remote({name: array})` instead of HTTP. failover: a
    front deployment retries a request whose replica died while running it once on another
    replica, or answers 503 saying so (serve/front.py; one more hop per request).
    direct_ingress: each replica answers HTTP on a port of its own (Deployment.replica_urls),
    skipping Serve's proxy and its RPC to the replica: on a 2-core machine that cut the CPU
    spent outside the model per request from about 8 ms to 1 ms (bench/serve_load.py). A
    local cluster started here is started so; one joined by address must have been started
    with RAY_SERVE_ENABLE_DIRECT_INGRESS=1 (else EmberError). The proxy URL keeps working."""
    require_ray(serve=True)
    if not isinstance(replicas, int) or replicas < 1:
        raise EmberError(f"replicas must be an integer >= 1, got {replicas!r}")
    if not batch_wait_ms >= 0:
        raise EmberError(f"batch_wait_ms must be >= 0, got {batch_wait_ms!r}")
    if not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise EmberError(f"max_body_bytes must be a positive integer, got {max_body_bytes!r}")
    options = ServeOptions(replicas=replicas, max_batch=max_batch, batch_wait_ms=batch_wait_ms,
                           num_threads=num_threads, max_body_bytes=max_body_bytes,
                           max_ongoing_requests=max_ongoing_requests, replica_cpus=replica_cpus, name=name,
                           route_prefix=route_prefix, failover=failover)
    served = prepare(model, max_batch=max_batch, backend=backend, num_threads=num_threads,
                     input_shapes=input_shapes, batch_sizes=batch_sizes)
    from ember.serve.replica import build_application, remove_store, store_artifacts

    connect(address, num_cpus, direct_ingress=direct_ingress)
    from ray import serve

    serve.start(http_options={"host": host, "port": port})
    shipped = store_artifacts(served, name)
    handle = serve.run(build_application(shipped, options), name=name, route_prefix=route_prefix)
    url = f"http://{host}:{port}{route_prefix.rstrip('/')}"
    ingress = 1 if failover else replicas  # with failover the front is the ingress: one replica
    urls = replica_urls(name, host, ingress, timeout=10.0 if direct_ingress else 0.0)
    if direct_ingress and not urls:
        serve.delete(name)
        remove_store(name)
        raise EmberError("direct ingress was asked for, but this Ray cluster's Serve runs without it (it "
                         "was started before, or elsewhere, without RAY_SERVE_ENABLE_DIRECT_INGRESS=1): "
                         "start the cluster with that variable set, or deploy without direct_ingress")
    return Deployment(url, name, options, served, handle, urls)
