"""`ember profile MODEL`: compile with the compile traced (stages, graph and LIR passes),
run with per-step timers, print per-op and per-node tables with GFLOP/s, and write a Chrome
trace / Perfetto JSON (-o) or the tables as JSON (--json).

    ember profile model.onnx --backend cpu --threads 2 --runs 20 -o trace.json

Each profiled run is interleaved with a plain run of the library without timers, so the
printed comparison (the steps' sum against the plain latency) says what the timers cost."""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ember.support.errors import EmberError
from ember.tools.common import (
    EXIT_COMPILE,
    CommandError,
    add_compile_options,
    check_model_file,
    default_backend,
    load_feeds,
    parse_shapes,
    positive_int,
)

EXAMPLES = """examples:
  ember profile model.onnx                          cpu backend, all cores, 10 profiled runs
  ember profile model.onnx --threads 1 -o trace.json   open trace.json in ui.perfetto.dev
  ember profile model.onnx --backend interpreter --json
"""


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "profile", help="time every step of a compiled model (per op, per node, GFLOP/s; Chrome trace)",
        description=__doc__.split("\n\n")[0], epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_compile_options(parser)
    parser.add_argument("--runs", type=positive_int, default=10, help="profiled runs, averaged (default 10)")
    parser.add_argument("--top", type=positive_int, default=15, help="nodes listed, slowest first (default 15)")
    parser.add_argument("-o", "--output", metavar="TRACE.json",
                        help="write a Chrome trace (chrome://tracing, ui.perfetto.dev): compile and runs")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON instead of tables")
    parser.set_defaults(handler=run_command)


def profile_model(args: argparse.Namespace, observer: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
    """Compiles traced, runs profiled; returns the compiled model, the profile, the compile
    trace and the plain latencies (the report reuses this, with its own observer of the
    compile's stages)."""
    from ember.driver import compile_model
    from ember.passes import instrumented
    from ember.runtime.profile import CompileTrace, RunProfile

    check_model_file(args.model)
    backend = default_backend(args.backend)
    partitioned = "," in backend or backend == "auto"
    options: dict[str, Any] = {}
    if args.threads:
        options["num_threads"] = args.threads
    if getattr(args, "precision", "fp32") != "fp32":
        options["precision"] = args.precision
    trace = CompileTrace()

    def observe(stage: str, artifact: Any) -> None:
        trace.observe(stage, artifact)
        if observer is not None:
            observer(stage, artifact)

    try:
        with instrumented(trace):
            if partitioned:  # segments compiled one by one: the trace shows the partition and every pass
                from ember.heterogeneous import backend_spec, compile_model_partitioned

                model = compile_model_partitioned(args.model, backend_spec(backend), observer=observe,
                                                  input_shapes=parse_shapes(args.shape), backend_options=options)
            else:
                model = compile_model(args.model, backend, parse_shapes(args.shape), observer=observe,
                                      backend_options=options)
    except EmberError as err:
        raise CommandError(str(err), EXIT_COMPILE) from None
    trace.finish()
    feeds = load_feeds(model.inputs, args.input, {}, hint="pass --input NAME=FILE.npy for real data")
    model.run(feeds)
    model.run(feeds, profile=True)  # builds the timed library (cpu) and warms it
    profiles, plain = [], []
    for _ in range(args.runs):
        start = time.perf_counter()
        model.run(feeds)
        plain.append(time.perf_counter() - start)
        profiles.append(model.run(feeds, profile=True)[1])
    return {"model": model, "backend": backend, "profile": RunProfile.merge(profiles), "trace": trace,
            "plain": plain}


def run_command(args: argparse.Namespace) -> int:
    from ember.runtime.profile import chrome_trace

    result = profile_model(args)
    profile, trace, plain = result["profile"], result["trace"], result["plain"]
    summary = {"model": args.model, "backend": result["backend"], "compile_seconds": trace.seconds,
               "plain_median_ms": statistics.median(plain) * 1e3, **profile.to_json(),
               "passes_ms": sum(e.seconds for e in trace.passes()) * 1e3}
    if args.output:
        try:
            Path(args.output).write_text(json.dumps(chrome_trace(profile, trace)))
        except OSError as err:
            raise EmberError(f"cannot write {args.output}: {err}") from None
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"model: {args.model} (backend {result['backend']}, compiled in {trace.seconds:.2f} s, "
          f"passes {summary['passes_ms']:.1f} ms)")
    print(profile.format(args.top), end="")
    median = summary["plain_median_ms"]
    print(f"plain runs (no timers), interleaved: median {median:.3f} ms; the profiled steps sum to "
          f"{profile.steps_total * 1e3 / median:.1%} of it")
    if args.output:
        print(f"trace: {args.output} (open in ui.perfetto.dev or chrome://tracing)")
    return 0
