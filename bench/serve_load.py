"""Serving on Ray under load (issue 21): throughput with 2 replicas against 1, dynamic
batching against one request at a time at a fixed p99 bound, and a replica killed mid-load.

    python bench/serve_load.py                        # all three parts
    python bench/serve_load.py --parts kill --requests 10000
    python bench/serve_load.py --parts overhead       # CPU per request, with and without the failover front
    python bench/serve_load.py --parts model          # the batching MLP alone: ms per row at each batch size

Everything runs on this machine over loopback: a local Ray cluster, Ray Serve's HTTP proxy,
and an asyncio HTTP client (aiohttp) in this process holding a fixed number of requests in
flight (a closed loop). Replicas run 1 thread each.

- replicas: the shared ResNet-18 (static shapes, one request at a time; .npz bodies), served by
  a 1-replica and a 2-replica application side by side, measured in alternating blocks;
  the ratio is the median of adjacent blocks' ratios.
- batching: a wide MLP built here (onnx.helper: 1024-4096-4096-1024, a symbolic batch
  dimension), one application without batching and one with max_batch 16, at several
  concurrency levels; for each, the best throughput whose p99 stays under --p99-bound-ms;
  over HTTP, and through a Ray Serve handle (app.handle.predict: no HTTP proxy, as another
  deployment in the cluster would call it).
- kill: the shared MLP on 2 replicas (behind the failover front unless --failover 0);
  --requests requests, one replica killed (ray.kill) once --kill-after of them were answered.
  Every request is accounted for exactly once: correct, wrong, or an explicit error (status
  and message); then the time until Serve has 2 running replicas again, and a check round on
  the recovered deployment.

The machine is shared: figures carry the CPU name, the load average and this command."""
from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "models"


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def wide_mlp(width: int = 4096, features: int = 1024, layers: int = 3, seed: int = 0):
    """An MLP whose batch-1 run is bound by reading its weights (96 MB at width 4096): rows
    batched together share that read."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    dims = [features] + [width] * (layers - 1) + [features]
    nodes, weights, previous = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((dims[i], dims[i + 1])) / np.sqrt(dims[i])).astype(np.float32)
        bias = np.zeros(dims[i + 1], np.float32)
        weights += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(bias, f"b{i}")]
        made = f"h{i}"
        nodes.append(helper.make_node("Gemm", [previous, f"w{i}", f"b{i}"], [made]))
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [made], [made + "_relu"]))
            made += "_relu"
        previous = made
    nodes.append(helper.make_node("Identity", [previous], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", features])
    graph = helper.make_graph(nodes, "wide_mlp", [x], [y], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class Load:
    """A closed loop: `concurrency` workers, each sending the next request when its last one
    is answered, for `seconds` or until `total` requests were sent."""

    def __init__(self, url: str, bodies: list[bytes], concurrency: int, seconds: float | None = None,
                 total: int | None = None, check=None, timeout: float = 60.0, on_answer=None) -> None:
        self.url, self.bodies, self.concurrency = url, bodies, concurrency
        self.seconds, self.total, self.check, self.timeout, self.on_answer = seconds, total, check, timeout, on_answer
        self.latencies: list[float] = []
        self.outcomes: dict[int, tuple[str, str]] = {}  # request number -> (kind, detail)
        self.duplicates = 0
        self.elapsed = 0.0

    async def run(self) -> Load:
        import aiohttp

        sent = 0
        start = time.perf_counter()
        connector = aiohttp.TCPConnector(limit=self.concurrency, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            async def worker() -> None:
                nonlocal sent
                while True:
                    if self.total is not None and sent >= self.total:
                        return
                    if self.seconds is not None and time.perf_counter() - start >= self.seconds:
                        return
                    number = sent
                    sent += 1
                    body = self.bodies[number % len(self.bodies)]
                    began = time.perf_counter()
                    outcome = await self._one(session, number, body)
                    if outcome[0] == "ok":
                        self.latencies.append(time.perf_counter() - began)
                    if number in self.outcomes:
                        self.duplicates += 1
                    self.outcomes[number] = outcome
                    if self.on_answer is not None:
                        self.on_answer(len(self.outcomes))

            await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        self.elapsed = time.perf_counter() - start
        return self

    async def _one(self, session, number: int, body: bytes) -> tuple[str, str]:
        import aiohttp

        headers = {"content-type": "application/x-npz", "x-request-id": f"r{number}"}
        try:
            async with session.post(self.url, data=body, headers=headers) as reply:
                data = await reply.read()
                if reply.status != 200:
                    return "error", f"HTTP {reply.status}: {data[:160].decode(errors='replace')}"
                if reply.headers.get("x-request-id") != f"r{number}":
                    return "wrong", f"answer for {reply.headers.get('x-request-id')}"
                if self.check is not None and not self.check(number, np.load(io.BytesIO(data))):
                    return "wrong", "outputs differ from the interpreter's"
                return "ok", ""
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            return "error", f"{type(err).__name__}: {err}"

    def summary(self) -> dict[str, float]:
        ms = np.array(self.latencies) * 1e3
        ok = len(self.latencies)
        return {"rps": ok / self.elapsed if self.elapsed else 0.0, "ok": ok,
                "p50": float(np.percentile(ms, 50)) if ok else float("nan"),
                "p99": float(np.percentile(ms, 99)) if ok else float("nan")}


def measure(url: str, bodies: list[bytes], concurrency: int, seconds: float) -> dict[str, float]:
    return asyncio.run(Load(url, bodies, concurrency, seconds=seconds).run()).summary()


def measure_handle(handle, feeds: list[dict[str, np.ndarray]], concurrency: int, seconds: float) -> dict[str, float]:
    """The same closed loop through a Ray Serve handle (app.handle.predict.remote): no HTTP,
    no proxy; what a caller inside the cluster (another deployment) sees."""
    latencies: list[float] = []

    async def run() -> float:
        start = time.perf_counter()
        sent = 0

        async def worker() -> None:
            nonlocal sent
            while time.perf_counter() - start < seconds:
                began = time.perf_counter()
                await handle.predict.remote(feeds[sent % len(feeds)])
                sent += 1
                latencies.append(time.perf_counter() - began)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - start

    elapsed = asyncio.run(run())
    ms = np.array(latencies) * 1e3
    return {"rps": len(latencies) / elapsed, "ok": len(latencies), "p50": float(np.percentile(ms, 50)),
            "p99": float(np.percentile(ms, 99))}


def replica_cpu_seconds(application: str) -> float:
    """CPU seconds used so far by the replica processes of `application` (from /proc): how
    many cores the replicas actually got while the machine is shared."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            if f"ServeReplica:{application}:" not in command:
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        except OSError:
            continue
    return total


def actor_cpu_seconds(names: set[str]) -> float:
    """CPU seconds used so far by this machine's Ray worker processes running the actors
    `names` ("ServeReplica:app:deployment", "ProxyActor"), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
            if title.removeprefix("ray::").split(".", 1)[0] not in names:
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        except OSError:
            continue
    return total


def measure_with_cpu(url: str, application: str, bodies: list[bytes], concurrency: int,
                     seconds: float) -> dict[str, float]:
    before, started = replica_cpu_seconds(application), time.perf_counter()
    result = measure(url, bodies, concurrency, seconds)
    result["cores"] = (replica_cpu_seconds(application) - before) / (time.perf_counter() - started)
    return result


def part_replicas(args, ember_serve) -> dict:
    model = str(SHARED / f"{args.model}.onnx")
    rng = np.random.default_rng(0)
    bodies = [_npz(input=rng.standard_normal((1, 3, 224, 224)).astype(np.float32)) for _ in range(4)]
    one = ember_serve.deploy(model, replicas=1, port=args.port, name="one", route_prefix="/one", replica_cpus=0.5)
    two = ember_serve.deploy(model, replicas=2, port=args.port, name="two", route_prefix="/two", replica_cpus=0.5)
    for app in (one, two):
        measure(app.url + "/", bodies, args.concurrency, 2.0)  # warm up: first runs, connections
    rows, ratios = [], []
    for round_ in range(args.rounds):
        a = measure_with_cpu(one.url + "/", "one", bodies, args.concurrency, args.seconds)
        b = measure_with_cpu(two.url + "/", "two", bodies, args.concurrency, args.seconds)
        ratios.append(b["rps"] / a["rps"])
        rows.append((round_, a, b))
        print(f"  round {round_}: 1 replica {a['rps']:.1f} req/s (p50 {a['p50']:.1f} ms, p99 {a['p99']:.1f}; "
              f"replica got {a['cores']:.2f} cores); 2 replicas {b['rps']:.1f} req/s (p50 {b['p50']:.1f}, "
              f"p99 {b['p99']:.1f}; replicas got {b['cores']:.2f} cores); ratio {ratios[-1]:.2f}", flush=True)
    one.shutdown()
    two.shutdown()
    ratio = statistics.median(ratios)
    per_core = statistics.median((b["rps"] / b["cores"]) / (a["rps"] / a["cores"]) for _, a, b in rows
                                 if a["cores"] > 0 and b["cores"] > 0)
    cores = statistics.median(b["cores"] for _, _, b in rows)
    print(f"replicas: {args.model}, concurrency {args.concurrency}: 2 replicas / 1 replica throughput = "
          f"{ratio:.2f}x (median of {len(ratios)} rounds; target >= 1.7); the 2 replicas got {cores:.2f} cores of "
          f"the shared machine; requests per replica CPU-second, 2 replicas / 1: {per_core:.2f}", flush=True)
    return {"ratio": ratio, "per_core": per_core}


def part_overhead(args, ember_serve) -> dict:
    """Serving cost per request of the shared MLP (a tiny model: the rest is Serve's and
    Ember's request handling): one replica straight behind Serve's proxy, against the same
    behind the failover front; alternating blocks at --concurrency, CPU per answered request
    of the proxy, the front and the model replica."""
    model = str(SHARED / "mlp.onnx")
    rng = np.random.default_rng(3)
    bodies = [_npz(input=rng.standard_normal((1, 784)).astype(np.float32)) for _ in range(8)]
    apps = {"direct": ember_serve.deploy(model, replicas=1, port=args.port, name="direct", route_prefix="/direct",
                                         replica_cpus=0.5),
            "front": ember_serve.deploy(model, replicas=1, port=args.port, name="front", route_prefix="/front",
                                        replica_cpus=0.5, failover=True)}
    for app in apps.values():
        measure(app.url + "/", bodies, args.concurrency, 2.0)  # warm up
    rows: dict[str, list[dict[str, float]]] = {"direct": [], "front": []}
    for round_ in range(args.rounds):
        for label, app in apps.items():
            parts = {"proxy": {"ProxyActor"}, "model replica": {f"ServeReplica:{label}:{label}"},
                     "front": {f"ServeReplica:{label}:{label}-front"}}
            before = {part: actor_cpu_seconds(names) for part, names in parts.items()}
            load = asyncio.run(Load(app.url + "/", bodies, args.concurrency, seconds=args.seconds).run())
            result = load.summary()
            for part, names in parts.items():
                result[part] = (actor_cpu_seconds(names) - before[part]) / max(result["ok"], 1) * 1e3
            rows[label].append(result)
            print(f"  round {round_} {label:6s}: {result['rps']:6.1f} req/s, p50 {result['p50']:5.1f} ms, p99 "
                  f"{result['p99']:6.1f} ms; CPU ms per request: proxy {result['proxy']:.2f}, front "
                  f"{result['front']:.2f}, model replica {result['model replica']:.2f}", flush=True)
    for app in apps.values():
        app.shutdown()
    summary = {label: {key: statistics.median(r[key] for r in results) for key in results[0]}
               for label, results in rows.items()}
    for label, result in summary.items():
        print(f"overhead ({label}, medians of {args.rounds} rounds, concurrency {args.concurrency}): "
              f"{result['rps']:.1f} req/s, p99 {result['p99']:.1f} ms; CPU ms per request: proxy "
              f"{result['proxy']:.2f}, front {result['front']:.2f}, model replica {result['model replica']:.2f}",
              flush=True)
    return summary


def part_model(args, ember_serve) -> dict:
    """The batching part's MLP without Serve: one compiled model per --batch-sizes entry, run
    in this process (one thread), interleaved; the ceiling on what batching can gain."""
    import ember

    proto = wide_mlp(width=args.width, layers=args.layers)
    models = {rows: ember.compile(proto, backend="cpu", num_threads=1, input_shapes={"x": [rows, 1024]})
              for rows in args.batch_sizes}
    rng = np.random.default_rng(4)
    feeds = {rows: {"x": rng.standard_normal((rows, 1024)).astype(np.float32)} for rows in models}
    times: dict[int, list[float]] = {rows: [] for rows in models}
    for round_ in range(8):
        for rows, compiled in models.items():
            began = time.perf_counter()
            compiled.run(feeds[rows])
            if round_:  # the first round warms up
                times[rows].append(time.perf_counter() - began)
    per_row = {rows: statistics.median(values) / rows * 1e3 for rows, values in times.items()}
    smallest = min(per_row)
    for rows, ms in per_row.items():
        print(f"model alone (width {args.width}, {args.layers} layers): {rows:3d} rows {ms * rows:7.2f} ms, "
              f"{ms:6.2f} ms per row, {per_row[smallest] / ms:.2f}x the rows per second of {smallest} row(s)",
              flush=True)
    return per_row


def part_batching(args, ember_serve) -> dict:
    proto = wide_mlp(width=args.width, layers=args.layers)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, 1024)).astype(np.float32)} for _ in range(8)]
    bodies = [_npz(**item) for item in feeds]
    plain = ember_serve.deploy(proto, replicas=1, max_batch=1, port=args.port, name="plain", route_prefix="/plain",
                               replica_cpus=0.5)
    batched = ember_serve.deploy(proto, replicas=1, max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms,
                                 port=args.port, name="batched", route_prefix="/batched", replica_cpus=0.5,
                                 batch_sizes=args.batch_sizes)
    print(f"  batching: {batched.served.batching}", flush=True)
    ratios = {}
    for transport in args.transports:
        def run(app, level: int, seconds: float, transport: str = transport) -> dict[str, float]:
            if transport == "http":
                return measure(app.url + "/", bodies, level, seconds)
            return measure_handle(app.handle, feeds, level, seconds)

        for app in (plain, batched):
            run(app, 4, 2.0)  # warm up
        best: dict[str, tuple[float, int | None]] = {"plain": (0.0, None), "batched": (0.0, None)}
        for level in args.levels:
            for label, app in (("plain", plain), ("batched", batched)):
                result = run(app, level, args.seconds)
                within = result["p99"] <= args.p99_bound_ms
                print(f"  {transport:6s} {label:8s} concurrency {level:3d}: {result['rps']:7.1f} req/s, "
                      f"p50 {result['p50']:6.1f} ms, p99 {result['p99']:6.1f} ms"
                      f"{'' if within else '  (over the p99 bound)'}", flush=True)
                if within and result["rps"] > best[label][0]:
                    best[label] = (result["rps"], level)
        ratio = best["batched"][0] / best["plain"][0] if best["plain"][0] else float("nan")
        ratios[transport] = ratio
        print(f"batching ({transport}): best throughput with p99 <= {args.p99_bound_ms:.0f} ms: one request at a "
              f"time {best['plain'][0]:.1f} req/s (concurrency {best['plain'][1]}), batched (max_batch "
              f"{args.max_batch}, wait {args.batch_wait_ms} ms) {best['batched'][0]:.1f} req/s (concurrency "
              f"{best['batched'][1]}): {ratio:.2f}x (target >= 2)", flush=True)
    plain.shutdown()
    batched.shutdown()
    return ratios


def part_kill(args, ember_serve) -> dict:
    import ray

    import ember

    model = str(SHARED / "mlp.onnx")
    reference = ember.compile(model, backend="interpreter")
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((1, 784)).astype(np.float32) for _ in range(16)]
    expected = [reference.run({"input": x})["logits"] for x in inputs]
    bodies = [_npz(input=x) for x in inputs]
    served: object = model
    if args.kill_max_batch > 1:  # requests then wait in the replicas' batches: more of them in flight there
        import onnx

        proto = onnx.load(model)
        for value in [*proto.graph.input, *proto.graph.output]:
            value.type.tensor_type.shape.dim[0].dim_param = "batch"
        served = proto
    app = ember_serve.deploy(served, replicas=2, port=args.port, name="kill", route_prefix="/kill", replica_cpus=0.5,
                             failover=bool(args.failover), max_batch=args.kill_max_batch,
                             batch_wait_ms=args.batch_wait_ms)

    def check(number: int, outputs) -> bool:
        return np.allclose(outputs["logits"], expected[number % len(expected)], rtol=1e-4, atol=1e-5)

    killed: dict[str, float] = {}

    replicas = [a for a in ray.util.list_named_actors(all_namespaces=True)
                if a["name"].startswith("SERVE_REPLICA::kill#kill#")]  # a model replica, not the front
    victim = ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"])

    def kill(answered: int) -> None:
        killed["at"] = time.perf_counter()
        ray.kill(victim, no_restart=True)
        print(f"  killed {replicas[0]['name']} after {answered} answers", flush=True)

    def on_answer(answered: int) -> None:
        # On another thread: the client's loop goes on sending while the kill is under way (a
        # blocked loop let every request in flight finish first: none was running on the victim).
        if answered >= args.kill_after and not killed:
            killed["at"] = time.perf_counter()
            threading.Thread(target=kill, args=(answered,), daemon=True).start()

    load = Load(app.url + "/", bodies, args.concurrency, total=args.requests, check=check, timeout=args.timeout,
                on_answer=on_answer)
    started = time.perf_counter()
    asyncio.run(asyncio.wait_for(load.run(), args.time_limit))
    counts: dict[str, int] = {}
    errors: dict[str, int] = {}
    for kind, detail in load.outcomes.values():
        counts[kind] = counts.get(kind, 0) + 1
        if kind != "ok":
            errors[detail[:100]] = errors.get(detail[:100], 0) + 1
    unanswered = args.requests - len(load.outcomes)
    print(f"kill: {args.requests} requests in {time.perf_counter() - started:.1f} s, concurrency {args.concurrency}: "
          f"correct {counts.get('ok', 0)}, wrong {counts.get('wrong', 0)}, explicit errors {counts.get('error', 0)}, "
          f"unanswered {unanswered}, answered twice {load.duplicates}", flush=True)
    for detail, count in sorted(errors.items(), key=lambda item: -item[1])[:5]:
        print(f"  {count} x {detail}")
    recovered = None
    deadline = time.perf_counter() + args.recovery_limit
    while time.perf_counter() < deadline:
        if app.running_replicas() == 2:
            recovered = time.perf_counter() - killed.get("at", started)
            break
        time.sleep(0.25)
    after = asyncio.run(Load(app.url + "/", bodies, 4, total=200, check=check).run())
    after_ok = sum(1 for kind, _ in after.outcomes.values() if kind == "ok")
    print(f"kill: deployment back to 2 running replicas {recovered:.1f} s after the kill; " if recovered is not None
          else f"kill: NOT back to 2 replicas within {args.recovery_limit} s; ", end="")
    print(f"then {after_ok}/200 requests correct", flush=True)
    if args.failover:
        import json
        import urllib.request

        with urllib.request.urlopen(app.url + "/metrics", timeout=30) as reply:
            print(f"kill: the front's counts {json.loads(reply.read())['failover']}", flush=True)
    app.shutdown()
    return {"counts": counts, "unanswered": unanswered, "duplicates": load.duplicates, "recovered_s": recovered}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="replicas,batching,kill")
    parser.add_argument("--model", default="resnet18", help="shared model of the replicas part (default resnet18)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight (replicas and kill parts)")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of one measurement block")
    parser.add_argument("--rounds", type=int, default=3, help="alternating blocks per replicas configuration")
    parser.add_argument("--levels", type=lambda t: [int(v) for v in t.split(",")], default=[1, 4, 16, 32],
                        help="concurrency levels of the batching part")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--batch-sizes", type=lambda t: [int(v) for v in t.split(",")], default=[1, 4, 16],
                        help="row counts the batched model is compiled for (each is an artifact shipped)")
    parser.add_argument("--width", type=int, default=4096, help="hidden width of the batching part's MLP")
    parser.add_argument("--layers", type=int, default=3, help="Gemm layers of the batching part's MLP")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument("--p99-bound-ms", type=float, default=100.0)
    parser.add_argument("--transports", type=lambda t: t.split(","), default=["http", "handle"],
                        help="batching part: over HTTP (the proxy) and/or a Ray Serve handle (in-cluster callers)")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--kill-after", type=int, default=2_000)
    parser.add_argument("--timeout", type=float, default=30.0, help="per request, seconds (kill part)")
    parser.add_argument("--time-limit", type=float, default=300.0, help="the whole kill load, seconds")
    parser.add_argument("--recovery-limit", type=float, default=120.0)
    parser.add_argument("--kill-max-batch", type=int, default=1,
                        help="kill part: batch requests up to this many rows (--batch-wait-ms; default 1: none)")
    parser.add_argument("--failover", type=int, default=1, choices=(0, 1),
                        help="kill part: deploy with failover (a front retrying requests whose replica died; "
                             "default 1), or 0: Serve's proxy straight to the replicas")
    args = parser.parse_args()

    import ray

    import ember.serve as ember_serve
    from ember.support.host import cpu_name

    parts = args.parts.split(",")
    print(f"command: python bench/{Path(__file__).name} {' '.join(sys.argv[1:])}")
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at start; "
          f"Ray {ray.__version__}; replicas 1 thread each", flush=True)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        if "replicas" in parts:
            part_replicas(args, ember_serve)
        if "overhead" in parts:
            part_overhead(args, ember_serve)
        if "model" in parts:
            part_model(args, ember_serve)
        if "batching" in parts:
            part_batching(args, ember_serve)
        if "kill" in parts:
            part_kill(args, ember_serve)
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
