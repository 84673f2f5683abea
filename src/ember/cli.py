"""The `ember` command (also `python -m ember`).

    ember run MODEL [--backend B] [--input NAME=FILE.npy ...] [--reference REF.npz] [--repeat N]
    ember dump MODEL --stage graph|optimized|lowered|lir|memory|c [--format text|dot]
                     [--print-after-all] [--time-passes]
    ember bench MODEL [--backend B] [--threads N] [--compare onnxruntime] [--rounds R] [--seconds S] [--cold]
    ember bundle MODEL --target T -o DIR [--prefix NAME]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ember.driver import STAGES
from ember.support.errors import EmberError

_REFERENCE_HELP = ("an .npz holding in_<input name> arrays (used as inputs) and out_<i> arrays "
                   "(the expected outputs, in model output order)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ember", description="Ember neural-network compiler")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="compile a model, run it, print outputs and latency")
    run.add_argument("model")
    run.add_argument("--backend", default="interpreter")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--reference", metavar="REF.npz", help=_REFERENCE_HELP)
    run.add_argument("--tolerance", type=float, default=1e-4,
                     help="max |error| relative to max(1, max |reference|) (default 1e-4)")
    run.add_argument("--repeat", type=int, default=10, help="timed runs for the latency (default 10)")
    run.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                     help="bind an input's symbolic dimensions")
    run.add_argument("--save", metavar="DIR", help="save outputs as DIR/output_<i>.npy")
    run.add_argument("--threads", type=int, help="threads for native backends (default: all cores)")

    dump = commands.add_parser("dump", help="print one compilation stage")
    dump.add_argument("model")
    dump.add_argument("--stage", choices=[*STAGES, "c"], default="graph",
                      help="c prints the cpu backend's generated source (implies --backend cpu)")
    dump.add_argument("--format", choices=["text", "dot"], default="text")
    dump.add_argument("--backend", default="interpreter")
    dump.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...")
    dump.add_argument("--print-after-all", action="store_true",
                      help="print the graph after every pass ('// after <pass>' headers) before the stage")
    dump.add_argument("--time-passes", action="store_true", help="print the time each pass took (to stderr)")

    bench = commands.add_parser("bench", help="median latency, optionally side by side with ONNX Runtime")
    bench.add_argument("model")
    bench.add_argument("--backend", default="cpu")
    bench.add_argument("--threads", type=int, default=1)
    bench.add_argument("--compare", choices=["onnxruntime"], help="also time this engine, in its own process")
    bench.add_argument("--rounds", type=int, default=15, help="interleaved timing blocks per engine (default 15)")
    bench.add_argument("--seconds", type=float, default=0.3, help="timing budget per block (default 0.3 s)")
    bench.add_argument("--cold", action="store_true",
                       help="time the first compile from an empty cache (kernel library included)")

    from ember.codegen.bundle import TARGETS

    bundle = commands.add_parser("bundle", help="compile ahead of time into C, a header and weights (AOT bundle)")
    bundle.add_argument("model")
    bundle.add_argument("--target", default="host", help=f"one of {', '.join(TARGETS)} (default host)")
    bundle.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for the bundle's files")
    bundle.add_argument("--prefix", default="model", help="symbol and file prefix (default model)")
    bundle.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...")

    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "bundle":
            return _bundle(args)
        if args.command == "bench":
            return _bench(args)
        return _dump(args)
    except EmberError as err:
        print(f"ember: error: {err}", file=sys.stderr)
        return 1


def _shapes(items: list[str]) -> dict[str, tuple[int, ...]] | None:
    shapes = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(",") if d)
        except ValueError:
            raise EmberError(f"--shape {item!r} is not NAME=D0,D1,...") from None
    return shapes or None


def _inputs(model: Any, items: list[str], reference: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    given: dict[str, np.ndarray] = {}
    for item in items:
        name, _, path = item.partition("=")
        if not path:
            raise EmberError(f"--input {item!r} is not NAME=FILE.npy")
        try:
            given[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise EmberError(f"cannot read input '{name}' from {path}: {err}") from None
    rng = np.random.default_rng(0)
    for spec in model.inputs:
        if spec.name in given:
            continue
        if f"in_{spec.name}" in reference:
            given[spec.name] = reference[f"in_{spec.name}"]
        elif spec.type.dtype.is_float:
            given[spec.name] = rng.standard_normal(spec.type.shape).astype(spec.type.dtype.numpy)
        else:
            given[spec.name] = np.zeros(spec.type.shape, spec.type.dtype.numpy)
    return given


def _run(args: argparse.Namespace) -> int:
    import ember

    start = time.perf_counter()
    model = ember.compile(args.model, backend=args.backend, input_shapes=_shapes(args.shape),
                          num_threads=args.threads)
    compile_seconds = time.perf_counter() - start
    reference: dict[str, np.ndarray] = {}
    if args.reference:
        try:
            reference = dict(np.load(args.reference, allow_pickle=False))
        except (OSError, ValueError) as err:
            raise EmberError(f"cannot read reference {args.reference}: {err}") from None
    inputs = _inputs(model, args.input, reference)
    outputs = model.run(inputs)
    times = []
    for _ in range(max(args.repeat, 1)):
        start = time.perf_counter()
        model.run(inputs)
        times.append(time.perf_counter() - start)

    print(f"model: {args.model} (backend {model.backend}, compiled in {compile_seconds:.2f} s)")
    for name, value in outputs.items():
        print(f"output {name}: {value.dtype}{list(value.shape)} mean={float(np.mean(value)):.6g} "
              f"min={float(np.min(value)):.6g} max={float(np.max(value)):.6g}")
    status = 0
    if reference:
        status = _compare(outputs, reference, args.tolerance)
    print(f"latency: median {statistics.median(times) * 1e3:.3f} ms over {len(times)} runs")
    if args.save:
        folder = Path(args.save)
        folder.mkdir(parents=True, exist_ok=True)
        for index, value in enumerate(outputs.values()):
            # Files are named by position: output names come from the model file.
            np.save(folder / f"output_{index}.npy", value)
    return status


def _compare(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray], tolerance: float) -> int:
    status = 0
    for index, (name, value) in enumerate(outputs.items()):
        expected = reference.get(f"out_{index}")
        if expected is None:
            continue
        if expected.shape != value.shape:
            print(f"check {name}: FAIL shape {list(value.shape)} vs reference {list(expected.shape)}")
            status = 1
            continue
        error = float(np.max(np.abs(value.astype(np.float64) - expected))) if value.size else 0.0
        scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
        ok = error / scale <= tolerance
        status |= 0 if ok else 1
        print(f"check {name}: {'ok' if ok else 'FAIL'} (max abs error {error:.3g}, relative {error / scale:.3g}, "
              f"tolerance {tolerance:g})")
    return status


def _dump(args: argparse.Namespace) -> int:
    from ember.driver import compile_model
    from ember.graph import graph_to_dot, print_graph
    from ember.lir.text import print_program
    from ember.memory import format_plan

    captured: dict[str, str] = {}
    if args.stage == "c":
        args.backend = "cpu"

    def observe(stage: str, artifact: Any) -> None:
        if stage == "lir" and args.stage == "c":
            from ember.codegen import generate_c

            captured["c"] = generate_c(artifact, 1).source
            return
        if stage != args.stage:
            return
        if stage in ("lir", "memory"):
            if args.format == "dot":
                raise EmberError(f"the {stage} stage has no dot form; use --format text")
            captured[stage] = print_program(artifact) if stage == "lir" else format_plan(artifact)
        else:
            captured[stage] = graph_to_dot(artifact) if args.format == "dot" else print_graph(artifact)

    import ember  # noqa: F401  (registers passes and lowerings)

    from ember.passes import PassTimer, PrintAfterAll, instrumented

    timer = PassTimer()
    hooks = [timer] if args.time_passes else []
    if args.print_after_all:
        hooks.append(PrintAfterAll(sys.stdout.write))
    with instrumented(*hooks):
        compile_model(args.model, backend=args.backend, input_shapes=_shapes(args.shape), observer=observe)
    sys.stdout.write(captured[args.stage])
    if args.time_passes:
        sys.stderr.write(timer.report())
    return 0


def _bench(args: argparse.Namespace) -> int:
    from ember.bench import compare

    engines = ("ember", args.compare) if args.compare else ("ember",)
    result = compare(str(args.model), args.threads, backend=args.backend, rounds=args.rounds,
                     seconds=args.seconds, engines=engines, fresh_cache=args.cold)
    print(f"model: {args.model} (backend {args.backend}, {args.threads} thread(s), "
          f"{args.rounds} interleaved blocks per engine)")
    print(f"ember: {result['ember'] * 1e3:.3f} ms (median of {result['runs']['ember']} runs)")
    if args.compare:
        print(f"{args.compare}: {result[args.compare] * 1e3:.3f} ms (median of {result['runs'][args.compare]} runs)")
        print(f"ratio ember/{args.compare}: {result['ratio']:.2f} "
              f"(per-block quartiles {result['ratio_q1']:.2f}-{result['ratio_q3']:.2f})")
    first = "from an empty cache" if args.cold else "first"
    print(f"compile: {result['compile_first']:.2f} s {first}, {result['compile_cached']:.2f} s cached")
    return 0



def _bundle(args: argparse.Namespace) -> int:
    import ember

    result = ember.bundle(args.model, target=args.target, output_dir=args.output, prefix=args.prefix,
                          input_shapes=_shapes(args.shape))
    print(result.summary())
    print(f"files: {', '.join(result.files)}")
    print(f"build: make -C {result.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
