"""`ember debug MODEL`: run every step of the compiled model on its backend and on a
reference, and name the first node whose output diverges beyond tolerance, with the error
and both tensors' statistics (tools/debugger.py). Exit code 4 when one diverges."""
from __future__ import annotations

import argparse
import json
from typing import Any

from ember.support.errors import EmberError
from ember.tools.common import (
    EXIT_ACCURACY,
    EXIT_COMPILE,
    EXIT_USAGE,
    REFERENCE_HELP,
    CommandError,
    add_compile_options,
    check_model_file,
    check_reference_names,
    default_backend,
    load_feeds,
    parse_shapes,
    read_reference,
)

EXAMPLES = """examples:
  ember debug model.onnx                            cpu against the interpreter, step by step
  ember debug model.onnx --reference ort            against ONNX Runtime's intermediate tensors
  ember debug model.onnx --inputs ref.npz --rtol 1e-2 --atol 1e-3
"""


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "debug", help="find the first node whose output diverges from a reference (network debugger)",
        description=__doc__.split("\n\n")[0], epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_compile_options(parser)
    parser.add_argument("--reference", choices=["interpreter", "ort"], default="interpreter",
                        help="interpreter: the same program with NumPy semantics, instruction by instruction "
                             "(default); ort: ONNX Runtime's tensors of the same names (needs onnxruntime)")
    parser.add_argument("--inputs", metavar="REF.npz", help="inputs from an .npz (" + REFERENCE_HELP + ")")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    parser.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (default 1e-4)")
    parser.add_argument("--json", action="store_true", help="print every step's comparison as JSON")
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    from ember.tools.debugger import compile_for_debug, debug_program

    check_model_file(args.model)
    backend = default_backend(args.backend)
    if "," in backend or backend == "auto":
        raise CommandError(f"--backend {backend}: debug one backend at a time", EXIT_USAGE)
    options: dict[str, Any] = {"num_threads": args.threads} if args.threads else {}
    if args.precision != "fp32":
        options["precision"] = args.precision
    try:
        session = compile_for_debug(args.model, backend, parse_shapes(args.shape), options)
    except EmberError as err:
        raise CommandError(str(err), EXIT_COMPILE) from None
    reference = read_reference(args.inputs)
    input_names = [b.external_name or b.name for b in session.program.inputs]
    output_names = [b.external_name or b.name for b in session.program.outputs]
    if reference:
        check_reference_names(reference, input_names, output_names, args.inputs)
    specs = [_Spec(name, b.type) for name, b in zip(input_names, session.program.inputs, strict=True)]
    feeds = load_feeds(specs, args.input, reference,
                       hint="pass --input NAME=FILE.npy or --inputs REF.npz for real data")
    inputs = session.inputs_in_order(feeds)
    ort_values = _ort_values(args.model, feeds) if args.reference == "ort" else None
    report = debug_program(session.program, session.executable, inputs, backend, reference=args.reference,
                           rtol=args.rtol, atol=args.atol, ort_values=ort_values)
    if args.json:
        print(json.dumps(_as_json(report), indent=1))
    else:
        print(f"model: {args.model}")
        print(report.format(), end="")
    return EXIT_ACCURACY if report.first_divergence is not None else 0


class _Spec:
    def __init__(self, name: str, type: Any) -> None:
        self.name = name
        self.type = type


def _ort_values(model: str, feeds: dict[str, Any]) -> dict[str, Any]:
    try:
        import onnxruntime
    except ImportError:
        raise CommandError("--reference ort needs onnxruntime (pip install onnxruntime)", EXIT_USAGE) from None
    from ember.frontends.onnx.expose import with_every_tensor_as_output

    model_bytes, node_outputs = with_every_tensor_as_output(model)
    session = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    values = dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted}), strict=True))
    return {node: [values.get(name) for name in outputs] for node, outputs in node_outputs.items()}


def _as_json(report: Any) -> dict[str, Any]:
    first = report.first_divergence
    steps = []
    for check in report.checks:
        steps.append({"node": check.step.node, "op": check.step.op, "kernel": check.step.kernel,
                      "instruction": check.step.index, "ok": check.ok,
                      "outputs": [None if c is None else {"buffer": name, "ok": c.ok, "max_abs_error": c.max_abs_error,
                                                          "mismatched": c.mismatched, "size": c.size}
                                  for name, c in zip(check.buffers, check.chained, strict=True)]})
    return {"backend": report.backend, "reference": report.reference, "rtol": report.rtol, "atol": report.atol,
            "first_divergence": None if first is None else {"node": first.step.node, "op": first.step.op,
                                                            "kernel": first.step.kernel},
            "steps": steps}
