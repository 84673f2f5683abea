"""`ember serve MODEL_OR_ARTIFACT`: compile once (or read a saved artifact), deploy on Ray Serve
and serve until interrupted.

    ember serve model.onnx --replicas 2 --port 8000
    ember serve model.onnx --max-batch 16 --batch-wait-ms 5      # a model with a symbolic batch dim
    ember serve model.ember --address ray://head:10001           # an artifact, on an existing cluster

Ray is an optional extra: without it the command says how to install it and exits with 2."""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from ember.tools.common import (
    EXIT_USAGE,
    MODEL_HELP,
    CommandError,
    byte_size,
    check_model_file,
    default_backend,
    parse_shapes,
    positive_float,
    positive_int,
)

EXAMPLES = """examples:
  ember serve model.onnx --replicas 2                   two replicas, one thread each, port 8000
  ember serve model.onnx --max-batch 16 --batch-wait-ms 5   dynamic batching (symbolic batch dimension)
  curl -s localhost:8000/ -H 'content-type: application/json' -d '{"inputs": {"x": [[0.5, 1.0]]}}'
  curl -s localhost:8000/ready; curl -s localhost:8000/metrics
"""


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "serve", help="serve a model over HTTP on Ray Serve (replicas, dynamic batching; needs ember[serve])",
        description=__doc__.split("\n\n")[0], epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help=MODEL_HELP + "; or an artifact saved with CompiledModel.save")
    parser.add_argument("--replicas", type=positive_int, default=1, help="replicas of the model (default 1)")
    parser.add_argument("--max-batch", type=positive_int, default=1, metavar="B",
                        help="rows per batch for a model with a symbolic leading batch dimension (default 1: "
                             "no batching)")
    parser.add_argument("--batch-sizes", type=_sizes, metavar="N,N,...",
                        help="row counts to compile a batched model for (default 1,2,4,... up to --max-batch)")
    parser.add_argument("--batch-wait-ms", type=non_negative_float, default=5.0, metavar="T",
                        help="how long a replica waits to fill a batch (default 5 ms)")
    parser.add_argument("--address", metavar="RAY_ADDRESS",
                        help="a Ray cluster to join (default: start a local one on this machine)")
    parser.add_argument("--host", default="127.0.0.1", help="the HTTP address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=positive_int, default=8000, help="the HTTP port (default 8000)")
    parser.add_argument("--threads", type=positive_int, default=1, metavar="N",
                        help="threads per replica (default 1)")
    parser.add_argument("--backend", help="the backend to compile for (default cpu)")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="bind symbolic dimensions other than the batch (repeatable)")
    parser.add_argument("--max-body-bytes", type=byte_size, default=64 << 20, metavar="BYTES",
                        help="the largest request body accepted (e.g. 16M; default 64M): larger ones get 413")
    parser.add_argument("--cpus", type=positive_float, metavar="N",
                        help="Ray CPUs each replica reserves (default: --threads)")
    parser.add_argument("--max-ongoing", type=positive_int, metavar="N",
                        help="requests a replica holds at once (default max(32, 2 x --max-batch))")
    parser.add_argument("--failover", action="store_true",
                        help="a front deployment retries a request whose replica died while running it once on "
                             "another replica, or answers 503 saying so (one more hop per request)")
    parser.add_argument("--direct-ingress", action="store_true",
                        help="each replica answers HTTP on a port of its own (printed), skipping Serve's proxy: "
                             "far less CPU per request; the proxy URL keeps working")
    parser.add_argument("--json", action="store_true", help="print the deployment as one JSON line once ready")
    parser.set_defaults(handler=run_command)


def _sizes(text: str) -> list[int]:
    try:
        return [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def run_command(args: argparse.Namespace) -> int:
    from ember.serve import RayMissingError, deploy, require_ray

    try:
        require_ray(serve=True)
    except RayMissingError as err:
        raise CommandError(str(err), EXIT_USAGE) from None
    check_model_file(args.model)
    app = deploy(args.model, replicas=args.replicas, max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms,
                 address=args.address, host=args.host, port=args.port, num_threads=args.threads,
                 backend=default_backend(args.backend), input_shapes=parse_shapes(args.shape),
                 max_body_bytes=args.max_body_bytes, replica_cpus=args.cpus,
                 max_ongoing_requests=args.max_ongoing, batch_sizes=args.batch_sizes,
                 failover=args.failover, direct_ingress=args.direct_ingress)
    served = app.served
    if args.json:
        print(json.dumps({"url": app.url, "replicas": args.replicas, "batching": served.batching,
                          "batch_sizes": served.batch_sizes,
                          "inputs": {s.name: s.describe() for s in served.inputs},
                          **({"replica_urls": app.replica_urls} if args.direct_ingress else {})}), flush=True)
    else:
        print(f"serving {args.model} at {app.url}/ ({args.replicas} replica(s), {args.threads} thread(s) each; "
              f"compiled once in {served.compile_seconds:.2f} s, {served.artifact_bytes} artifact bytes)")
        print(f"batching {served.batching}")
        print("inputs: " + ", ".join(f"{s.name}: {s.describe()}" for s in served.inputs))
        if args.direct_ingress:
            print("replicas (direct ingress): " + ", ".join(app.replica_urls))
        print(f"POST {app.url}/ (JSON or .npz); GET {app.url}/healthz, /ready, /metrics; Ctrl-C stops", flush=True)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        print("stopping", file=sys.stderr)
        app.shutdown()
        from ray import serve

        serve.shutdown()
    return 0
