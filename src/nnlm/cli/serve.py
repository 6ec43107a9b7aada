"""`nnlm serve`: models behind a local HTTP server with a JSON API and a page to explore them."""
from __future__ import annotations

import argparse

from nnlm.cli import arg_types as T
from nnlm.cli.common import THREADS_HELP, govern_threads, note

INSTALL_HINT = "nnlm serve needs uvicorn and starlette: pip install 'nnlm[serve]'"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve models over local HTTP: a JSON API and a page to explore them")
    p.add_argument("models", nargs="+", metavar="MODEL", help="saved models (neural runs, n-gram directories, ARPA)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; anything else exposes the "
                        "models to the network)")
    p.add_argument("--port", type=T.int_range(0, 65535), default=8000, help="port (default 8000; 0: any free port)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also answer requests whose Host is NAME (with this port; or NAME:PORT as given). By "
                        "default only localhost, 127.0.0.1 and [::1] are answered (and the --host address), "
                        "which keeps DNS-rebinding pages out. Repeatable")
    p.add_argument("--max-body", type=T.positive_int, default=1 << 20,
                   help="largest request body in bytes (default 1048576)")
    p.add_argument("--timeout", type=T.seconds, default=30.0,
                   help="seconds a model may take to answer before the request gets 503 (default 30)")
    p.add_argument("--header-timeout", type=T.seconds, default=10.0,
                   help="seconds a client has to send a request's line and headers, however slowly the bytes "
                        "come (default 10)")
    p.add_argument("--body-timeout", type=T.seconds, default=20.0,
                   help="seconds a client has to send a request's whole body once its headers are in "
                        "(default 20)")
    p.add_argument("--workers", type=T.int_range(1, 64), default=1,
                   help="server processes answering on the port (default 1). One process answers with one core "
                        "at a time; more use more cores where they are free (docs/serving.md). The models are "
                        "loaded once and shared")
    p.add_argument("--threads", type=T.threads, help=THREADS_HELP + " (with --workers: each worker's)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from nnlm.errors import NnlmError

    try:
        import httptools  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise NnlmError(INSTALL_HINT) from None
    from nnlm.serve.api import load_models, serve_loaded
    from nnlm.serve.hosts import LOOPBACK_ADDRESSES, HostRules
    from nnlm.serve.limits import Limits
    from nnlm.serve.server import ModelServer, bind

    limits = Limits(max_body=args.max_body, header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                    model_timeout=args.timeout)
    rules = HostRules(args.host, args.port, args.allow_host)  # a bad --allow-host is refused before anything loads
    sock = bind(args.host, args.port, limits.backlog)  # a taken port is said before the models load
    try:
        if args.workers > 1:
            single_threaded_until_fork()
        loaded = load_models(args.models)
    except BaseException:
        sock.close()
        raise
    url = ModelServer.url_of(args.host, sock.getsockname()[1])
    if args.host.lower() not in LOOPBACK_ADDRESSES:
        note(f"warning: listening on {args.host}: other machines can reach these models, without authentication; "
             f"requests are answered only for Host {', '.join(rules.names)} (--allow-host NAME adds one)")

    def serve(worker: int) -> int:
        govern_threads(args)
        server = ModelServer(serve_loaded(loaded, args.timeout), args.host, limits=limits,
                             allow_hosts=args.allow_host, sock=sock)
        server.serve_forever()
        return 0

    workers = f" by {args.workers} workers" if args.workers > 1 else ""
    note(f"serving {', '.join(loaded)} at {url}{workers} (Ctrl-C to stop)")
    if args.workers == 1:
        return serve(0)
    from nnlm.serve.workers import fork_workers

    try:
        return fork_workers(args.workers, serve)
    finally:
        sock.close()


def single_threaded_until_fork() -> None:
    """Torch on one thread while the models load: a forked worker of a process whose OpenMP pool has
    started hangs in its first parallel operation (nnlm.serve.workers)."""
    import torch

    torch.set_num_threads(1)
