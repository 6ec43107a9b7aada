"""`nnlm serve`: models behind a local HTTP server with a JSON API and a page to explore them."""
from __future__ import annotations

import argparse

from nnlm import cli_types as T
from nnlm.cli.common import THREADS_HELP, govern_threads, note


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve models over local HTTP: a JSON API and a page to explore them")
    p.add_argument("models", nargs="+", metavar="MODEL", help="saved models (neural runs, n-gram directories, ARPA)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; anything else exposes the "
                        "models to the network)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free port)")
    p.add_argument("--max-body", type=T.positive_int, default=1 << 20,
                   help="largest request body in bytes (default 1048576)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds a client may stall or a model may take before the request is dropped (default 30)")
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from nnlm.errors import NnlmError
    from nnlm.serve.api import served_models
    from nnlm.serve.server import LOOPBACK, ModelServer

    if not 0 <= args.port <= 65535:
        raise NnlmError(f"--port must be between 0 and 65535, got {args.port}")
    if not args.timeout > 0:
        raise NnlmError(f"--timeout must be > 0, got {args.timeout}")
    models = served_models(args.models, args.timeout)
    govern_threads(args)
    try:
        server = ModelServer((args.host, args.port), models, args.max_body, args.timeout)
    except OSError as exc:
        raise NnlmError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    if args.host not in LOOPBACK:
        note(f"listening on {args.host}: other machines can reach these models")
    host, port = server.server_address[:2]
    note(f"serving {', '.join(models)} at http://{host}:{port}/ (Ctrl-C to stop)")
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
