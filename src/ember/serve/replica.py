"""One replica of a served model, and the Ray Serve deployment around it.

`Replica` holds no Ray: it loads the deployment's artifacts (serve/package.py; no import, no
compile), answers HTTP requests given as method, path, headers and body, and runs models on a
one-thread pool, so the event loop keeps taking requests (and filling the next batch) while a
model runs. Batched models run each batch on the smallest compiled size that holds its rows,
padded, and every request gets its own rows back.

`build_application` wraps it in a Ray Serve deployment: `@serve.batch` gathers requests up to
max_batch rows or batch_wait_ms, `check_health` lets Serve replace a broken replica.

Endpoints, under the route prefix: POST / (or /predict) runs the model; GET /healthz (the
replica is up), GET /ready (its models are loaded, with the batch sizes and load time), GET
/metrics (this replica's request counts, p50/p90/p99 latency and requests per second)."""
from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ember.runtime.compiled import CompiledModel
from ember.serve.metrics import RequestMetrics
from ember.serve.package import ServedModel
from ember.serve.payload import (
    JSON,
    RequestError,
    body_format,
    check_arrays,
    check_size,
    decode,
    encode,
    error_body,
    rows_of,
)
from ember.support.errors import EmberError, InputError

Outputs = dict[str, np.ndarray]
BatchRunner = Callable[[dict[str, np.ndarray]], Awaitable[Outputs]]


@dataclass(frozen=True)
class ServeOptions:
    """How a model is served. max_batch: rows per batch (1: no batching); batch_wait_ms: how
    long a replica waits for a batch to fill; max_body_bytes: the largest request body (and
    unpacked .npz) accepted; max_ongoing_requests: requests a replica holds at once (running,
    batching or queued inside it; default max(32, 2 max_batch): with fewer, a closed loop of 32
    clients on one replica fell from 92 to 15 requests/s as Serve's router backed off from a
    full replica); replica_cpus: Ray CPUs reserved per replica (default:
    num_threads)."""

    replicas: int = 1
    max_batch: int = 1
    batch_wait_ms: float = 5.0
    num_threads: int = 1
    max_body_bytes: int = 64 << 20
    max_ongoing_requests: int | None = None
    replica_cpus: float | None = None
    name: str = "ember"
    route_prefix: str = "/"
    access_log: bool = False  # Ray Serve's line per request (costly at high request rates)
    # A front deployment as the ingress (serve/front.py): requests whose replica dies while
    # running them are retried once on another replica, or answered 503 saying so.
    failover: bool = False

    def ongoing(self) -> int:
        return self.max_ongoing_requests or max(32, 2 * self.max_batch)


class Replica:
    def __init__(self, served: ServedModel, options: ServeOptions) -> None:
        started = time.perf_counter()
        self.served = served
        self.options = options
        self.models = load_models(served)
        self.load_seconds = time.perf_counter() - started
        self.batch_sizes = served.batch_sizes
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="ember-serve")
        self.metrics = RequestMetrics()
        self.replica_id = ""

    @property
    def batched(self) -> bool:
        return bool(self.batch_sizes)

    def check_health(self) -> None:
        if not self.models:
            raise EmberError("the replica has no model loaded")

    async def handle(self, method: str, path: str, headers: Mapping[str, str],
                     read_body: Callable[[int], Awaitable[bytes]], run_batched: BatchRunner | None = None,
                     ) -> tuple[int, bytes, str]:
        """(status, body, content type) for one request; path is relative to the route prefix."""
        route = "/" + path.strip("/")
        if route in ("/healthz", "/ready", "/metrics"):
            if method != "GET":
                return 405, error_body(f"{route} answers GET, not {method}"), JSON
            return 200, json.dumps(self._status(route)).encode(), JSON
        if route not in ("/", "/predict"):
            return 404, error_body(f"no endpoint {route}: POST / or /predict runs the model; GET /healthz, "
                                   "/ready, /metrics"), JSON
        if method != "POST":
            return 405, error_body(f"POST the inputs to run the model (got {method})"), JSON
        started = time.perf_counter()
        status, body, kind = await self._predict(headers, read_body, run_batched)
        self.metrics.record(time.perf_counter() - started, status)
        return status, body, kind

    async def _predict(self, headers: Mapping[str, str], read_body: Callable[[int], Awaitable[bytes]],
                       run_batched: BatchRunner | None) -> tuple[int, bytes, str]:
        limit = self.options.max_body_bytes
        try:
            check_size(headers.get("content-length"), limit)
            fmt = body_format(headers.get("content-type"))
            body = await read_body(limit)
            feeds = decode(body, fmt, self.served.inputs, limit)
            outputs = await self._run_request(feeds, run_batched)
            data, kind = encode(outputs, fmt)
            return 200, data, kind
        except RequestError as err:
            return err.status, error_body(str(err)), JSON
        except InputError as err:
            return 422, error_body(str(err)), JSON
        except EmberError as err:
            return 500, error_body(f"the model failed: {err}"), JSON
        except Exception as err:  # the replica answers and keeps serving
            return 500, error_body(f"internal error: {type(err).__name__}: {err}"), JSON

    async def _run_request(self, feeds: dict[str, np.ndarray], run_batched: BatchRunner | None) -> Outputs:
        """One request's outputs: through the batcher where the model has a batch dimension
        (at most max_batch rows), else on its own."""
        if not self.batched:
            return await self.run_async([feeds])
        rows = rows_of(feeds, self.served.inputs)
        if rows > self.options.max_batch:
            raise RequestError(422, f"a request carries {rows} rows, more than max_batch {self.options.max_batch}")
        return await (run_batched(feeds) if run_batched is not None else self.run_async([feeds]))

    async def predict(self, inputs: Any, run_batched: BatchRunner | None = None) -> Outputs:
        """Outputs for inputs given as arrays (a Ray Serve handle call): checked as a body's
        inputs are; raises RequestError (status and reason) for bad ones."""
        started = time.perf_counter()
        status = 500
        try:
            feeds = check_arrays(inputs, self.served.inputs)
            outputs = await self._run_request(feeds, run_batched)
            status = 200
            return outputs
        except RequestError as err:
            status = err.status
            raise
        finally:
            self.metrics.record(time.perf_counter() - started, status)

    async def run_async(self, requests: list[dict[str, np.ndarray]]) -> Any:
        """One request's outputs (a list of one feeds dict), on the model pool."""
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(self.pool, self.run_requests, requests)
        return results[0]

    async def run_batch_async(self, requests: list[dict[str, np.ndarray]]) -> list[Outputs]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, self.run_requests, requests)

    def run_requests(self, requests: list[dict[str, np.ndarray]]) -> list[Outputs]:
        """Each request's outputs: one run per request for a model without batching, else one
        run of all their rows on the smallest compiled size holding them (padded)."""
        if not self.batched:
            model = self.models[None]
            return [model.run(feeds) for feeds in requests]
        counts = [rows_of(feeds, self.served.inputs) for feeds in requests]
        total = sum(counts)
        fitting = [size for size in self.batch_sizes if size >= total]
        if not fitting:
            raise EmberError(f"a batch of {total} rows is more than the largest compiled size {self.batch_sizes[-1]}")
        size = fitting[0]
        feeds = {}
        for spec in self.served.inputs:
            joined = np.concatenate([request[spec.name] for request in requests], axis=0)
            if size > total:
                joined = np.pad(joined, [(0, size - total)] + [(0, 0)] * (joined.ndim - 1))
            feeds[spec.name] = joined
        outputs = self.models[size].run(feeds)
        self.metrics.record_batch(total)
        answers: list[Outputs] = []
        start = 0
        for count in counts:
            answer = {}
            for name, value in outputs.items():
                axis = self.served.output_axes.get(name)
                answer[name] = value if axis is None else np.take(value, range(start, start + count), axis=axis)
            answers.append(answer)
            start += count
        return answers

    def _status(self, route: str) -> dict[str, Any]:
        if route == "/healthz":
            return {"status": "ok", "replica": self.replica_id}
        if route == "/ready":
            return {"ready": bool(self.models), "replica": self.replica_id, "model": self.served.name,
                    "backend": self.served.backend, "inputs": {s.name: s.describe() for s in self.served.inputs},
                    "outputs": self.served.output_names, "batching": self.served.batching,
                    "batch_sizes": self.batch_sizes, "loaded_from": "artifact", "compiled_here": False,
                    "load_seconds": self.load_seconds, "num_threads": self.options.num_threads}
        return {"replica": self.replica_id, **self.metrics.summary()}


STORE_NAMESPACE = "ember"


class ArtifactStore:
    """The body of a detached Ray actor holding a deployment's artifacts: replicas started
    later (a replacement for one that died, a scale-up) fetch them from it, even after the
    process that deployed has exited."""

    def __init__(self, artifacts: list[tuple[int | None, bytes]]) -> None:
        self.artifacts = artifacts

    def artifact(self, index: int) -> bytes:
        return self.artifacts[index][1]

    def size(self) -> int:
        return sum(len(data) for _, data in self.artifacts)


def load_models(served: ServedModel) -> dict[int | None, CompiledModel]:
    """The deployment's artifacts loaded in this process (rows -> model), each verified by
    runtime/artifact.py; the files are written to a private folder and removed once loaded."""
    from ember.runtime.artifact import load

    store = None
    if served.store is not None:
        import ray

        store = ray.get_actor(served.store, namespace=STORE_NAMESPACE)
    models = {}
    with tempfile.TemporaryDirectory(prefix="ember-replica-") as folder:
        for index, (rows, data) in enumerate(served.artifacts):
            if store is not None:
                fetched: Any = ray.get(store.artifact.remote(index))
                data = fetched
            path = Path(folder) / f"model-{rows or 0}.ember"
            path.write_bytes(data)
            models[rows] = load(path)
    return models


def store_artifacts(served: ServedModel, name: str) -> ServedModel:
    """Starts (or replaces) the detached actor holding `served`'s artifacts for the
    application `name`; returns the model to ship to replicas, without the bytes."""
    import ray

    store_name = f"ember-artifacts-{name}"
    remove_store(name)
    store: Any = ray.remote(ArtifactStore).options(name=store_name, namespace=STORE_NAMESPACE, lifetime="detached",
                                              num_cpus=0).remote(served.artifacts)
    ray.get(store.size.remote())
    return served.stored_in(store_name)


def remove_store(name: str, timeout: float = 10.0) -> None:
    """Ends the artifact actor of the application `name`, if there is one, and waits (up to
    `timeout` seconds) until its name is free: ray.kill returns before the actor is gone, and
    a redeploy under the same name, or a check that it is gone, came too early under load."""
    import ray

    store_name = f"ember-artifacts-{name}"
    try:
        ray.kill(ray.get_actor(store_name, namespace=STORE_NAMESPACE))
    except ValueError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get_actor(store_name, namespace=STORE_NAMESPACE)
        except ValueError:
            return
        time.sleep(0.05)


def _request_id(value: str | None) -> str | None:
    """A client's X-Request-Id to echo (so it can match answers to requests), if it is a
    plain token: never a header's raw text of any length."""
    if value and len(value) <= 128 and all(c.isalnum() or c in "-_." for c in value):
        return value
    return None


async def read_stream(request: Any, limit: int) -> bytes:
    """A Starlette request's body, refused (413) as soon as it passes `limit` bytes."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"the body is more than the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def relative_path(request: Any) -> str:
    """A Starlette request's path relative to the application's route prefix."""
    root = request.scope.get("root_path", "")
    path = str(request.url.path)
    return path[len(root):] if root and path.startswith(root) else path


def build_application(served: ServedModel, options: ServeOptions) -> Any:
    """The Ray Serve application of `served` (ray.serve imported here, not at module import)."""
    from ray import serve
    from starlette.responses import Response

    max_rows = max(options.max_batch, 1)

    def rows_in(items: list[dict[str, np.ndarray]]) -> int:
        return sum(rows_of(item, served.inputs) for item in items)

    class EmberModel:
        def __init__(self, served: ServedModel, options: ServeOptions) -> None:
            self.replica = Replica(served, options)
            try:
                self.replica.replica_id = serve.get_replica_context().replica_id.unique_id
            except Exception:  # outside a replica (local testing mode): no id
                self.replica.replica_id = str(os.getpid())

        @serve.batch(max_batch_size=max_rows, batch_wait_timeout_s=options.batch_wait_ms / 1e3,
                     batch_size_fn=rows_in)
        async def run_batched(self, requests: list[dict[str, np.ndarray]]) -> list[Outputs]:
            return await self.replica.run_batch_async(requests)

        async def __call__(self, request: Any) -> Any:
            async def read_body(limit: int) -> bytes:
                return await read_stream(request, limit)

            status, body, kind = await self.replica.handle(
                request.method, relative_path(request), request.headers, read_body,
                self.run_batched if self.replica.batched else None)
            echo = _request_id(request.headers.get("x-request-id"))
            return Response(body, status_code=status, media_type=kind,
                            headers={"x-request-id": echo} if echo else None)

        async def answer(self, method: str, path: str, headers: dict[str, str], body: bytes,
                         ) -> tuple[int, bytes, str]:
            """An HTTP request the failover front read and forwarded: (status, body, type)."""
            async def read_body(limit: int) -> bytes:
                if len(body) > limit:
                    raise RequestError(413, f"the body is more than the limit of {limit} bytes")
                return body

            return await self.replica.handle(method, path, headers, read_body,
                                             self.run_batched if self.replica.batched else None)

        async def predict(self, inputs: dict[str, np.ndarray]) -> Outputs:
            """For callers inside the cluster: app.handle.predict.remote({name: array})."""
            return await self.replica.predict(inputs, self.run_batched if self.replica.batched else None)

        def check_health(self) -> None:
            self.replica.check_health()

    cpus = options.replica_cpus if options.replica_cpus is not None else float(options.num_threads)
    threads = str(options.num_threads)
    deployment = serve.deployment(
        name=options.name, num_replicas=options.replicas, max_ongoing_requests=options.ongoing(),
        logging_config={"enable_access_log": options.access_log},
        ray_actor_options={"num_cpus": cpus, "runtime_env": {"env_vars": {"OMP_NUM_THREADS": threads}}})(EmberModel)
    model = deployment.bind(served, options)
    if not options.failover:
        return model
    from ember.serve.front import build_front

    return build_front(model, options)
