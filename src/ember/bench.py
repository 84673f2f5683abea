"""Side-by-side latency measurement shared by `ember bench` and bench/compare.py.

Each engine lives in its own long-running process (so thread pools never compete), and the
processes take turns: the driver asks one for a short block of timed runs, waits, then asks
the other, many times over, reversing the order every pair. On a shared machine the load
from neighbours comes and goes over seconds; a ratio taken per adjacent pair of blocks sees
both engines under the same conditions, so the reported ratio is the median of the per-pair
ratios (with its quartiles), not a ratio of medians taken at different times.
ONNX Runtime and OpenVINO are only yardsticks here: they never compute anything for Ember.

`load` starts that many competing busy processes (normal priority) for the measurement, to
see how latency degrades when the cores are shared. Per engine: min, median, p90, p99,
throughput and the first run's time (after compiling or loading: what a cold request sees).

All engines run the same inputs: `feeds` (by input name, e.g. from `--input` files), else the
model's `.ref.npz` next to it (its in_<name> arrays), else seeded random data.
`peak_rss` measures one engine's process peak resident memory in a fresh process."""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ember.support.errors import EmberError
from ember.support.progress import step

# Threads of the engine that just finished may spin for a moment before sleeping.
_HANDOFF_SECONDS = 0.05
ENGINES = ("ember", "onnxruntime", "openvino")


def _inputs_for(session_inputs: Sequence[tuple[str, tuple[int, ...], npt.DTypeLike]], reference: Path | None,
                feeds_path: str | None = None) -> dict:
    if feeds_path:
        with np.load(feeds_path, allow_pickle=False) as given:
            return dict(given)
    data = dict(np.load(reference)) if reference and reference.exists() else {}
    rng = np.random.default_rng(0)
    feeds = {}
    for name, shape, dtype in session_inputs:
        if f"in_{name}" in data:
            feeds[name] = data[f"in_{name}"]
        elif np.dtype(dtype).kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[name] = np.zeros(shape, dtype)
    return feeds


def latency_summary(times: Sequence[float]) -> dict[str, float]:
    """Milliseconds: min, median, p90, p99 (linear interpolation) and mean of run times, the
    run count, and throughput (runs per second of timed run time: one request at a time)."""
    ms = np.asarray(times) * 1e3
    return {"min": float(ms.min()), "median": float(np.median(ms)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)), "mean": float(ms.mean()), "runs": len(times),
            "throughput": float(1e3 * len(ms) / ms.sum())}


def _time_block(fn: Callable[[], Any], seconds: float, min_runs: int) -> list[float]:
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _load(engine: str, model: str, threads: int, backend: str, precision: str = "fp32",
          shapes: dict[str, list[int]] | None = None,
          feeds_path: str | None = None, tune: bool = False) -> tuple[Callable[[], Any], dict[str, Any]]:
    reference = Path(model).with_suffix(".ref.npz")
    if engine == "ember":
        import ember

        t0 = time.perf_counter()
        compiled = ember.compile(model, backend=backend, num_threads=threads, precision=precision,
                                 input_shapes=shapes or None, tune=tune)
        info: dict[str, Any] = {"compile_seconds": time.perf_counter() - t0}
        if backend == "cpu":
            from ember.backends.cpu.threads import wait_policy

            info["openmp_wait"] = wait_policy()
        if not isinstance(compiled, ember.CompiledModel):
            if not feeds_path:
                raise EmberError(f"{model} has symbolic input dimensions: bind them (--shape NAME=D0,D1,...) "
                                 "or give inputs (--input NAME=FILE.npy)")
            # A DynamicModel: the first run compiles for the given inputs' shapes.
            specs: list[tuple[str, tuple[int, ...], npt.DTypeLike]] = []
        else:
            specs = [(s.name, s.type.shape, s.type.dtype.numpy) for s in compiled.inputs]
        feeds = _inputs_for(specs, reference, feeds_path)
        return (lambda: compiled.run(feeds)), info
    if engine == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        type_map = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
                    "tensor(bool)": np.bool_, "tensor(double)": np.float64}
        specs = [(i.name, tuple(i.shape), type_map[i.type]) for i in session.get_inputs()]
        feeds = _inputs_for(specs, reference, feeds_path)
        return (lambda: session.run(None, feeds)), {}
    if engine == "openvino":
        return _load_openvino(model, threads, reference, feeds_path)
    raise EmberError(f"unknown engine '{engine}' (one of {', '.join(ENGINES)})")


def _load_openvino(model: str, threads: int, reference: Path,
                   feeds_path: str | None = None) -> tuple[Callable[[], Any], dict[str, Any]]:
    """OpenVINO on the CPU as a latency-minded user would set it up: one stream of `threads`
    threads, and float32 inference (its default on a CPU with bf16 instructions is bf16)."""
    try:
        import openvino
    except ImportError as err:
        raise EmberError("the openvino engine needs `pip install openvino` (or ember[bench])") from err
    config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": str(threads),
              "INFERENCE_PRECISION_HINT": "f32"}
    core = openvino.Core()
    network = core.read_model(model)
    if feeds_path:
        # Static shapes, as Ember compiles for (input_shapes): a dynamic network runs slower.
        with np.load(feeds_path, allow_pickle=False) as given:
            shapes = {name: list(given[name].shape) for name in given.files}
        network.reshape({port.get_any_name(): shapes[port.get_any_name()] for port in network.inputs
                         if port.get_any_name() in shapes})
    compiled = core.compile_model(network, "CPU", config)
    specs = []
    for port in compiled.inputs if not feeds_path else ():
        if port.get_partial_shape().is_dynamic:
            raise EmberError(f"{model}: openvino input {port.get_any_name()} has dynamic dimensions: give inputs")
        specs.append((port.get_any_name(), tuple(port.get_shape()), port.get_element_type().to_dtype()))
    feeds = _inputs_for(specs, reference, feeds_path)
    request = compiled.create_infer_request()
    return (lambda: request.infer(feeds)), {}


def _busy_loop() -> None:
    while True:
        pass


@contextlib.contextmanager
def competing_load(processes: int) -> Iterator[list[subprocess.Popen]]:
    """`processes` busy processes at normal priority for the duration of the block: the kind
    of neighbour a shared machine has (another job, a compiler, a test run)."""
    busy = [subprocess.Popen([sys.executable, "-c", "from ember.bench import _busy_loop; _busy_loop()"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(processes)]
    try:
        time.sleep(0.2 if busy else 0.0)  # let them start spinning before the first block
        yield busy
    finally:
        for process in busy:
            process.kill()
        for process in busy:
            process.wait()


def serve(engine: str, model: str, threads: int, backend: str, precision: str = "fp32", inputs: str = "{}") -> None:
    """Runs inside a child process: loads one engine (`inputs`: JSON of _load's shapes and
    feeds_path), then answers timing requests. (bench/ab_revisions.py calls this signature in
    other revisions' trees: extend it compatibly.)

    The protocol is one JSON object per line on the original stdout (anything the engine
    prints goes to stderr): first {"ready": ..., info}, then for each request line
    {"seconds": s, "min_runs": n} a reply {"times": [...]}, until stdin closes."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        run, info = _load(engine, model, threads, backend, precision, **json.loads(inputs))
        start = time.perf_counter()
        run()
        info["first_run_seconds"] = time.perf_counter() - start
        for _ in range(2):
            run()
    except Exception as err:  # reported to the driver, which raises it as an EmberError
        protocol.write(json.dumps({"error": f"{type(err).__name__}: {err}"}) + "\n")
        protocol.flush()
        return
    protocol.write(json.dumps({"ready": True, **info}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        request = json.loads(line)
        times = _time_block(run, float(request["seconds"]), int(request["min_runs"]))
        protocol.write(json.dumps({"times": times}) + "\n")
        protocol.flush()


class _Worker:
    def __init__(self, engine: str, model: str, threads: int, backend: str, cache_dir: str | None = None,
                 precision: str = "fp32", shapes: dict[str, list[int]] | None = None,
                 feeds_path: str | None = None, tune: bool = False):
        self.engine = engine
        code = ("import sys; from ember.bench import serve; "
                "serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6])")
        options: dict[str, Any] = {"shapes": shapes, "feeds_path": feeds_path}
        if tune and engine == "ember":
            options["tune"] = True
        inputs = json.dumps(options)
        # NumPy's own BLAS pool would spin on the cores the engine under test uses (Ember folds
        # constants with NumPy at compile time): one BLAS thread, for both engines alike.
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        if cache_dir:
            env["EMBER_CACHE_DIR"] = cache_dir
        self._stderr = tempfile.TemporaryFile("w+")
        self._process = subprocess.Popen([sys.executable, "-c", code, engine, model, str(threads), backend, precision,
                                          inputs],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                         text=True, env=env)
        assert self._process.stdin is not None and self._process.stdout is not None  # both PIPE
        self._requests, self._replies = self._process.stdin, self._process.stdout
        self.info = self._reply()

    def _reply(self) -> dict[str, Any]:
        line = self._replies.readline()
        reply = json.loads(line) if line else {}
        if "error" in reply or not reply:
            self._stderr.seek(0)
            detail = reply.get("error") or self._stderr.read()[-3000:]
            self.close()
            raise EmberError(f"{self.engine} failed: {detail}")
        return reply

    def block(self, seconds: float, min_runs: int) -> list[float]:
        self._requests.write(json.dumps({"seconds": seconds, "min_runs": min_runs}) + "\n")
        self._requests.flush()
        return self._reply()["times"]

    def close(self) -> None:
        if self._process.poll() is None:
            self._requests.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._stderr.close()


def _compile_seconds(model: str, threads: int, backend: str, cache_dir: str | None, precision: str = "fp32",
                     shapes: dict[str, list[int]] | None = None, feeds_path: str | None = None,
                     tune: bool = False) -> float:
    worker = _Worker("ember", model, threads, backend, cache_dir, precision, shapes, feeds_path, tune)
    worker.close()
    return worker.info["compile_seconds"]


def _worker_inputs(input_shapes: Mapping[str, Sequence[int]] | None, feeds: Mapping[str, np.ndarray] | None,
                   scratch: str) -> tuple[dict[str, list[int]], str | None]:
    """What a worker process takes for its inputs: the shapes as lists, and the feeds saved to
    an .npz in `scratch` (None without feeds)."""
    shapes = {name: [int(d) for d in dims] for name, dims in (input_shapes or {}).items()}
    if not feeds:
        return shapes, None
    feeds_path = str(Path(scratch) / "feeds.npz")
    np.savez(feeds_path, **dict(feeds))  # type: ignore[arg-type]  # numpy stubs: allow_pickle
    return shapes, feeds_path


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0], ordered[0], ordered[0]
    q = statistics.quantiles(ordered, n=4)
    return q[0], statistics.median(ordered), q[2]


def compare(model: str, threads: int, backend: str = "cpu", rounds: int = 15, seconds: float = 0.3,
            engines: tuple[str, ...] = ("ember", "onnxruntime"), min_runs: int = 5,
            fresh_cache: bool = True, precision: str = "fp32", load: int = 0,
            input_shapes: Mapping[str, Sequence[int]] | None = None,
            feeds: Mapping[str, np.ndarray] | None = None, tune: bool = False) -> dict[str, Any]:
    """Times each engine in `rounds` interleaved blocks of about `seconds` each, with `load`
    competing busy processes running throughout the timed blocks. `input_shapes` binds Ember's
    symbolic dimensions; `feeds` are the inputs every engine runs (default: see the module).

    Returns per engine the median latency (over all runs; also under "p50") and the 99th
    percentile ("p99"); "latency": per engine latency_summary (ms) of all its runs;
    "first_run": per engine the seconds of its first run; "median_ratio": Ember's median over
    the first other engine's (the two medians reported); the median and quartiles of the
    per-round ratio Ember / the first
    other engine ("ratio", "ratio_q1", "ratio_q3") and Ember / the best (fastest in that
    round) of the other engines ("best_ratio", "best_ratio_q1", "best_ratio_q3", "best_peer":
    the peer fastest overall); and Ember's compile time in the first process ("compile_first":
    from an empty cache, kernel library included, when `fresh_cache`) and in a second one,
    with the cache filled ("compile_cached"). `precision` is Ember's (ember.compile(precision=...):
    "fp32" or "bf16"); `tune`: Ember compiles with tune=True (measured kernel choices, timed
    in its first process when the cache does not hold them)."""
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        raise EmberError(f"unknown engine(s) {', '.join(unknown)}: choose from {', '.join(ENGINES)}")
    if load < 0:
        raise EmberError(f"load must be a count of busy processes (0 or more), got {load}")
    with tempfile.TemporaryDirectory(prefix="ember-bench-") as scratch:
        cache = str(Path(scratch) / "cache") if fresh_cache else None
        shapes, feeds_path = _worker_inputs(input_shapes, feeds, scratch)
        workers: list[_Worker] = []
        times: dict[str, list[float]] = {e: [] for e in engines}
        block_medians: dict[str, list[float]] = {e: [] for e in engines}
        try:
            for engine in engines:
                step(f"compiling or loading the model on {engine} (in its own process)")
                workers.append(_Worker(engine, model, threads, backend, cache if engine == "ember" else None,
                                       precision, shapes, feeds_path, tune))
            with competing_load(load):
                for round_ in range(rounds):
                    step(f"timing: round {round_ + 1} of {rounds}")
                    for worker in (workers if round_ % 2 == 0 else workers[::-1]):
                        block = worker.block(seconds, min_runs)
                        times[worker.engine] += block
                        block_medians[worker.engine].append(statistics.median(block))
                        time.sleep(_HANDOFF_SECONDS)
        finally:
            for worker in workers:
                worker.close()
        summary: dict[str, Any] = {e: statistics.median(v) for e, v in times.items()}
        summary["runs"] = {e: len(v) for e, v in times.items()}
        summary["p50"] = {e: statistics.median(v) for e, v in times.items()}
        summary["p99"] = {e: float(np.percentile(v, 99)) for e, v in times.items()}
        summary["latency"] = {e: latency_summary(v) for e, v in times.items()}
        summary["first_run"] = {w.engine: w.info["first_run_seconds"] for w in workers}
        summary["load"] = load
        if "ember" in engines:
            ember_info = workers[engines.index("ember")].info
            summary["compile_first"] = ember_info["compile_seconds"]
            if "openmp_wait" in ember_info:
                summary["openmp_wait"] = ember_info["openmp_wait"]
            step("timing a compile from the filled cache")
            summary["compile_cached"] = _compile_seconds(model, threads, backend, cache, precision, shapes,
                                                         feeds_path, tune)
        others = [e for e in engines if e != "ember"]
        if "ember" in engines and others:
            ember_blocks = block_medians["ember"]
            first = [a / b for a, b in zip(ember_blocks, block_medians[others[0]], strict=True)]
            summary["ratio_q1"], summary["ratio"], summary["ratio_q3"] = _quartiles(first)
            summary["median_ratio"] = summary["ember"] / summary[others[0]]
            best = [a / min(block_medians[o][i] for o in others) for i, a in enumerate(ember_blocks)]
            summary["best_ratio_q1"], summary["best_ratio"], summary["best_ratio_q3"] = _quartiles(best)
            summary["best_peer"] = min(others, key=lambda o: summary[o])
    return summary


def _peak_rss_child(engine: str, model: str, threads: int, backend: str, runs: int, inputs: str = "{}") -> None:
    """In a fresh process: load the engine, run it `runs` times, print the peak RSS in bytes.
    inputs: JSON of the input shapes and the .npz of inputs (as _Worker passes them)."""
    given = json.loads(inputs)
    run, _ = _load(engine, model, threads, backend, shapes=given.get("shapes"), feeds_path=given.get("feeds_path"))
    for _ in range(runs):
        run()
    print(json.dumps({"peak_rss": _peak_resident_bytes()}))


def _peak_resident_bytes() -> int:
    """This process's peak resident memory: VmHWM, the high-water mark of its own address
    space. Not getrusage's ru_maxrss, which Linux carries across exec: a child started from a
    bench process that had grown to 179 MB reported at least 179 MB whatever it used."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource  # elsewhere: the best there is

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss(engine: str, model: str, threads: int = 1, backend: str = "cpu", runs: int = 5,
             cache_dir: str | None = None, input_shapes: Mapping[str, Sequence[int]] | None = None,
             feeds: Mapping[str, np.ndarray] | None = None) -> int:
    """Peak resident memory (bytes) of a fresh process that loads (for Ember: compiles, from
    the cache when it is filled) `model` on `engine` and runs it `runs` times. The Python
    interpreter, NumPy and the engine's own libraries are included, as a user's process
    would have them. input_shapes and feeds: for models with symbolic dimensions, as
    compare() takes them."""
    if engine not in ENGINES:
        raise EmberError(f"unknown engine '{engine}': choose from {', '.join(ENGINES)}")
    code = ("import sys; from ember.bench import _peak_rss_child; "
            "_peak_rss_child(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6])")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if cache_dir:
        env["EMBER_CACHE_DIR"] = cache_dir
    with tempfile.TemporaryDirectory(prefix="ember-rss-") as scratch:
        shapes, feeds_path = _worker_inputs(input_shapes, feeds, scratch)
        inputs = json.dumps({"shapes": shapes or None, "feeds_path": feeds_path})
        result = subprocess.run([sys.executable, "-c", code, engine, model, str(threads), backend, str(runs), inputs],
                                capture_output=True, text=True, env=env, check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise EmberError(f"{engine} failed measuring peak RSS of {model}: {result.stderr[-3000:]}")
    return int(json.loads(lines[-1])["peak_rss"])
