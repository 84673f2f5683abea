"""Serving without Ray: request bodies in and out (serve/payload.py), the replica's answers
and its batching path run in-process (serve/replica.py, the class Ray Serve wraps), and the
`ember serve` command where Ray is missing. The tests on a Ray cluster are tests/test_serve.py."""
from __future__ import annotations

import asyncio
import io
import json
import sys
import zipfile

import numpy as np
import pytest

import ember
from ember.serve.package import ServedModel, bucket_sizes, checked_sizes, prepare
from ember.serve.payload import InputSpec, RequestError, decode, encode
from ember.serve.replica import Replica, ServeOptions
from tests.conftest import require_shared_models

SPECS = [InputSpec("x", np.dtype(np.float32), (None, 3)), InputSpec("ids", np.dtype(np.int64), (None, 2))]


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_json_and_npz_bodies_decode_to_the_inputs_types():
    body = json.dumps({"inputs": {"x": [[1, 2.5, 3]], "ids": [[1, 2]]}}).encode()
    feeds = decode(body, "json", SPECS, 1 << 20)
    assert feeds["x"].dtype == np.float32 and feeds["ids"].dtype == np.int64
    np.testing.assert_array_equal(feeds["x"], [[1, 2.5, 3]])
    x, ids = np.ones((2, 3), np.float32), np.zeros((2, 2), np.int64)
    feeds = decode(_npz(x=x, ids=ids), "npz", SPECS, 1 << 20)
    np.testing.assert_array_equal(feeds["x"], x)
    outputs = {"y": np.arange(4, dtype=np.float32).reshape(2, 2)}
    data, kind = encode(outputs, "json")
    assert kind == "application/json" and json.loads(data) == {"outputs": {"y": [[0, 1], [2, 3]]}}
    data, kind = encode(outputs, "npz")
    np.testing.assert_array_equal(np.load(io.BytesIO(data))["y"], outputs["y"])


def _npz_of_member(data: bytes) -> bytes:
    """An .npz whose one member, x.npy, holds `data` as given."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("x.npy", data)
    return buffer.getvalue()


def _npy(array: np.ndarray, **options) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, **options)
    return buffer.getvalue()


def test_npz_members_read_as_numpy_reads_them():
    specs = [InputSpec("x", np.dtype(np.float64), (None, 3))]
    x = np.asfortranarray(np.arange(12.0).reshape(4, 3))  # stored column-major in the .npy
    feeds = decode(_npz(x=x), "npz", specs, 1 << 20)
    np.testing.assert_array_equal(feeds["x"], x)
    assert feeds["x"].flags.c_contiguous and feeds["x"].flags.writeable  # its own copy, not the body's bytes
    big_endian = decode(_npz(x=x.astype(">f8")), "npz", [InputSpec("x", np.dtype(">f8"), (None, 3))], 1 << 20)
    np.testing.assert_array_equal(big_endian["x"], x)
    # The same member bytes refused: data cut short, an object array, no .npy at all.
    whole = _npy(np.ones((2, 3)))
    for data, words in [(whole[:-8], "header says 6 x 8"),
                        (_npy(np.array([1, "a"], dtype=object), allow_pickle=True), "object arrays"),
                        (b"not an npy file", "magic string"), (whole[:9], "magic string")]:
        with pytest.raises(RequestError, match=words) as caught:
            decode(_npz_of_member(data), "npz", specs, 1 << 20)
        assert caught.value.status == 400


def test_npz_members_stored_or_compressed_and_broken_archives():
    """np.savez stores its members (read in place, without zipfile's reader); savez_compressed
    deflates them (inflated by zipfile, CRC checked). Broken archives are refused with 400."""
    specs = [InputSpec("x", np.dtype(np.float32), (2, 3))]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    stored = _npz(x=x)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, x=x)
    deflated = buffer.getvalue()
    for body in (stored, deflated):
        feeds = decode(body, "npz", specs, 1 << 20)
        np.testing.assert_array_equal(feeds["x"], x)
        assert feeds["x"].flags.writeable and feeds["x"].flags.aligned
    no_local_header = b"XX" + stored[2:]  # the central directory still points at offset 0
    data_at = 30 + int.from_bytes(deflated[26:28], "little") + int.from_bytes(deflated[28:30], "little")
    bad_stream = deflated[:data_at + 8] + bytes(b ^ 0xFF for b in deflated[data_at + 8:data_at + 24]) \
        + deflated[data_at + 24:]
    for body, words in [(no_local_header, "no local file header"), (bad_stream, "not a valid .npz")]:
        with pytest.raises(RequestError, match=words) as caught:
            decode(body, "npz", specs, 1 << 20)
        assert caught.value.status == 400


@pytest.mark.parametrize("body, fmt, status, words", [
    (b"{", "json", 400, "not valid JSON"),
    (b"[1, 2]", "json", 400, '{"inputs"'),
    (json.dumps({"inputs": {"x": [[1, 2, 3]]}}).encode(), "json", 422, "missing inputs ['ids']"),
    (json.dumps({"inputs": {"x": [[1, 2, 3]], "ids": [[1, 2]], "z": 1}}).encode(), "json", 422, "unknown inputs ['z']"),
    (json.dumps({"inputs": {"x": [[1, 2], [3]], "ids": [[1, 2]]}}).encode(), "json", 422, "rectangular"),
    (json.dumps({"inputs": {"x": [["a", "b", "c"]], "ids": [[1, 2]]}}).encode(), "json", 422, "numbers"),
    (json.dumps({"inputs": {"x": [[1, 2, 3]], "ids": [[1.5, 2]]}}).encode(), "json", 422, "integers"),
    (json.dumps({"inputs": {"x": [[1, 2, 3, 4]], "ids": [[1, 2]]}}).encode(), "json", 422, "float32[batch, 3]"),
    (json.dumps({"inputs": {"x": [[1, 2, 3]], "ids": [[1, 2], [3, 4]]}}).encode(), "json", 422, "different numbers"),
    (_npz(x=np.ones((1, 3), np.float64), ids=np.zeros((1, 2), np.int64)), "npz", 422, "element type float32"),
    (b"PK not a zip", "npz", 400, "not a valid .npz"),
])
def test_bad_bodies_are_refused_with_a_status_and_a_reason(body, fmt, status, words):
    with pytest.raises(RequestError) as caught:
        decode(body, fmt, SPECS, 1 << 20)
    assert caught.value.status == status and words in str(caught.value)


def test_oversized_bodies_are_refused_before_and_after_unpacking():
    small = json.dumps({"inputs": {"x": [[1, 2, 3]], "ids": [[1, 2]]}}).encode()
    with pytest.raises(RequestError, match="more than the limit of 10 bytes") as caught:
        decode(small, "json", SPECS, 10)
    assert caught.value.status == 413
    # An .npz that is small packed but large unpacked (zeros compress well) is refused too.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("x.npy", "w") as member:
            np.lib.format.write_array(member, np.zeros((1, 300_000), np.float32))
    packed = buffer.getvalue()
    assert len(packed) < 100_000
    with pytest.raises(RequestError, match="unpacks to") as caught:
        decode(packed, "npz", SPECS, 100_000)
    assert caught.value.status == 413


def test_bucket_sizes_pad_at_most_half_a_batch():
    assert bucket_sizes(1) == [1] and bucket_sizes(8) == [1, 2, 4, 8] and bucket_sizes(12) == [1, 2, 4, 8, 12]
    assert checked_sizes(16, [4, 1]) == [1, 4, 16]
    with pytest.raises(ember.EmberError, match="from 1 to max_batch 16"):
        checked_sizes(16, [0, 32])


def _batch_mlp():
    """The shared MLP with a symbolic batch dimension (its Gemms keep rows independent)."""
    import onnx

    proto = onnx.load(str(require_shared_models() / "mlp.onnx"))
    for value in [*proto.graph.input, *proto.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    return proto


def _post(replica: Replica, body: bytes, kind: str, path: str = "/", run_batched=None):
    async def read(limit: int) -> bytes:
        return body

    headers = {"content-type": kind, "content-length": str(len(body))}
    return asyncio.run(replica.handle("POST", path, headers, read, run_batched))


def test_replica_batches_rows_of_several_requests_and_answers_each_its_own():
    proto = _batch_mlp()
    served = prepare(proto, max_batch=8, backend="cpu", num_threads=1)
    assert served.batch_sizes == [1, 2, 4, 8] and served.batching.startswith("on")
    assert served.inputs[0].dims == (None, 784) and served.output_axes == {"logits": 0}
    replica = Replica(served, ServeOptions(max_batch=8))
    reference = ember.compile(str(require_shared_models() / "mlp.onnx"), backend="interpreter")
    rng = np.random.default_rng(0)
    requests = [{"input": rng.standard_normal((rows, 784)).astype(np.float32)} for rows in (1, 3, 1)]
    answers = replica.run_requests(requests)  # 5 rows: run on the 8-row artifact, 3 rows of padding
    for request, answer in zip(requests, answers, strict=True):
        assert answer["logits"].shape == (request["input"].shape[0], 10)
        expected = np.concatenate([reference.run({"input": row[None]})["logits"] for row in request["input"]])
        np.testing.assert_allclose(answer["logits"], expected, rtol=1e-4, atol=1e-5)
    assert replica.metrics.batches == 1 and replica.metrics.batched_rows == 5
    # Over HTTP framing: JSON in, JSON out; a request over max_batch rows is refused.
    x = requests[1]["input"]
    status, body, kind = _post(replica, json.dumps({"inputs": {"input": x.tolist()}}).encode(), "application/json")
    assert status == 200 and kind == "application/json"
    np.testing.assert_allclose(json.loads(body)["outputs"]["logits"], answers[1]["logits"], rtol=1e-5, atol=1e-6)
    status, body, _ = _post(replica, _npz(input=np.zeros((9, 784), np.float32)), "application/x-npz")
    assert status == 422 and "9 rows" in json.loads(body)["error"]


def test_replica_without_batching_keeps_serving_after_bad_requests(tmp_path):
    path = tmp_path / "mlp.ember"
    ember.compile(str(require_shared_models() / "mlp.onnx"), backend="cpu", num_threads=1).save(path)
    served = prepare(str(path))
    assert served.batch_sizes == [] and "artifact" in served.batching
    replica = Replica(served, ServeOptions(max_body_bytes=1 << 20))
    x = np.random.default_rng(1).standard_normal((1, 784)).astype(np.float32)
    expected = ember.load(path).run({"input": x})["logits"]
    bad = [(b"{", "application/json", 400), (_npz(input=x.astype(np.float64)), "application/x-npz", 422),
           (b"x" * (2 << 20), "application/json", 413), (b"{}", "text/csv", 415)]
    for body, kind, status in bad:
        assert _post(replica, body, kind)[0] == status
    status, body, kind = _post(replica, _npz(input=x), "application/x-npz", "/predict")
    assert status == 200 and kind == "application/x-npz"
    np.testing.assert_array_equal(np.load(io.BytesIO(body))["logits"], expected)
    metrics = json.loads(asyncio.run(replica.handle("GET", "/metrics", {}, None))[1])  # type: ignore[arg-type]
    assert metrics["requests"] == {"ok": 1, "client_error": 4, "server_error": 0} and metrics["p50_ms"] > 0
    ready = json.loads(asyncio.run(replica.handle("GET", "/ready", {}, None))[1])  # type: ignore[arg-type]
    assert ready["ready"] and ready["loaded_from"] == "artifact" and not ready["compiled_here"]
    assert asyncio.run(replica.handle("GET", "/nowhere", {}, None))[0] == 404  # type: ignore[arg-type]


def test_served_model_is_plain_data():
    """What Ray ships to every replica pickles (no compiled model objects inside)."""
    import pickle

    served = ServedModel("m", SPECS, ["y"], [(None, b"bytes")])
    assert pickle.loads(pickle.dumps(served)) == served
    shipped = served.stored_in("store")  # what Ray Serve checkpoints: no artifact bytes
    assert shipped.artifacts == [(None, b"")] and shipped.store == "store" and served.artifacts[0][1] == b"bytes"


def test_serve_command_without_ray_says_how_to_install_it(monkeypatch, capsys):
    from ember.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    monkeypatch.setitem(sys.modules, "ray.serve", None)
    assert main(["serve", "model.onnx"]) == 2
    error = capsys.readouterr().err
    assert "pip install 'ember[serve]'" in error and "Ray" in error


def test_replica_predict_takes_arrays_as_handle_callers_send_them():
    served = prepare(_batch_mlp(), max_batch=4, backend="cpu", num_threads=1)
    replica = Replica(served, ServeOptions(max_batch=4))
    x = np.random.default_rng(4).standard_normal((2, 784)).astype(np.float32)
    outputs = asyncio.run(replica.predict({"input": x}))
    np.testing.assert_array_equal(outputs["logits"], replica.run_requests([{"input": x}])[0]["logits"])
    for bad, words in [({"input": x.astype(np.float64)}, "element type float32"), ({"x": x}, "missing inputs"),
                       ({"input": x.tolist()}, "NumPy array"), ({"input": np.zeros((5, 784), np.float32)}, "5 rows")]:
        with pytest.raises(RequestError, match=words) as caught:
            asyncio.run(replica.predict(bad))
        assert caught.value.status == 422
    assert replica.metrics.counts == {"ok": 1, "client_error": 4, "server_error": 0}


def test_failover_retries_a_replica_death_once_and_nothing_else():
    from ember.serve.front import FailoverCounts, ReplicaLostError, call_with_retry

    class Died(Exception):
        pass

    def calls(*results):
        made = []

        async def call():
            result = results[len(made)]
            made.append(result)
            if isinstance(result, Exception):
                raise result
            return result
        return call, made

    def died(err: BaseException) -> bool:
        return isinstance(err, Died)

    counts = FailoverCounts()
    call, made = calls(Died("replica 1"), "answer")
    assert asyncio.run(call_with_retry(call, counts, died)) == "answer" and len(made) == 2
    call, made = calls("first answer", "never asked")
    assert asyncio.run(call_with_retry(call, counts, died)) == "first answer" and len(made) == 1
    call, made = calls(ValueError("the model failed"), "never asked")
    with pytest.raises(ValueError):  # only a replica's death is retried
        asyncio.run(call_with_retry(call, counts, died))
    assert len(made) == 1
    call, made = calls(Died("replica 1"), Died("replica 2"), "never asked")
    with pytest.raises(ReplicaLostError, match="died .* and so did the replica it was retried on"):
        asyncio.run(call_with_retry(call, counts, died))
    assert len(made) == 2 and counts.summary() == {"replica_died_retried": 1, "replica_died_failed": 1}


def test_serve_command_passes_direct_ingress_and_failover_to_deploy(monkeypatch, tmp_path):
    import ember.serve
    from ember.cli import main

    class Deployed(Exception):
        pass

    seen: dict = {}

    def fake_deploy(model, **options):
        seen.update(options, model=model)
        raise Deployed

    model = tmp_path / "model.onnx"
    model.write_bytes(_batch_mlp().SerializeToString())
    monkeypatch.setattr(ember.serve, "require_ray", lambda serve=False: None)
    monkeypatch.setattr(ember.serve, "deploy", fake_deploy)
    with pytest.raises(Deployed):
        main(["serve", str(model), "--direct-ingress", "--failover", "--replicas", "2"])
    assert seen["direct_ingress"] is True and seen["failover"] is True and seen["replicas"] == 2
    seen.clear()
    with pytest.raises(Deployed):
        main(["serve", str(model)])
    assert seen["direct_ingress"] is False
