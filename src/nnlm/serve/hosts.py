"""Which requests may reach the models: the Host allow-list and the same-origin rule.

A page on any web site can make a visitor's browser send requests to 127.0.0.1; two things stop it from
reading or using the API. DNS rebinding (the attacker's name re-pointed at 127.0.0.1, so the page is
"same-origin" with the server) sends the attacker's name as Host: only the names this server is known by
are answered (loopback names with the port, plus `--allow-host`; the address given to `--host` when it is
a specific one). A cross-origin request (a form or fetch from another site) carries an `Origin` header: it
must be this server's own origin, `http://` + the Host it asked for. Requests without `Origin` (curl,
scripts, the page's own GETs) pass."""
from __future__ import annotations

import re

from nnlm.errors import NnlmError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
LOOPBACK_ADDRESSES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_ADDRESSES = frozenset({"", "0.0.0.0", "::"})
_NAME = re.compile(r"[a-z0-9._\-]+(:[0-9]{1,5})?|\[[0-9a-f:.]+\](:[0-9]{1,5})?|[0-9a-f:.]*:[0-9a-f:.]*")


def normalize_name(name: str) -> str:
    """A host name, IPv4 or IPv6 address as it appears in a Host header (IPv6 in brackets), lower case;
    `name:port` kept as given. Anything else is refused."""
    cleaned = name.strip().lower()
    if not cleaned or not _NAME.fullmatch(cleaned):
        raise NnlmError(f"--allow-host {name!r} is not a host name or address (e.g. myhost.lan, 192.168.1.5, "
                        "[fe80::1], or NAME:PORT)")
    if cleaned.count(":") > 1 and not cleaned.startswith("["):
        return f"[{cleaned}]"  # a bare IPv6 address
    return cleaned


class HostRules:
    """The Host values and Origins this server answers."""

    def __init__(self, listen_host: str, port: int, extra_names: list[str] | tuple[str, ...] = ()) -> None:
        names = list(LOOPBACK_NAMES)
        if listen_host.lower() not in WILDCARD_ADDRESSES | LOOPBACK_ADDRESSES:
            names.append(normalize_name(listen_host))  # an address: a rebinding page cannot send it as Host
        names += [normalize_name(n) for n in extra_names]
        allowed: set[str] = set()
        for name in names:
            if name.rsplit("]", 1)[-1].count(":") == 1:  # NAME:PORT, given as is
                allowed.add(name)
                continue
            allowed.add(f"{name}:{port}")
            if port == 80:  # a browser leaves the default port out
                allowed.add(name)
        self.allowed = frozenset(allowed)
        self.names = tuple(dict.fromkeys(names))

    def host_allowed(self, host: str | None) -> bool:
        return host is not None and host.strip().lower() in self.allowed

    @staticmethod
    def same_origin(origin: str | None, host: str) -> bool:
        """No Origin (not a cross-origin browser request), or this server's own origin."""
        return origin is None or origin.strip().lower() == f"http://{host.strip().lower()}"
