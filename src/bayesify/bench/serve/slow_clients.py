"""A slow-header siege of a server on this machine, and a keyed client's answers under it.

``attackers`` clients trickle one header line every ``drip`` seconds and never finish their
headers; whenever the server answers (408, 503) or closes, each connects again at once. All
of them bind to ``attack_from`` and the keyed client to ``key_from`` (any two addresses of
127.0.0.0/8 are this machine's on Linux), so a server can tell them apart by address. Bounded
in time (``seconds``) and in count (``max_connects`` per attacker); loopback only.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import time
from dataclasses import dataclass, field


@dataclass
class SiegeReport:
    """What the siege saw: the keyed client's statuses and latencies, the attackers' ends."""

    keyed: collections.Counter = field(default_factory=collections.Counter)
    keyed_seconds: list[float] = field(default_factory=list)
    attacks: collections.Counter = field(default_factory=collections.Counter)
    connects: int = 0

    def line(self) -> str:
        lat = sorted(self.keyed_seconds) or [float("nan")]
        p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        keyed = ", ".join(f"{k}: {v}" for k, v in sorted(self.keyed.items()))
        ends = ", ".join(f"{k}: {v}" for k, v in sorted(self.attacks.items()))
        return (f"keyed requests {sum(self.keyed.values())} ({keyed}), latency p50 {p50:.3f} s, "
                f"p99 {p99:.3f} s; attacker connections {self.connects} ({ends})")  # fmt: skip


def _loopback(address: str) -> str:
    if not ipaddress.ip_address(address).is_loopback:
        raise ValueError(f"{address} is not a loopback address")
    return address


async def _status(reader: asyncio.StreamReader, timeout: float) -> str:
    line = await asyncio.wait_for(reader.readline(), timeout)
    parts = line.split()
    return parts[1].decode() if len(parts) > 1 else "closed"


async def _attacker(host: str, port: int, source: str, drip: float, until: float,
                    max_connects: int, report: SiegeReport) -> None:  # fmt: skip
    for _ in range(max_connects):
        if time.monotonic() >= until:
            return
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        except OSError:
            report.attacks["connect failed"] += 1
            await asyncio.sleep(0.05)
            continue
        report.connects += 1
        try:
            writer.write(b"GET /v1/model HTTP/1.1\r\nHost: x\r\n")
            end = "still open"
            for i in range(int((until - time.monotonic()) / drip) + 1):
                try:
                    end = await _status(reader, drip)
                    break
                except TimeoutError:
                    writer.write(b"X-Pad-%d: 1\r\n" % i)
                    await writer.drain()
            report.attacks[end] += 1
        except OSError:
            report.attacks["reset"] += 1
        finally:
            writer.close()


async def _keyed(host: str, port: int, source: str, key: str, requests: int, until: float,
                 report: SiegeReport) -> None:  # fmt: skip
    head = (f"GET /v1/model HTTP/1.1\r\nHost: x\r\nX-API-Key: {key}\r\n"
            "Connection: close\r\n\r\n").encode()  # fmt: skip
    for _ in range(requests):
        if time.monotonic() >= until:
            return
        start = time.monotonic()
        try:  # each request on a new connection: the hard case (it must win a slot)
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
            writer.write(head)
            status = await _status(reader, 10)
            writer.close()
        except (OSError, TimeoutError):
            status = "failed"
        report.keyed[status] += 1
        report.keyed_seconds.append(time.monotonic() - start)
        await asyncio.sleep(0.05)


async def siege(host: str, port: int, key: str, *, attackers: int = 300, seconds: float = 30,
                requests: int = 60, drip: float = 0.5, warmup: float = 2.0,
                attack_from: str = "127.0.0.2", key_from: str = "127.0.0.3",
                max_connects: int = 10_000) -> SiegeReport:  # fmt: skip
    """Run the siege for ``seconds``; the keyed client starts ``warmup`` seconds in (once the
    attackers hold what they can) and sends up to ``requests`` requests."""
    for address in (host, attack_from, key_from):
        _loopback(address)
    report = SiegeReport()
    until = time.monotonic() + seconds
    tasks = [asyncio.create_task(_attacker(host, port, attack_from, drip, until, max_connects,
                                           report)) for _ in range(attackers)]  # fmt: skip
    await asyncio.sleep(warmup)
    await _keyed(host, port, key_from, key, requests, until, report)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return report
