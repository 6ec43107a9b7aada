"""The bounds `nnlm serve` holds every client to, in one place (the CLI's options fill it in).

Each deadline is a total from a fixed moment, not an idle timer a client resets by sending a byte:
the request line and headers must be complete within `header_timeout` of the connection opening (or of
the previous answer on a kept-alive connection), the body within `body_timeout` of the headers, and a
client that stops reading its answer is dropped after `body_timeout` too."""
from __future__ import annotations

from dataclasses import dataclass

MAX_BODY = 1 << 20
MAX_HEADER_BYTES = 16 * 1024      # request line + headers (more: 431, nnlm.serve.protocol)
BACKLOG = 2048                    # connections the kernel queues before accept (capped by net.core.somaxconn)
MAX_CONNECTIONS = 4096            # open connections; beyond, a new one gets 503 and is closed


@dataclass(frozen=True)
class Limits:
    max_body: int = MAX_BODY          # bytes of a request body (413 beyond, before it is read when declared)
    header_timeout: float = 10.0      # seconds for the request line and headers
    body_timeout: float = 20.0        # seconds for the whole body once the headers are in
    model_timeout: float = 30.0       # seconds the model may take to answer (503 beyond)
    keep_alive: float = 5.0           # seconds an idle kept-alive connection stays open
    max_connections: int = MAX_CONNECTIONS
    backlog: int = BACKLOG
