"""``start_server`` answers with the server it started: when another process takes the free
port it picked before the server binds it (two test processes starting servers at once), it
starts again on a new port instead of returning the other process's server, which answers
``/v2/health/ready`` too."""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx

from bayesify.bench import process

from .conftest import start_server, stop_server


class _Ready(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"other": "server"}')

    def log_message(self, *args) -> None:
        pass


def test_a_port_taken_by_another_server_is_not_mistaken_for_ours(toy_bundle, tmp_path,
                                                                  monkeypatch):  # fmt: skip
    other = HTTPServer(("127.0.0.1", 0), _Ready)  # another process's server, already ready
    threading.Thread(target=other.serve_forever, daemon=True).start()
    taken = other.server_address[1]
    assert not process.listens(os.getpid() + 10**7, taken)  # no such process
    assert process.listens(os.getpid(), taken)  # this process holds it
    free, ports = process.free_port, iter([taken])  # the first port picked is the taken one
    monkeypatch.setattr(process, "free_port", lambda: next(ports, None) or free())
    try:
        srv = start_server(toy_bundle, tmp_path / "server.log")
        try:
            assert not srv.url.endswith(f":{taken}")
            card = httpx.get(f"{srv.url}/v1/model", timeout=30)
            assert card.status_code == 200 and "toy" in card.text, card.text
        finally:
            stop_server(srv)
    finally:
        other.shutdown()
        other.server_close()
