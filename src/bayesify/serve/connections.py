"""Which connections hold the server's slots, and which one gives way when they are full.

A connection is *pending* from the moment it is accepted until a request on it has arrived
with whole headers carrying the API key (on a server without a key: whole headers); from then
on it is *admitted* for the rest of its life (keep-alive included). Of ``max_connections``
slots, ``reserved`` are for admitted connections only: pending ones hold at most
``max_connections - reserved``. When a new connection finds no slot it may take, the oldest
pending connection of the client address holding the most pending connections gives way (it
is answered 503 with ``Retry-After`` if it had begun a request, else closed), so clients that
trickle headers from one address, or a few, cannot keep a client with the key out; only when
every slot is held by admitted connections is the newcomer refused (503). Addresses are
grouped per IPv4 address and per IPv6 /64 (what one host is usually given).
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol


class Connection(Protocol):
    def give_way(self) -> None:
        """Answer 503 (or close, if idle) and close: a newer connection takes the slot."""


@dataclass(frozen=True)
class ConnectionLimits:
    """Open connections at most, slots only admitted connections may take (None: a quarter
    of ``max_connections``)."""

    max_connections: int = 256
    reserved: int | None = None

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"--max-connections must be >= 1, got {self.max_connections}")
        if self.reserved is not None and not 0 <= self.reserved < self.max_connections:
            raise ValueError(f"--reserved-connections must be >= 0 and below --max-connections "
                             f"({self.max_connections}), got {self.reserved}")  # fmt: skip

    @property
    def reserved_slots(self) -> int:
        return self.max_connections // 4 if self.reserved is None else self.reserved

    @property
    def max_pending(self) -> int:
        return max(1, self.max_connections - self.reserved_slots)


def address_group(host: str | None) -> str:
    """The key connections of one client are counted under: the IPv4 address, or the /64 of
    an IPv6 address."""
    if not host:
        return ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else str(ip)


class ConnectionBook:
    """The slots of one server; see the module docstring. Not thread-safe: the event loop's."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        #: address group -> its pending connections, oldest first
        self.pending: dict[str, OrderedDict[Connection, None]] = {}
        self._group: dict[Connection, str] = {}
        self.n_pending = 0
        self.admitted: set[Connection] = set()
        self.gave_way = self.refused = 0

    @property
    def total(self) -> int:
        return self.n_pending + len(self.admitted)

    def arrive(self, conn: Connection, host: str | None) -> bool:
        """Book a new connection as pending (another may give way); False: no slot, refuse."""
        full = self.total >= self.limits.max_connections
        if full or self.n_pending >= self.limits.max_pending:
            if not self.n_pending:
                self.refused += 1
                return False
            self._evict()
        group = address_group(host)
        self.pending.setdefault(group, OrderedDict())[conn] = None
        self._group[conn] = group
        self.n_pending += 1
        return True

    def admit(self, conn: Connection) -> None:
        """A request with whole headers (and the key, where one is set) arrived on ``conn``."""
        if conn in self.admitted:
            return
        if self._drop_pending(conn):
            self.admitted.add(conn)

    def is_admitted(self, conn: Connection) -> bool:
        return conn in self.admitted

    def leave(self, conn: Connection) -> None:
        """``conn`` closed."""
        self.admitted.discard(conn)
        self._drop_pending(conn)

    def _drop_pending(self, conn: Connection) -> bool:
        group = self._group.pop(conn, None)
        if group is None:
            return False
        conns = self.pending[group]
        del conns[conn]
        self.n_pending -= 1
        if not conns:
            del self.pending[group]
        return True

    def _evict(self) -> None:
        group = max(self.pending, key=lambda g: len(self.pending[g]))
        victim = next(iter(self.pending[group]))
        self._drop_pending(victim)
        self.gave_way += 1
        victim.give_way()
