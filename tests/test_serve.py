"""Serving and splitting on a real (local, loopback-only) Ray cluster: a served model answers
over HTTP as the interpreter does, batched and one request at a time; bad requests get 4xx and
the replica keeps serving; a model split across two Ray actors, each capped below the model's
size, matches the interpreter. One Ray session for the module (starting Ray is the slow part).
Throughput, batching gains and the replica-kill test are in bench/serve_load.py."""
from __future__ import annotations

import io
import json
import socket
import threading

import numpy as np
import pytest

import ember
from tests.conftest import require_shared_models

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'ember[serve]' to run the serving tests")
serve = pytest.importorskip("ray.serve", reason="Ray Serve is not installed: pip install 'ember[serve]'")
requests = pytest.importorskip("requests", reason="the HTTP client of these tests (requests) is not installed")

import ember.serve  # noqa: E402


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def cluster():
    require_shared_models()
    # With Serve's direct ingress: each replica also answers on a port of its own (the proxy too).
    ember.serve.connect(num_cpus=2, direct_ingress=True)
    try:
        yield _free_port()
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def reference():
    return ember.compile(str(require_shared_models() / "mlp.onnx"), backend="interpreter")


def _expected(reference, x: np.ndarray) -> np.ndarray:
    return np.concatenate([reference.run({"input": row[None]})["logits"] for row in x])


def test_batched_deployment_answers_over_http(cluster, reference):
    import onnx

    proto = onnx.load(str(require_shared_models() / "mlp.onnx"))
    for value in [*proto.graph.input, *proto.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    app = ember.serve.deploy(proto, replicas=1, max_batch=8, batch_wait_ms=40, port=cluster, name="batched",
                             route_prefix="/batched", replica_cpus=0.5)
    try:
        assert app.running_replicas() == 1
        ready = requests.get(f"{app.url}/ready", timeout=30).json()
        assert ready["batch_sizes"] == [1, 2, 4, 8] and ready["loaded_from"] == "artifact"
        rng = np.random.default_rng(0)
        x = rng.standard_normal((3, 784)).astype(np.float32)
        answer = requests.post(f"{app.url}/", json={"inputs": {"input": x.tolist()}}, timeout=30)
        assert answer.status_code == 200
        np.testing.assert_allclose(answer.json()["outputs"]["logits"], _expected(reference, x), rtol=1e-4, atol=1e-5)
        # Callers inside the cluster use the handle: arrays in, arrays out.
        by_handle = app.handle.predict.remote({"input": x}).result(timeout_s=60)
        np.testing.assert_allclose(by_handle["logits"], _expected(reference, x), rtol=1e-4, atol=1e-5)
        # Bad requests: 4xx with a reason, and the replica goes on answering.
        bad = requests.post(f"{app.url}/", data=b'{"inputs": {"input": [[1, 2]]}}',
                            headers={"content-type": "application/json"}, timeout=30)
        assert bad.status_code == 422 and "float32[batch, 784]" in bad.json()["error"]
        assert requests.post(f"{app.url}/", data=b"{", timeout=30).status_code == 400
        # Concurrent one-row requests are gathered into batches; each gets its own row back.
        samples = rng.standard_normal((12, 784)).astype(np.float32)
        results: dict[int, np.ndarray] = {}

        def post(i: int) -> None:
            buffer = io.BytesIO()
            np.savez(buffer, input=samples[i:i + 1])
            reply = requests.post(f"{app.url}/predict", data=buffer.getvalue(),
                                  headers={"content-type": "application/x-npz"}, timeout=60)
            assert reply.status_code == 200
            results[i] = np.load(io.BytesIO(reply.content))["logits"]

        threads = [threading.Thread(target=post, args=(i,)) for i in range(len(samples))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results) == list(range(len(samples)))
        np.testing.assert_allclose(np.concatenate([results[i] for i in range(len(samples))]),
                                   _expected(reference, samples), rtol=1e-4, atol=1e-5)
        metrics = requests.get(f"{app.url}/metrics", timeout=30).json()
        assert metrics["requests"]["client_error"] == 2 and metrics["requests"]["ok"] == 14
        assert metrics["batches"] < 14 and metrics["mean_batch_rows"] > 1  # some requests shared a batch
        # The replicas fetched the artifacts from a detached actor (Serve's checkpoint holds no bytes).
        assert ray.get_actor("ember-artifacts-batched", namespace="ember") is not None
    finally:
        app.shutdown()
    with pytest.raises(ValueError):
        ray.get_actor("ember-artifacts-batched", namespace="ember")


def test_artifact_deployment_answers_one_request_at_a_time(cluster, reference, tmp_path):
    path = tmp_path / "mlp.ember"
    ember.compile(str(require_shared_models() / "mlp.onnx"), backend="cpu", num_threads=1).save(path)
    app = ember.serve.deploy(str(path), replicas=1, port=cluster, name="single", route_prefix="/single",
                             replica_cpus=0.5, max_body_bytes=64 << 10, direct_ingress=True)
    try:
        x = np.random.default_rng(2).standard_normal((1, 784)).astype(np.float32)
        # Through Serve's proxy, and straight to the replica (direct ingress: its own port).
        [direct] = app.replica_urls
        assert direct.startswith("http://127.0.0.1:") and direct.endswith("/single") and not direct.startswith(app.url)
        for url in (app.url, direct):
            answer = requests.post(f"{url}/", json={"inputs": {"input": x.tolist()}}, timeout=30)
            assert answer.status_code == 200
            np.testing.assert_allclose(answer.json()["outputs"]["logits"], _expected(reference, x),
                                       rtol=1e-4, atol=1e-5)
        assert requests.get(f"{direct}/metrics", timeout=30).json()["requests"]["ok"] == 2  # one replica saw both
        big = requests.post(f"{app.url}/", data=json.dumps({"inputs": {"input": [[0.0] * 784] * 40}}),
                            headers={"content-type": "application/json"}, timeout=30)
        assert big.status_code == 413 and "limit" in big.json()["error"]
        assert requests.get(f"{app.url}/healthz", timeout=30).json()["status"] == "ok"
        assert requests.post(f"{app.url}/", json={"inputs": {"input": x.tolist()}}, timeout=30).status_code == 200
    finally:
        app.shutdown()


def test_model_split_across_two_capped_actors_matches_the_interpreter(cluster, reference):
    whole = ember.compile(str(require_shared_models() / "mlp.onnx"), backend="cpu", num_threads=1)
    size = whole.stats["weight_bytes"] + whole.stats["arena_bytes"]
    cap = int(size * 0.65)
    model = ember.serve.split(str(require_shared_models() / "mlp.onnx"), memory_cap=cap, actor_cpus=0.25)
    try:
        actors = model.stats["actors"]
        assert len(actors) == 2 and all(a["footprint_bytes"] <= cap < size for a in actors)
        pids = ray.get([step.actor.describe.remote() for step in model.executable.steps])
        assert len({p["pid"] for p in pids}) == 2  # two processes, each holding one segment
        x = np.random.default_rng(3).standard_normal((1, 784)).astype(np.float32)
        np.testing.assert_allclose(model.run({"input": x})["logits"], reference.run({"input": x})["logits"],
                                   rtol=1e-4, atol=1e-5)
        with pytest.raises(ember.UnsupportedError, match="memory cap"):
            ember.serve.split(str(require_shared_models() / "mlp.onnx"), memory_cap=1 << 20)  # one Gemm is more
    finally:
        model.executable.close()


def test_requests_on_a_killed_replica_are_retried_once_on_the_other(cluster, reference):
    import onnx

    proto = onnx.load(str(require_shared_models() / "mlp.onnx"))
    for value in [*proto.graph.input, *proto.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    # A long batch wait keeps requests inside the replicas when one is killed.
    app = ember.serve.deploy(proto, replicas=2, max_batch=16, batch_wait_ms=1500, port=cluster, name="failover",
                             route_prefix="/failover", replica_cpus=0.25, batch_sizes=[16], failover=True)
    try:
        assert app.running_replicas() == 2
        samples = np.random.default_rng(4).standard_normal((8, 784)).astype(np.float32)
        answers: dict[int, list] = {}

        def post(i: int) -> None:
            reply = requests.post(f"{app.url}/", json={"inputs": {"input": samples[i:i + 1].tolist()}},
                                  headers={"x-request-id": f"r{i}"}, timeout=60)
            answers.setdefault(i, []).append((reply.status_code, reply.headers.get("x-request-id"), reply.json()))

        threads = [threading.Thread(target=post, args=(i,)) for i in range(len(samples))]
        for thread in threads:
            thread.start()
        import time

        time.sleep(0.6)
        victim = next(a for a in ray.util.list_named_actors(all_namespaces=True)
                      if a["name"].startswith("SERVE_REPLICA::failover#failover#"))
        ray.kill(ray.get_actor(victim["name"], namespace=victim["namespace"]), no_restart=True)
        for thread in threads:
            thread.join()
        assert sorted(answers) == list(range(len(samples))) and all(len(a) == 1 for a in answers.values())
        for i, [(status, echo, body)] in answers.items():
            assert status == 200 and echo == f"r{i}", body
            np.testing.assert_allclose(body["outputs"]["logits"], _expected(reference, samples[i:i + 1]),
                                       rtol=1e-4, atol=1e-5)
        failover = requests.get(f"{app.url}/metrics", timeout=30).json()["failover"]
        assert failover["replica_died_failed"] == 0
        assert 1 <= failover["replica_died_retried"] < len(samples)  # the killed replica held some of them
    finally:
        app.shutdown()


def test_tuning_rounds_run_on_ray_workers_and_fill_this_machines_cache(cluster, tmp_path):
    from ember.serve.tuning import matching_nodes
    from ember.tuning import tune_kernels
    from tests.helpers import relative_error
    from tests.test_tuning import conv_model

    model = conv_model(channels=32, out_channels=32, hw=(14, 14), kernel=3, stride=1, pads=[1] * 4, act="Relu")
    x = np.random.default_rng(5).standard_normal((1, 32, 14, 14)).astype(np.float32)
    expected = ember.compile(model, backend="interpreter").run({"x": x})["y"]
    cache = tmp_path / "kernel-tuning.json"
    # Out of time before any round ends: the rounds are cancelled, nothing is measured or cached.
    late = ember.serve.tune_on_ray(model, num_threads=1, cache=cache, budget_s=0.0)
    assert late.report["measured"] == 0 and late.report["rounds"] == 0 and not cache.exists()
    tuned = ember.serve.compile_tuned_on_ray(model, num_threads=1, cache=cache)
    report = tuned.stats["tuning"]
    assert report["measured"] == 1 and report["rounds"] >= 5 and report["nodes"] == 1 and report["parallel"] == 2
    (timings,) = report["timings_us"].values()
    assert {"conv_winograd4", "conv_winograd", "conv_direct", "conv_gemm"} <= set(timings)
    assert relative_error(tuned.run({"x": x})["y"], expected) < 2e-5  # Winograd's rounding, as in test_tuning
    # The workers' times were merged into this machine's cache: a local search reads them.
    local = tune_kernels(model, num_threads=1, cache=cache)
    assert local.report["from_cache"] == 1 and local.report["rounds"] == 0
    assert local.report["timings_us"] == report["timings_us"]
    # Only nodes of this CPU model, compiler and kernel sources take rounds.
    assert matching_nodes({"b": "key", "a": "key", "c": "other"}, "key") == ["a", "b"]
    with pytest.raises(ember.EmberError, match="a file path or an onnx.ModelProto"):
        ember.serve.tune_on_ray(object(), num_threads=1, cache=cache)
