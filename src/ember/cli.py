"""The `ember` command (also `python -m ember`).

    ember run MODEL [--backend B] [--input NAME=FILE.npy ...] [--reference REF.npz] [--repeat N]
    ember dump MODEL --stage graph|optimized|lowered|lir|memory|partition|c|mappings [--format text|dot]
                     [--print-after-all] [--time-passes] [--target T]
    ember bench MODEL [--backend B] [--threads N] [--shape ...] [--input ...] [--compare onnxruntime,openvino]
                      [--load N] [--rounds R] [--seconds S] [--cold] [--json]
    ember bundle MODEL --target T -o DIR [--prefix NAME] [--quantize PROFILE]
    ember quantize MODEL --calibration DATA [--eval DATA] [--schema S] [--calibration-method M]
                   [--keep-float OP_OR_NAME ...] -o PROFILE
    ember opt FILE --passes A,B,... [--ir graph|lir] [--backend B] [--print-after-all] [--time-passes]
                   [--random-weights] [-o OUT]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.driver import STAGES
from ember.support.errors import EmberError, ModelImportError, UnsupportedError
from ember.tools.common import (
    EXIT_ACCURACY,
    EXIT_COMPILE,
    EXIT_ERROR,
    MODEL_HELP,
    PRECISION_HELP,
    REFERENCE_HELP,
    CommandError,
    add_compile_options,
    byte_size,
    check_model_file,
    check_outputs,
    check_reference_names,
    compile_for_command,
    default_backend,
    load_feeds,
    non_negative_int,
    parse_shapes,
    positive_float,
    positive_int,
    read_reference,
)

if TYPE_CHECKING:
    from ember.passes import PassManager, PassRegistry

_EXAMPLES = """examples:
  ember run model.onnx                          compile on cpu, run on random inputs, print latency
  ember run model.onnx --reference ref.npz      inputs and expected outputs from an .npz
  ember profile model.onnx -o trace.json        time every step; open the trace in ui.perfetto.dev
  ember debug model.onnx                        find the first node whose output diverges
  ember dump model.onnx --stage lir             the compiled program, every kernel choice
  ember bundle model.onnx --target cortex-m4 -o out   C and weights for a microcontroller

exit codes: 0 ok, 1 error, 2 usage error, 3 the model could not be compiled, 4 accuracy check failed
"""
_RUN_EXAMPLES = """examples:
  ember run model.onnx --threads 2 --repeat 100 --json
  ember run model.onnx --input input=x.npy --save outs/
  ember run model.onnx --reference ref.npz --rtol 1e-3 --atol 1e-5   (exit code 4 when it fails)
"""


_DUMP_EXAMPLES = """examples:
  ember dump model.onnx                              the imported graph
  ember dump model.onnx --stage lir --threads 1      the cpu program: kernels chosen, fused groups
  ember dump model.onnx --stage c > model.c          the generated C
  ember dump model.onnx --stage optimized --format dot | dot -Tsvg > graph.svg
  ember dump model.onnx --stage partition --backend auto
"""
_BUNDLE_EXAMPLES = """examples:
  ember bundle model.onnx --target cortex-m4 -o out --flash 1M --ram 256K
  ember bundle model.onnx --target aarch64-linux -o out --threads 4
  ember bundle model.onnx --target cortex-m4 -o out --quantize profile.json   (int8)
"""
_BENCH_EXAMPLES = """examples:
  ember bench model.onnx                                 all cores, like `ember run`
  ember bench model.onnx --threads 1 --compare onnxruntime,openvino
  ember bench model.onnx --shape input=8,3,224,224 --json
  ember bench model.onnx --input input=x.npy --rounds 30 --seconds 0.5

The engines take turns in short blocks (each in its own process), so a neighbour's load hits
them alike; the ratio line gives the ratio of the medians printed and, for its spread, the
ratios of adjacent blocks.
"""


def main(argv: list[str] | None = None) -> int:
    import ember
    from ember.tools import add_commands

    parser = argparse.ArgumentParser(prog="ember", description="Ember neural-network compiler",
                                     epilog=_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ember {ember.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run", help="compile a model, run it, print outputs, latency and an optional reference check",
        epilog=_RUN_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_compile_options(run)
    run.add_argument("--reference", metavar="REF.npz", help=REFERENCE_HELP)
    run.add_argument("--rtol", type=float, default=1e-4,
                     help="relative tolerance of the reference check (default 1e-4), as numpy.testing.assert_allclose")
    run.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    run.add_argument("--repeat", type=positive_int, default=10, help="timed runs for the latency (default 10)")
    run.add_argument("--save", metavar="DIR", help="save outputs as DIR/output_<i>.npy")
    run.add_argument("--json", action="store_true", help="print outputs' statistics, checks and timings as JSON")

    dump = commands.add_parser("dump", help="print one compilation stage", epilog=_DUMP_EXAMPLES,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    dump.add_argument("model", help=MODEL_HELP)
    dump.add_argument("--stage", choices=[*STAGES, "partition", "c", "mappings"], default="graph",
                      help="c prints the cpu backend's generated source (implies --backend cpu); partition "
                           "shows the segments of --backend A,B,... (priority order) or auto; mappings shows "
                           "how the ISA mapper maps each compute node of the optimized graph onto --target")
    dump.add_argument("--target", default="x86-avx512",
                      help="with --stage mappings: a described target (src/ember/isa/targets) or a .toml file")
    dump.add_argument("--format", choices=["text", "dot"], default="text")
    dump.add_argument("--backend", default="cpu",
                      help="whose pipeline to show (default cpu: its lowering, fusion and kernel choices)")
    dump.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...")
    dump.add_argument("--threads", type=positive_int, metavar="N",
                      help="threads the kernels are planned for (native backends; default: all cores)")
    dump.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help=PRECISION_HELP)
    dump.add_argument("--tune", action="store_true",
                      help="the cpu backend's measured kernel choices (timed now unless cached; kernels "
                           "chosen by measurement show tuned=true)")
    dump.add_argument("--print-after-all", action="store_true",
                      help="print the IR after every graph and LIR pass ('// after <pass>' headers) before the stage")
    dump.add_argument("--time-passes", action="store_true",
                      help="print the time each graph and LIR pass took (to stderr)")

    opt = commands.add_parser("opt", help="run named passes over a text IR file (graph or LIR), print the result")
    opt.add_argument("file", help="graph or LIR text, as `ember dump` prints it ('-': standard input); "
                                  "lines starting with // are comments")
    opt.add_argument("--passes", default="", metavar="A,B,...", help="pass names, run in this order")
    opt.add_argument("--ir", choices=["graph", "lir"],
                     help="the input's IR (default: from its first word, graph or program)")
    opt.add_argument("--backend", help="the target passes see in their context (e.g. cpu for select-kernels)")
    opt.add_argument("--print-after-all", action="store_true",
                     help="print the IR after every pass ('// after <pass>' headers) before the result")
    opt.add_argument("--time-passes", action="store_true", help="print the time each pass took (to stderr)")
    opt.add_argument("--random-weights", action="store_true",
                     help="fill constants and weights printed without data with seeded random data")
    opt.add_argument("-o", "--output", metavar="OUT", help="write the result here instead of standard output")

    bench = commands.add_parser(
        "bench", help="latency (min/median/p90/p99), throughput, first-run and compile times, optionally side by "
                      "side with ONNX Runtime or OpenVINO", epilog=_BENCH_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_compile_options(bench)
    bench.add_argument("--compare", type=_peer_engines, metavar="ENGINE[,ENGINE]",
                       help="also time these engines (onnxruntime, openvino), each in its own process, on the "
                            "same inputs and thread count")
    bench.add_argument("--load", type=non_negative_int, default=0, metavar="N",
                       help="run N competing busy processes during the measurement (default 0)")
    bench.add_argument("--rounds", type=positive_int, default=15,
                       help="interleaved timing blocks per engine (default 15)")
    bench.add_argument("--seconds", type=positive_float, default=0.3, help="timing budget per block (default 0.3 s)")
    bench.add_argument("--cold", action="store_true",
                       help="time the first compile from an empty cache (kernel library included)")
    bench.add_argument("--json", action="store_true", help="print the whole measurement as JSON")

    from ember.codegen.bundle import TARGETS

    bundle = commands.add_parser("bundle", help="compile ahead of time into C, a header and weights (AOT bundle)",
                                 epilog=_BUNDLE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    bundle.add_argument("model", help=MODEL_HELP)
    bundle.add_argument("--target", default="host", help=f"one of {', '.join(TARGETS)} (default host)")
    bundle.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for the bundle's files")
    bundle.add_argument("--prefix", default="model", help="symbol and file prefix (default model)")
    bundle.add_argument("--quantize", metavar="PROFILE", help="a profile from `ember quantize`: an int8 bundle "
                        "(on targets other than x86, portable int8 kernels)")
    bundle.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...")
    bundle.add_argument("--threads", type=positive_int, default=1, metavar="N",
                        help="hosted targets: kernels on N threads, built with -fopenmp (default 1)")
    bundle.add_argument("--flash", type=byte_size, metavar="BYTES",
                        help="the part's flash (e.g. 1M, 512K): refuse a bundle whose weights do not fit "
                             "(default for microcontrollers: the example board's, 4M)")
    bundle.add_argument("--ram", type=byte_size, metavar="BYTES",
                        help="the part's RAM (e.g. 256K): refuse a bundle whose io and activations do not fit")

    from ember.quant import METHODS, SCHEMAS

    quantize = commands.add_parser("quantize", help="profile a model on calibration data, write the profile and "
                                                    "report the int8 model's accuracy against float")
    quantize.add_argument("model", help=MODEL_HELP)
    quantize.add_argument("--calibration", required=True, metavar="DATA",
                          help="a folder of .npz (inputs by name) or .npy files, or an .npz of batches")
    quantize.add_argument("--eval", metavar="DATA", help="held-out inputs for the report (default: the last "
                                                         "--held-out fraction of the calibration samples)")
    quantize.add_argument("--held-out", type=float, default=0.2, metavar="FRACTION")
    quantize.add_argument("--schema", choices=list(SCHEMAS), default="asymmetric")
    quantize.add_argument("--calibration-method", choices=list(METHODS), default="minmax")
    quantize.add_argument("--percentile", type=float, default=99.99)
    quantize.add_argument("--keep-float", nargs="+", action="extend", default=[], metavar="OP_OR_NAME",
                          help="op types or node names to leave in float")
    quantize.add_argument("--backend", default="cpu", help="the backend the report compiles for (default cpu)")
    quantize.add_argument("--threads", type=positive_int, metavar="N",
                          help="threads of the report's compiled models (native backends; default: all cores)")
    quantize.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...")
    quantize.add_argument("-o", "--output", required=True, metavar="PROFILE", help="the profile file (JSON)")

    add_commands(commands)

    args = parser.parse_args(argv)
    from ember.tools.progress_display import terminal_progress

    try:
        with terminal_progress():
            return _dispatch(args)
    except CommandError as err:
        print(f"ember: error: {err}", file=sys.stderr)
        return err.code
    except (ModelImportError, UnsupportedError) as err:
        print(f"ember: error: {err}", file=sys.stderr)
        return EXIT_COMPILE
    except EmberError as err:
        print(f"ember: error: {err}", file=sys.stderr)
        return EXIT_ERROR


def _dispatch(args: argparse.Namespace) -> int:
    if hasattr(args, "handler"):
        return int(args.handler(args))
    if args.command == "quantize":
        return _quantize(args)
    if args.command == "run":
        return _run(args)
    if args.command == "bundle":
        return _bundle(args)
    if args.command == "bench":
        return _bench(args)
    if args.command == "opt":
        return _opt(args)
    return _dump(args)


def _run(args: argparse.Namespace) -> int:
    compiled = compile_for_command(args)
    model = compiled.model
    reference = read_reference(args.reference)
    if reference:
        check_reference_names(reference, model.input_names, model.output_names, args.reference)
    inputs = load_feeds(model.inputs, args.input, reference)
    start = time.perf_counter()
    outputs = model.run(inputs)
    first_run = time.perf_counter() - start
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        model.run(inputs)
        times.append(time.perf_counter() - start)
    checks = check_outputs(outputs, reference, args.rtol, args.atol) if reference else []
    from ember.bench import latency_summary

    latency = latency_summary(times)
    status = EXIT_ACCURACY if any(not check.ok for check in checks) else 0
    if args.save:
        folder = Path(args.save)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for index, value in enumerate(outputs.values()):
                # Files are named by position: output names come from the model file.
                np.save(folder / f"output_{index}.npy", value)
        except OSError as err:
            raise EmberError(f"cannot save outputs in {folder}: {err}") from None
    if args.json:
        print(json.dumps({
            "model": args.model, "backend": model.backend, "compile_seconds": compiled.seconds,
            "first_run_ms": first_run * 1e3, "latency_ms": latency,
            "outputs": {name: _statistics(value) for name, value in outputs.items()},
            "checks": [{"output": c.name, "ok": c.ok, "detail": c.detail, "max_abs_error": c.max_abs_error}
                       for c in checks],
        }, indent=1))
        return status
    print(f"model: {args.model} (backend {model.backend}, compiled in {compiled.seconds:.2f} s)")
    for name, value in outputs.items():
        stats = _statistics(value)
        print(f"output {name}: {stats['dtype']}{stats['shape']} mean={stats['mean']:.6g} "
              f"min={stats['min']:.6g} max={stats['max']:.6g}")
    for check in checks:
        print(f"check {check.name}: {'ok' if check.ok else 'FAIL'} ({check.detail})")
    print(f"latency: median {latency['median']:.3f} ms, min {latency['min']:.3f}, p90 {latency['p90']:.3f}, "
          f"p99 {latency['p99']:.3f} over {len(times)} runs; {1e3 / latency['median']:.1f} runs/s; "
          f"first run {first_run * 1e3:.3f} ms")
    return status


def _statistics(value: np.ndarray) -> dict[str, Any]:
    numeric = value.size and value.dtype.kind in "biuf"
    return {"dtype": str(value.dtype), "shape": list(value.shape),
            **{key: float(getattr(np, key)(value)) if numeric else float("nan") for key in ("mean", "min", "max")}}


def _dump(args: argparse.Namespace) -> int:
    from ember.backends import get_backend
    from ember.driver import load_model, prepare_program
    from ember.graph import graph_to_dot, print_graph
    from ember.lir.text import print_program
    from ember.memory import format_plan

    captured: dict[str, str] = {}

    def observe(stage: str, artifact: Any) -> None:
        if stage != args.stage:
            return
        if stage in ("lir", "memory"):
            if args.format == "dot":
                raise EmberError(f"the {stage} stage has no dot form; use --format text")
            captured[stage] = print_program(artifact) if stage == "lir" else format_plan(artifact)
        else:
            captured[stage] = graph_to_dot(artifact) if args.format == "dot" else print_graph(artifact)

    import ember  # noqa: F401  (registers passes and lowerings)
    from ember.passes import PassInstrumentation, PassTimer, PrintAfterAll, instrumented

    if args.stage == "partition":
        return _dump_partition(args)
    if args.stage == "mappings":
        return _dump_mappings(args)
    options: dict[str, Any] = {"precision": args.precision} if args.precision != "fp32" else {}
    if args.threads:
        options["num_threads"] = args.threads
    if args.tune:
        if args.backend != "cpu" or args.precision != "fp32":
            raise EmberError("--tune measures the cpu backend's float32 kernels: use --backend cpu")
        from ember.tuning import tune_kernels

        options["kernel_pins"] = tune_kernels(args.model, parse_shapes(args.shape), args.threads).pins
    backend = get_backend(args.backend, **options)
    if args.stage == "c" and not hasattr(backend, "generate"):
        raise EmberError(f"backend '{args.backend}' generates no C; use --backend cpu")
    # Graph and LIR pipelines alike report to these.
    timer = PassTimer()
    hooks: list[PassInstrumentation] = [timer] if args.time_passes else []
    if args.print_after_all:
        hooks.append(PrintAfterAll(sys.stdout.write))
    with instrumented(*hooks):
        # Everything up to the memory plan: dumping needs no build of native code.
        program, _, _ = prepare_program(load_model(args.model, parse_shapes(args.shape)), backend, observe)
    if args.stage == "c":
        captured["c"] = backend.generate(program).source  # type: ignore[attr-defined]
    sys.stdout.write(captured[args.stage])
    if args.time_passes:
        sys.stderr.write(timer.report())
    return 0


def _dump_mappings(args: argparse.Namespace) -> int:
    """The ISA mapper's mappings and schedules for each compute node of the optimized graph."""
    from ember.backends import get_backend
    from ember.driver import load_model, optimize_graph
    from ember.isa.describe import load_target
    from ember.isa.report import format_mappings

    if args.format == "dot":
        raise EmberError("the mappings stage has no dot form; use --format text")
    target = load_target(args.target)
    graph = load_model(args.model, parse_shapes(args.shape))
    optimize_graph(graph, get_backend(args.backend))
    sys.stdout.write(format_mappings(graph, target))
    return 0


def _dump_partition(args: argparse.Namespace) -> int:
    """The segments --backend (a list in priority order, or auto) would compile, and why."""
    from ember.driver import load_model
    from ember.heterogeneous import backend_spec, plan_partition, resolve_backends

    spec = backend_spec(args.backend)
    backends, strategy, skipped = resolve_backends([spec] if isinstance(spec, str) and spec != "auto" else spec)
    partition = plan_partition(load_model(args.model, parse_shapes(args.shape)), backends, strategy)
    sys.stdout.write(partition.to_dot() if args.format == "dot" else partition.to_text())
    for reason in skipped:
        sys.stderr.write(f"left out: {reason}\n")
    return 0


_COMMENT_LINE = re.compile(r"^[ \t]*//[^\n]*$", re.MULTILINE)
_FIRST_WORD = re.compile(r"[A-Za-z_]\w*")
# A constant (graph) or weight (LIR) declared without data: `const @w: f32[8,3,3,3]`.
_DATALESS = re.compile(r'^[ \t]*(?:const|weight)[ \t]+@("(?:[^"\\\n]|\\.)*"|[A-Za-z0-9_.]+)[ \t]*:[ \t]*'
                       r"(\w+)\[([\d, ]*)\]([^\n]*)$", re.MULTILINE)


def _opt(args: argparse.Namespace) -> int:
    from ember.passes import PassInstrumentation, PassTimer, PrintAfterAll, instrumented

    source = "standard input" if args.file == "-" else args.file
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise EmberError(f"cannot read {source}: {err}") from None
    registry = ir_registry(text, ir=args.ir, source=source)
    manager = opt_manager(registry, [name.strip() for name in args.passes.split(",") if name.strip()],
                          backend=args.backend, source=source)
    _, ir = load_ir(text, ir=registry.kind.name, random_weights=args.random_weights, source=source)
    timer = PassTimer()
    hooks: list[PassInstrumentation] = [timer] if args.time_passes else []
    if args.print_after_all:
        hooks.append(PrintAfterAll(sys.stdout.write))
    with instrumented(*hooks):
        manager.run(ir)
    result = registry.kind.print(ir)
    if args.output:
        try:
            Path(args.output).write_text(result)
        except OSError as err:
            raise EmberError(f"cannot write {args.output}: {err}") from None
    else:
        sys.stdout.write(result)
    if args.time_passes:
        sys.stderr.write(timer.report())
    return 0


def _registries() -> dict[str, PassRegistry]:
    """The pass registries `ember opt` knows, by IR kind name, every pass registered."""
    import ember  # noqa: F401  (registers the graph passes and lowerings)
    import ember.codegen  # noqa: F401  (registers the cpu backend's LIR passes)
    from ember.lir.passes import LIR_PASSES
    from ember.passes import PASSES

    return {registry.kind.name: registry for registry in (PASSES, LIR_PASSES)}


def ir_registry(text: str, *, ir: str | None = None, source: str = "<input>") -> PassRegistry:
    """The PassRegistry of the IR named `ir` ("graph", "lir"), or of the IR whose text starts
    with the first word of `text` (comments skipped)."""
    registries = _registries()
    return registries[ir or _detect_ir(_COMMENT_LINE.sub("", text), registries, source)]


def load_ir(text: str, *, ir: str | None = None, random_weights: bool = False,
            source: str = "<input>") -> tuple[PassRegistry, Any]:
    """Parses graph or LIR text as `ember opt` reads it: lines starting with // are comments;
    the IR is `ir` ("graph", "lir") or told by the first word (graph, program); constants
    and weights without data get seeded random data with random_weights, else are an error
    that says so. Returns (the IR's PassRegistry, the parsed IR)."""
    from ember.support.errors import ParseError

    registry = ir_registry(text, ir=ir, source=source)
    text = _COMMENT_LINE.sub("", text)  # blank, so parse errors keep their line numbers
    parse = registry.kind.parse
    assert parse is not None
    try:
        return registry, parse(text, _random_weights(text) if random_weights else {})
    except ParseError as err:
        hint = ""
        if "no inline data" in str(err):
            hint = (" (`ember dump` prints large constants and weights by name only; give the data inline, "
                    "or pass --random-weights to fill them with seeded random data)")
        raise EmberError(f"{source}: {err}{hint}") from None


def opt_manager(registry: PassRegistry, names: list[str], *, backend: str | None = None,
                source: str = "<input>") -> PassManager:
    """A verifying PassManager for `names` over `registry`'s IR, with the named backend (if
    any) in its pass context. A pass of the other IR is named as such."""
    from ember.passes import PassContext, PassManager

    for name in names:
        if name in registry:
            continue
        for other in _registries().values():
            if name in other:
                raise EmberError(f"'{name}' is a pass over the {other.kind.name} IR, but {source} holds "
                                 f"{registry.kind.name} IR (known {registry.label}es: {', '.join(sorted(registry))})")
    context = None
    if backend:
        from ember.backends import get_backend

        context = PassContext(backend=get_backend(backend))
    return PassManager(names, registry=registry, context=context, verify=True)


def _detect_ir(text: str, registries: dict[str, PassRegistry], source: str) -> str:
    """The IR whose text starts with the first word of `text` (`#` comments skipped)."""
    body = re.sub(r"#[^\n]*", "", text)
    match = _FIRST_WORD.search(body)
    word = match.group(0) if match else ""
    for name, registry in registries.items():
        if registry.kind.keyword == word:
            return name
    keywords = " or ".join(f"'{r.kind.keyword}' ({name})" for name, r in registries.items())
    raise EmberError(f"cannot tell the IR of {source}: it starts with '{word}', not {keywords}; pass --ir")


def _random_weights(text: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded data for every constant or weight the text declares without data: standard
    normal for floating-point types, zeros for the others."""
    from ember.types import DType

    rng = np.random.default_rng(seed)
    weights: dict[str, np.ndarray] = {}
    for raw, dtype_name, dims, rest in _DATALESS.findall(text):
        if "=" in rest:
            continue
        try:
            dtype = DType.from_name(dtype_name)
        except ValueError:
            continue  # the parser reports it
        name = json.loads(raw) if raw.startswith('"') else raw
        shape = tuple(int(d) for d in dims.replace(" ", "").split(",") if d)
        if dtype.is_float:
            weights[name] = rng.standard_normal(shape).astype(dtype.numpy)
        else:
            weights[name] = np.zeros(shape, dtype.numpy)
    return weights


def _peer_engines(text: str) -> tuple[str, ...]:
    engines = tuple(e.strip() for e in text.split(",") if e.strip())
    unknown = [e for e in engines if e not in ("onnxruntime", "openvino")]
    if unknown or not engines:
        raise argparse.ArgumentTypeError(f"unknown engine(s) {', '.join(unknown) or '(none)'}: "
                                         "choose from onnxruntime, openvino")
    return engines


def _bench(args: argparse.Namespace) -> int:
    from ember.bench import compare
    from ember.support.host import default_threads

    check_model_file(args.model)
    peers = tuple(args.compare or ())
    backend = default_backend(args.backend)
    threads = args.threads or default_threads()
    shapes = parse_shapes(args.shape)
    feeds = bench_feeds(args.model, shapes, args.input)
    try:
        result = compare(str(args.model), threads, backend=backend, rounds=args.rounds, seconds=args.seconds,
                         engines=("ember", *peers), fresh_cache=args.cold, precision=args.precision,
                         load=args.load, input_shapes=shapes, feeds=feeds)
    except EmberError as err:
        raise CommandError(str(err), EXIT_COMPILE if str(err).startswith("ember failed") else EXIT_ERROR) from None
    if args.json:
        print(json.dumps({"model": args.model, "backend": backend, "precision": args.precision, "threads": threads,
                          "rounds": args.rounds, **result}, indent=1))
        return 0
    print(f"model: {args.model} (backend {backend}, {args.precision}, {threads} thread(s), "
          f"{args.rounds} interleaved blocks per engine, {args.load} competing busy process(es))")
    print(format_latency_table(result, ("ember", *peers)))
    if peers:
        print(f"ember/{peers[0]}: {result['median_ratio']:.2f} (ratio of the medians above); per-block ratios: "
              f"median {result['ratio']:.2f}, quartiles {result['ratio_q1']:.2f}-{result['ratio_q3']:.2f}")
    if len(peers) > 1:
        print(f"ember/best of {', '.join(peers)} per block (fastest overall {result['best_peer']}): median "
              f"{result['best_ratio']:.2f}, quartiles {result['best_ratio_q1']:.2f}-{result['best_ratio_q3']:.2f}")
    first = "from an empty cache" if args.cold else "first"
    print(f"compile: {result['compile_first']:.2f} s {first}, {result['compile_cached']:.2f} s cached")
    if "openmp_wait" in result:
        print(f"ember's threads wait: {result['openmp_wait']}")
    return 0


def bench_feeds(model: str, shapes: dict[str, tuple[int, ...]] | None, items: list[str]) -> dict[str, np.ndarray]:
    """The inputs every engine of `ember bench` runs: --input files, else the model's .ref.npz
    (in_<name>), else seeded random data (said)."""
    from ember.driver import load_model
    from ember.specialize import dynamic_inputs

    symbolic = dynamic_inputs(model, shapes)
    specs: list[Any] = symbolic[1] if symbolic is not None else list(load_model(model, shapes).inputs)
    reference_path = Path(model).with_suffix(".ref.npz")
    reference = {k: v for k, v in read_reference(str(reference_path)).items() if k.startswith("in_")} \
        if reference_path.is_file() else {}
    return load_feeds(specs, items, reference, hint="pass --input NAME=FILE.npy for real data")


def format_latency_table(result: dict[str, Any], engines: tuple[str, ...]) -> str:
    """One row per engine: min, median, p90, p99 (ms), throughput and the first run's time."""
    width = max(len(engine) for engine in engines)
    rows = [f"{'':{width}}  {'min':>9} {'median':>9} {'p90':>9} {'p99':>9}  {'runs/s':>9}  {'first run':>9}  runs"]
    for engine in engines:
        stats = result["latency"][engine]
        # Four significant digits: a 20 us model's ratio must be readable off the table.
        rows.append(f"{engine:{width}}  {stats['min']:9.4g} {stats['median']:9.4g} {stats['p90']:9.4g} "
                    f"{stats['p99']:9.4g}  {stats['throughput']:9.1f}  {result['first_run'][engine] * 1e3:9.4g}"
                    f"  {stats['runs']}")
    return "\n".join(rows) + "\n(latencies in ms)"


def _bundle(args: argparse.Namespace) -> int:
    import ember

    result = ember.bundle(args.model, target=args.target, output_dir=args.output, prefix=args.prefix,
                          input_shapes=parse_shapes(args.shape), quantize=args.quantize, num_threads=args.threads,
                          flash_bytes=args.flash, ram_bytes=args.ram)
    print(result.summary())
    print(f"files: {', '.join(result.files)}")
    print(f"build: make -C {result.directory}")
    return 0


def _quantize(args: argparse.Namespace) -> int:
    from ember.driver import compile_model, load_model
    from ember.quant import accuracy_report, check_calibration, load_calibration, profile_graph, split_held_out

    shapes = parse_shapes(args.shape)
    graph = load_model(args.model, shapes)
    inputs = {p.name: p.type for p in graph.inputs}
    samples = load_calibration(args.calibration, inputs)
    calibration, held_out = split_held_out(samples, 0.0 if args.eval else args.held_out)
    if args.eval:
        held_out = load_calibration(args.eval, inputs)
    check_calibration(graph, held_out or calibration)  # bad evaluation data fails before profiling too
    profile = profile_graph(graph, calibration)
    options = {"schema": args.schema, "method": args.calibration_method, "percentile": args.percentile,
               "keep_float": args.keep_float}
    profile.options = dict(options)  # compile(quantize=PROFILE) and bundles quantize as reported here
    profile.save(args.output)
    threads = {"num_threads": args.threads} if args.threads else None
    floating = compile_model(args.model, args.backend, shapes, backend_options=threads)
    quantized = compile_model(args.model, args.backend, shapes, quantize=profile, quantize_options=options,
                              backend_options=threads)
    integer = {op: n for op, n in sorted(quantized.stats["ops"]["optimized"].items())
               if op in ("QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger")}
    print(f"profile of {len(calibration)} calibration sample(s) written to {args.output} (with these options)")
    print(f"schema {args.schema}, calibration {args.calibration_method}, backend {args.backend}: integer ops {integer}")
    groups: dict[str, list[str]] = {}
    for node, decision in quantized.stats["quantization"].items():
        groups.setdefault(decision, []).append(node)
    for decision, nodes in sorted(groups.items()):
        print(f"  {len(nodes)} node(s) {decision}: {', '.join(nodes[:4])}{', ...' if len(nodes) > 4 else ''}")
    if not held_out:
        print("no held-out inputs (one sample, no --eval): the report uses the calibration sample")
    print(accuracy_report(floating, quantized, held_out or calibration,
                          inputs="held-out" if held_out else "calibration").format())
    return 0


if __name__ == "__main__":
    sys.exit(main())
