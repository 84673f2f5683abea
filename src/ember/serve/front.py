"""The failover front of a served model: the application's ingress when ServeOptions.failover
is on, forwarding each request to a model replica through a Ray Serve handle.

Ray Serve's HTTP proxy does not retry a request whose replica dies while running it: it
answers a generic 500 "Internal Server Error". The front sees the replica's death as a
RayActorError (ActorDiedError, ActorUnavailableError) from the handle, and Serve's router
has then marked that replica dead, so the front sends the request once more, to another
replica. Inference has no side effects and the dead replica never answered, so the one retry
answers the request exactly once. If the retry fails the same way the front answers 503 with
a JSON body saying so. /metrics adds the front's counts of both.

The price is one more hop per request (the proxy, the front, then the replica): measured in
bench/serve_load.py. The front does not guard against its own death."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ember.serve.payload import JSON, RequestError, error_body
from ember.serve.replica import ServeOptions, read_stream, relative_path
from ember.support.errors import EmberError


class ReplicaLostError(EmberError):
    """A request's replica died, and so did (or could not be reached) the one it was retried on."""


class FailoverCounts:
    """Requests whose replica died: answered by the retry, or failed twice (answered 503)."""

    def __init__(self) -> None:
        self.retried = 0
        self.failed = 0

    def summary(self) -> dict[str, int]:
        return {"replica_died_retried": self.retried, "replica_died_failed": self.failed}


async def call_with_retry(call: Callable[[], Awaitable[Any]], counts: FailoverCounts,
                          is_replica_death: Callable[[BaseException], bool]) -> Any:
    """call(), once more if its replica died (the retry goes to another replica: Serve's
    router has marked the dead one); ReplicaLostError if the retry's replica died too."""
    try:
        return await call()
    except Exception as first:
        if not is_replica_death(first):
            raise
        try:
            answer = await call()
        except Exception as second:
            if not is_replica_death(second):
                raise
            counts.failed += 1
            raise ReplicaLostError(
                f"the replica serving this request died ({type(first).__name__}) and so did the replica it was "
                f"retried on ({type(second).__name__}); retry the request") from second
        counts.retried += 1
        return answer


def build_front(model: Any, options: ServeOptions) -> Any:
    """The front deployment bound to the model deployment `model` (ray.serve imported here)."""
    from ray import serve
    from ray.exceptions import RayActorError, RayTaskError
    from starlette.responses import Response

    def is_replica_death(err: BaseException) -> bool:
        return isinstance(err, RayActorError) or (
            isinstance(err, RayTaskError) and isinstance(getattr(err, "cause", None), RayActorError))

    class EmberFront:
        def __init__(self, model: Any, options: ServeOptions) -> None:
            self.model = model
            self.options = options
            self.counts = FailoverCounts()

        async def __call__(self, request: Any) -> Any:
            limit = self.options.max_body_bytes
            headers = {key.lower(): value for key, value in request.headers.items()}
            extra: dict[str, str] = {}  # (Serve's proxy echoes the client's x-request-id itself)
            try:
                body = await read_stream(request, limit)
                path = relative_path(request)
                status, data, kind = await call_with_retry(
                    lambda: self.model.answer.remote(request.method, path, headers, body), self.counts,
                    is_replica_death)
                if status == 200 and "/" + path.strip("/") == "/metrics":
                    import json

                    data = json.dumps({**json.loads(data), "failover": self.counts.summary()}).encode()
            except RequestError as err:
                status, data, kind = err.status, error_body(str(err)), JSON
            except ReplicaLostError as err:
                status, data, kind = 503, error_body(str(err)), JSON
                extra["retry-after"] = "1"
            return Response(data, status_code=status, media_type=kind, headers=extra or None)

        async def predict(self, inputs: Any) -> Any:
            """As the model deployment's predict, retried once where its replica died."""
            return await call_with_retry(lambda: self.model.predict.remote(inputs), self.counts, is_replica_death)

        def failover_counts(self) -> dict[str, int]:
            return self.counts.summary()

    deployment = serve.deployment(
        name=f"{options.name}-front", num_replicas=1,
        max_ongoing_requests=max(2 * options.ongoing() * options.replicas, 256),
        logging_config={"enable_access_log": options.access_log},
        ray_actor_options={"num_cpus": 0})(EmberFront)
    return deployment.bind(model, options)
