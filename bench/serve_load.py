"""Serving on Ray under load (issue 21): throughput with 2 replicas against 1, dynamic
batching against one request at a time at a fixed p99 bound, and a replica killed mid-load.

    python bench/serve_load.py --parts replicas,batching   # the two throughput lines, against their targets
    python bench/serve_load.py                        # all three parts
    python bench/serve_load.py --parts kill --requests 10000
    python bench/serve_load.py --parts replicas,batching --ingress proxy   # through Serve's HTTP proxy
    python bench/serve_load.py --parts overhead       # CPU per request: direct ingress, proxy, failover front
    python bench/serve_load.py --parts model          # the batching MLP alone: ms per row at each batch size

Everything runs on this machine over loopback: a local Ray cluster and a client in this
process holding a fixed number of requests in flight (a closed loop). Replicas run 1 thread
each. The replicas and batching parts serve with Ray Serve's direct ingress by default (each
replica answers HTTP on its own port; the client spreads its connections over them, as a load
balancer would): through Serve's proxy (--ingress proxy) each request cost about 8 ms of CPU
outside the model (proxy 4 ms, the replica fetching the body from it 4 ms), which on 2 cores
competes with the replicas. Their client is RawLoad (raw keep-alive HTTP, requests encoded
once: about 0.05 ms of CPU per 4 KB request, 0.4 ms per 600 KB one).

The machine is shared, so wall figures move with other work; next to them each block reports
CPU time from /proc: of the replica processes, and of the whole serving stack (this process
and everything it started: client, Ray, Serve's controller and proxy, replicas). From those:
- replicas: with replica CPU c and CPU outside the replicas p per request, 2 replicas can
  reach at most 2c/(c+p) of one on 2 cores; less the cores b the idle stack burns (measured
  with no request in flight, a cost per second kept out of p). The "from CPU time" ratio is
  what each configuration would reach with the machine to itself: min(replicas / c,
  (cores - b) / (c + p)), 2 replicas over 1 (it takes a replica as one core; its HTTP thread
  overlapping its model thread can give one replica a little more, about 1.05 cores seen).
- batching: requests per serving CPU-second (the replica's and everything outside it, the
  idle background apart), batched against one at a time, at the operating points the p99
  bound picked.

- replicas: the shared ResNet-18 (static shapes, one request at a time; .npz bodies), served by
  a 1-replica and a 2-replica application side by side, measured in alternating blocks;
  the ratio is the median of adjacent blocks' ratios.
- batching: a wide MLP built here (onnx.helper: 1024-4096-4096-1024, a symbolic batch
  dimension; one row reads all 96 MB of weights, so rows batched together share the read: the
  model alone runs 16 rows in about the time of 3), one application without batching and one
  with max_batch 16, at several concurrency levels; for each, the best throughput whose p99
  stays under --p99-bound-ms (default 100 ms: a common interactive bound, about 25x one
  request's service time, so it admits queueing and a batch wait but not an unbounded queue);
  over HTTP, and with --transports http,handle also through a Ray Serve handle from this
  process (app.handle.predict).
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


class RawLoad:
    """A lean closed loop for throughput figures: raw HTTP/1.1 keep-alive connections with the
    requests encoded once, each worker on one of `urls` in turn (the client spreading requests
    over direct-ingress replicas, as a load balancer would), reading the status line and
    Content-Length only: on 2 shared cores the client's CPU is taken from the replicas, so the
    client spends as little as it can."""

    def __init__(self, urls: list[str], bodies: list[bytes], concurrency: int, seconds: float,
                 content_type: str = "application/x-npz") -> None:
        from urllib.parse import urlsplit

        self.targets = []
        for url in urls:
            parts = urlsplit(url)
            path = (parts.path.rstrip("/") or "") + "/"
            requests = [(f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}\r\nContent-Type: {content_type}\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n").encode() + body for body in bodies]
            self.targets.append((parts.hostname, parts.port or 80, requests))
        self.concurrency, self.seconds = concurrency, seconds
        self.latencies: list[float] = []
        self.errors: dict[str, int] = {}
        self.elapsed = self.client_cpu = 0.0

    async def _worker(self, index: int, start: float) -> None:
        host, port, requests = self.targets[index % len(self.targets)]
        reader, writer = await asyncio.open_connection(host, port)
        number = index
        try:
            while time.perf_counter() - start < self.seconds:
                began = time.perf_counter()
                writer.write(requests[number % len(requests)])
                number += self.concurrency
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                data = await reader.readexactly(length)
                status = head[9:12].decode()
                if status == "200":
                    self.latencies.append(time.perf_counter() - began)
                else:
                    detail = f"HTTP {status}: {data[:120].decode(errors='replace')}"
                    self.errors[detail] = self.errors.get(detail, 0) + 1
        finally:
            writer.close()

    async def run(self) -> RawLoad:
        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(self._worker(i, start) for i in range(self.concurrency)))
        self.elapsed, self.client_cpu = time.perf_counter() - start, time.process_time() - cpu
        return self

    def summary(self) -> dict[str, float]:
        ms = np.array(self.latencies) * 1e3
        ok = len(self.latencies)
        return {"rps": ok / self.elapsed if self.elapsed else 0.0, "ok": ok, "errors": sum(self.errors.values()),
                "p50": float(np.percentile(ms, 50)) if ok else float("nan"),
                "p99": float(np.percentile(ms, 99)) if ok else float("nan"),
                "client_ms": self.client_cpu / max(ok, 1) * 1e3}


def _proc_cpu() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds so far, command line) of every process, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    table = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        table[int(pid)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks, command)
    return table


def cpu_split(application: str) -> dict[str, float]:
    """CPU seconds so far of `application`'s replica processes ("replicas"), of everything
    serving runs on ("stack": this process, the client, and all it started: Ray's GCS, raylet,
    Serve's controller and proxy, every replica), and of the stack outside all replicas."""
    table = _proc_cpu()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    stack, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        stack += table[pid][1] if pid in table else 0.0
        todo += children.get(pid, [])
    replicas = sum(cpu for _, cpu, command in table.values() if f"ServeReplica:{application}:" in command)
    every = sum(cpu for _, cpu, command in table.values() if "ServeReplica:" in command)
    return {"replicas": replicas, "stack": stack, "outside": stack - every}


def measure_raw(urls: list[str], application: str, bodies: list[bytes], concurrency: int,
                seconds: float) -> dict[str, float]:
    """RawLoad's figures and the CPU per answered request: of the replicas ("replica_ms"), of
    the whole serving stack ("stack_ms") and of the stack outside every replica ("outside_ms");
    "cores": the cores the replicas got."""
    before = cpu_split(application)
    load = asyncio.run(RawLoad(urls, bodies, concurrency, seconds).run())
    after = cpu_split(application)
    result, elapsed = load.summary(), load.elapsed
    ok = max(result["ok"], 1)
    result["replica_ms"] = (after["replicas"] - before["replicas"]) / ok * 1e3
    result["stack_ms"] = (after["stack"] - before["stack"]) / ok * 1e3
    result["outside_ms"] = (after["outside"] - before["outside"]) / ok * 1e3
    result["cores"] = (after["replicas"] - before["replicas"]) / elapsed
    return result


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


def ingress_urls(app, args) -> list[str]:
    """Where the bench sends an application's HTTP requests: each replica's own address with
    --ingress direct (the client spreads its connections over them), else Serve's proxy."""
    if args.ingress == "direct":
        if not app.replica_urls:
            raise SystemExit("direct ingress asked for but the deployment has no replica URLs")
        return app.replica_urls
    return [app.url]


def idle_cores(application: str, seconds: float = 3.0) -> float:
    """The cores the serving stack outside the replicas burns with no request in flight (Ray's
    GCS and raylet, Serve's controller and proxy, this process's Ray threads): a cost per
    second, not per request, so it is kept out of the CPU per request. (A replica's own idle
    housekeeping stays in its CPU per request.)"""
    before, started = cpu_split(application)["outside"], time.perf_counter()
    time.sleep(seconds)
    return (cpu_split(application)["outside"] - before) / (time.perf_counter() - started)


def outside_ms(result: dict[str, float], background: float) -> float:
    """CPU per request outside the replicas (client, Ray, Serve), the idle background taken out
    (at least the client's own)."""
    measured = result["outside_ms"] - background * 1e3 / result["rps"]
    return max(measured, result.get("client_ms", 0.0))


def cpu_bound(replicas: int, result: dict[str, float], background: float) -> float:
    """Requests per second this configuration would reach with the machine's cores to itself,
    from the CPU it spent per request: each replica runs its model on one thread (replicas /
    replica CPU per request), and replicas and everything outside them share the cores the
    idle background leaves ((cores - background) / CPU per request)."""
    cores = os.cpu_count() or 1
    per_request = result["replica_ms"] + outside_ms(result, background)
    return min(replicas / result["replica_ms"], (cores - background) / per_request) * 1e3


def part_replicas(args, ember_serve) -> dict:
    model = str(SHARED / f"{args.model}.onnx")
    rng = np.random.default_rng(0)
    bodies = [_npz(input=rng.standard_normal((1, 3, 224, 224)).astype(np.float32)) for _ in range(4)]
    direct = args.ingress == "direct"
    apps = {n: ember_serve.deploy(model, replicas=n, port=args.port, name=f"replicas{n}", route_prefix=f"/replicas{n}",
                                  replica_cpus=0.5, direct_ingress=direct) for n in (1, 2)}
    urls = {n: ingress_urls(app, args) for n, app in apps.items()}
    for n in apps:
        measure_raw(urls[n], f"replicas{n}", bodies, args.concurrency, 2.0)  # warm up: first runs, connections
    background = idle_cores("replicas2")
    print(f"  idle serving stack (both applications up, no requests): {background:.3f} cores", flush=True)
    rows = []
    for round_ in range(args.rounds):
        a = measure_raw(urls[1], "replicas1", bodies, args.concurrency, args.seconds)
        b = measure_raw(urls[2], "replicas2", bodies, args.concurrency, args.seconds)
        rows.append((a, b))
        for n, r in ((1, a), (2, b)):
            label = "2 replicas" if n > 1 else "1 replica "
            print(f"  round {round_}: {label} {r['rps']:6.1f} req/s, p50 {r['p50']:6.1f} ms, "
                  f"p99 {r['p99']:6.1f} ms, errors {r['errors']}; replicas got {r['cores']:.2f} cores; CPU ms per "
                  f"request: replicas {r['replica_ms']:.2f}, whole stack {r['stack_ms']:.2f} (client "
                  f"{r['client_ms']:.2f}); load {os.getloadavg()[0]:.1f}", flush=True)
    for app in apps.values():
        app.shutdown()
    ratio = statistics.median(b["rps"] / a["rps"] for a, b in rows)
    per_core = statistics.median((b["rps"] / b["cores"]) / (a["rps"] / a["cores"]) for a, b in rows
                                 if a["cores"] > 0 and b["cores"] > 0)
    projected = statistics.median(cpu_bound(2, b, background) / cpu_bound(1, a, background) for a, b in rows)
    replica_ms = statistics.median(a["replica_ms"] for a, _ in rows)
    outside = statistics.median(outside_ms(b, background) for _, b in rows)
    ceiling = 2 * replica_ms / (replica_ms + outside)
    cores_left = (os.cpu_count() or 1) - background
    cores = statistics.median(b["cores"] for _, b in rows)
    print(f"replicas: {args.model}, {args.ingress} ingress, concurrency {args.concurrency}, medians of {args.rounds} "
          f"rounds: CPU per request: replica c = {replica_ms:.1f} ms, outside the replicas p = {outside:.2f} ms "
          f"(client, Ray, Serve; idle background {background:.2f} cores apart): ceiling on 2 cores 2c/(c+p) = "
          f"{ceiling:.2f}x, {min(2.0, cores_left * replica_ms / (replica_ms + outside)):.2f}x on the "
          f"{cores_left:.2f} cores the background leaves; the 2 replicas got {cores:.2f} cores; "
          f"requests per replica CPU-second, 2 replicas / 1: {per_core:.2f}", flush=True)
    print(f"TARGET 2 replicas >= 1.7x one replica: wall throughput {ratio:.2f}x "
          f"[{'met' if ratio >= 1.7 else 'NOT met'}]; from CPU time (load-independent) {projected:.2f}x "
          f"[{'met' if projected >= 1.7 else 'NOT met'}]", flush=True)
    return {"ratio": ratio, "per_core": per_core, "projected": projected, "ceiling": ceiling}


def part_overhead(args, ember_serve) -> dict:
    """Serving cost per request of the shared MLP (a tiny model: the rest is Serve's and
    Ember's request handling), one replica three ways: straight to the replica (direct
    ingress), through Serve's proxy, and through the proxy and the failover front; alternating
    blocks at --concurrency (RawLoad), CPU per answered request of the client, the proxy, the
    front and the model replica."""
    model = str(SHARED / "mlp.onnx")
    rng = np.random.default_rng(3)
    bodies = [_npz(input=rng.standard_normal((1, 784)).astype(np.float32)) for _ in range(8)]
    plain = ember_serve.deploy(model, replicas=1, port=args.port, name="plain", route_prefix="/plain",
                               replica_cpus=0.5, direct_ingress=args.ingress == "direct")
    front = ember_serve.deploy(model, replicas=1, port=args.port, name="front", route_prefix="/front",
                               replica_cpus=0.5, failover=True)
    ways = {"proxy": (plain, [plain.url]), "front": (front, [front.url])}
    if plain.replica_urls:
        ways = {"direct": (plain, plain.replica_urls), **ways}
    rows: dict[str, list[dict[str, float]]] = {label: [] for label in ways}
    for _, urls in ways.values():
        asyncio.run(RawLoad(urls, bodies, args.concurrency, 2.0).run())  # warm up
    for round_ in range(args.rounds):
        for label, (app, urls) in ways.items():
            parts = {"proxy": {"ProxyActor"}, "model replica": {f"ServeReplica:{app.name}:{app.name}"},
                     "front": {f"ServeReplica:{app.name}:{app.name}-front"}}
            before = {part: actor_cpu_seconds(names) for part, names in parts.items()}
            result = asyncio.run(RawLoad(urls, bodies, args.concurrency, args.seconds).run()).summary()
            for part, names in parts.items():
                result[part] = (actor_cpu_seconds(names) - before[part]) / max(result["ok"], 1) * 1e3
            rows[label].append(result)
            print(f"  round {round_} {label:6s}: {result['rps']:6.1f} req/s, p50 {result['p50']:5.1f} ms, p99 "
                  f"{result['p99']:6.1f} ms; CPU ms per request: client {result['client_ms']:.2f}, proxy "
                  f"{result['proxy']:.2f}, front {result['front']:.2f}, model replica {result['model replica']:.2f}",
                  flush=True)
    plain.shutdown()
    front.shutdown()
    summary = {label: {key: statistics.median(r[key] for r in results) for key in results[0]}
               for label, results in rows.items()}
    for label, result in summary.items():
        print(f"overhead ({label}, medians of {args.rounds} rounds, concurrency {args.concurrency}): "
              f"{result['rps']:.1f} req/s, p99 {result['p99']:.1f} ms; CPU ms per request: client "
              f"{result['client_ms']:.2f}, proxy {result['proxy']:.2f}, front {result['front']:.2f}, model replica "
              f"{result['model replica']:.2f}", flush=True)
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
    direct = args.ingress == "direct"
    plain = ember_serve.deploy(proto, replicas=1, max_batch=1, port=args.port, name="plain", route_prefix="/plain",
                               replica_cpus=0.5, direct_ingress=direct)
    batched = ember_serve.deploy(proto, replicas=1, max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms,
                                 port=args.port, name="batched", route_prefix="/batched", replica_cpus=0.5,
                                 batch_sizes=args.batch_sizes, direct_ingress=direct)
    print(f"  batching: {batched.served.batching}", flush=True)
    apps = {"plain": plain, "batched": batched}
    background = idle_cores("batched")
    print(f"  idle serving stack (both applications up, no requests): {background:.3f} cores", flush=True)

    def serving_ms(result: dict[str, float]) -> float:
        """CPU per request of the replica and of everything outside it, the idle background apart."""
        return result["replica_ms"] + outside_ms(result, background)

    ratios = {}
    for transport in args.transports:
        def run(label: str, level: int, seconds: float, transport: str = transport) -> dict[str, float]:
            app = apps[label]
            if transport == "http":
                return measure_raw(ingress_urls(app, args), label, bodies, level, seconds)
            before = cpu_split(label)
            result = measure_handle(app.handle, feeds, level, seconds)
            after = cpu_split(label)
            ok = max(result["ok"], 1)
            result.update(errors=0, replica_ms=(after["replicas"] - before["replicas"]) / ok * 1e3,
                          stack_ms=(after["stack"] - before["stack"]) / ok * 1e3,
                          outside_ms=(after["outside"] - before["outside"]) / ok * 1e3)
            return result


        for label in apps:
            run(label, 4, 2.0)  # warm up
        best: dict[str, tuple[float, int | None, dict]] = {"plain": (0.0, None, {}), "batched": (0.0, None, {})}
        for level in args.levels:
            for label in apps:
                result = run(label, level, args.seconds)
                within = result["p99"] <= args.p99_bound_ms and not result["errors"]
                print(f"  {transport:6s} {label:8s} concurrency {level:3d}: {result['rps']:7.1f} req/s, "
                      f"p50 {result['p50']:6.1f} ms, p99 {result['p99']:6.1f} ms; CPU ms per request: replica "
                      f"{result['replica_ms']:.2f}, replica and outside it {serving_ms(result):.2f}; load "
                      f"{os.getloadavg()[0]:.1f}{'' if within else '  (over the p99 bound)'}", flush=True)
                if within and result["rps"] > best[label][0]:
                    best[label] = (result["rps"], level, result)
        ratio = best["batched"][0] / best["plain"][0] if best["plain"][0] else float("nan")
        a, b = best["plain"][2], best["batched"][2]
        per_cpu = serving_ms(a) / serving_ms(b) if a and b else float("nan")
        ratios[transport] = ratio
        where = "straight to the replica (direct ingress)" if direct and transport == "http" else (
            "through Serve's proxy" if transport == "http" else "through a Ray Serve handle")
        print(f"batching ({transport}, {where}): best throughput with p99 <= {args.p99_bound_ms:.0f} ms: one "
              f"request at a time {best['plain'][0]:.1f} req/s (concurrency {best['plain'][1]}), batched (max_batch "
              f"{args.max_batch}, wait {args.batch_wait_ms} ms) {best['batched'][0]:.1f} req/s (concurrency "
              f"{best['batched'][1]}); CPU per request at those points (replica and outside it; idle background "
              f"{background:.2f} cores apart): {serving_ms(a) if a else float('nan'):.2f} -> "
              f"{serving_ms(b) if b else float('nan'):.2f} ms", flush=True)
        print(f"TARGET batching ({transport}) >= 2x at p99 <= {args.p99_bound_ms:.0f} ms: wall throughput "
              f"{ratio:.2f}x [{'met' if ratio >= 2 else 'NOT met'}]; requests per serving CPU-second at those points "
              f"(load-independent) {per_cpu:.2f}x [{'met' if per_cpu >= 2 else 'NOT met'}]", flush=True)
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
    parser.add_argument("--ingress", choices=("direct", "proxy"), default="direct",
                        help="replicas, batching, overhead parts: HTTP straight to each replica (Serve's direct "
                             "ingress; default) or through Serve's proxy")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight (replicas and kill parts)")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of one measurement block")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternating blocks per configuration (replicas, overhead parts); the median of 5 "
                             "rides out a burst of other work on a shared machine")
    parser.add_argument("--levels", type=lambda t: [int(v) for v in t.split(",")], default=[1, 4, 16, 32],
                        help="concurrency levels of the batching part")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--batch-sizes", type=lambda t: [int(v) for v in t.split(",")], default=[1, 4, 16],
                        help="row counts the batched model is compiled for (each is an artifact shipped)")
    parser.add_argument("--width", type=int, default=4096, help="hidden width of the batching part's MLP")
    parser.add_argument("--layers", type=int, default=3, help="Gemm layers of the batching part's MLP")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument("--p99-bound-ms", type=float, default=100.0)
    parser.add_argument("--transports", type=lambda t: t.split(","), default=["http"],
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
    ember_serve.connect(num_cpus=os.cpu_count(), direct_ingress=args.ingress == "direct")
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
