"""``bayesify serve``: run the prediction server for a bundle or a folder of bundles."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bayesify.cli.common import Threads, set_threads

if TYPE_CHECKING:
    import socket


def serve(
    ctx: typer.Context,
    bundle: Annotated[
        Path,
        typer.Argument(
            help="Bundle folder to serve, or a folder of bundles: DIR/NAME/ (version 1) or "
            "DIR/NAME/VERSION/ (integer versions; the newest is the default).",
            show_default=False,
        ),
    ],
    name: Annotated[
        str | None,
        typer.Option(help="Model name in URLs, for one bundle.", show_default="the folder's name"),
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8000,
    samples: Annotated[int, typer.Option(help="Default MC samples T per row.", min=1)] = 32,
    adaptive_tol: Annotated[
        float | None,
        typer.Option(
            help="Adaptive sampling: largest MC standard error of the predictive mean, in "
            "the units the server reports (class probabilities; regression: the original "
            "target units of `mean` and `std`).",
            show_default="off: a fixed T",
        ),
    ] = None,
    adaptive_start: Annotated[int, typer.Option(help="Adaptive sampling: first T.", min=2)] = 8,
    adaptive_max: Annotated[
        int, typer.Option(help="Adaptive sampling: most T (start times a power of 2).", min=2)
    ] = 32,
    batch_wait_ms: Annotated[
        float, typer.Option(help="Micro-batching: longest wait for company.", min=0)
    ] = 2.0,
    batch_rows: Annotated[
        int, typer.Option(help="Micro-batching: most rows per pass (0: off).", min=0)
    ] = 64,
    max_rows: Annotated[int, typer.Option(help="Most rows per request.", min=1)] = 256,
    max_samples: Annotated[int, typer.Option(help="Most samples per request.", min=1)] = 256,
    max_body: Annotated[int, typer.Option(help="Largest request body, bytes.", min=1)] = 4 * 2**20,
    max_connections: Annotated[
        int,
        typer.Option(
            help="Most open connections. When none is free, the oldest connection still "
            "waiting for its headers (of the address holding the most) gives way; when "
            "connections with the API key hold them all, a new one gets 503.",
            min=1,
        ),
    ] = 256,
    reserved_connections: Annotated[
        int | None,
        typer.Option(
            help="Connections only clients that sent the API key (any client, without a key: "
            "whole headers) may hold; the rest may wait for their headers.",
            min=0,
            show_default="a quarter of --max-connections",
        ),
    ] = None,
    max_models: Annotated[
        int,
        typer.Option(
            help="Most model versions loaded at once (start-up and POST .../load; beyond: 409).",
            min=1,
        ),
    ] = 16,
    header_timeout: Annotated[
        float, typer.Option(help="Seconds for a request's headers to arrive (408 after).", min=0.01)
    ] = 10.0,
    body_timeout: Annotated[
        float, typer.Option(help="Seconds for a request's body to arrive (408 after).", min=0.01)
    ] = 30.0,
    keep_alive: Annotated[
        int, typer.Option(help="Seconds an idle keep-alive connection stays open.", min=1)
    ] = 5,
    grace_period: Annotated[
        float,
        typer.Option(
            help="On SIGTERM: seconds requests in flight may take to finish; those still "
            "running after it are answered 503 with Retry-After.",
            min=0,
        ),
    ] = 30.0,
    store: Annotated[
        str | None,
        typer.Option(
            help="Where the record of what was served lives (rows awaiting outcomes, the "
            "rolling windows, their history): a SQLite file, postgresql://USER@HOST/DB (one "
            "record for replicas on several machines; the extra postgres) or 'memory' (lost "
            "when the server stops). See docs/record.md.",
            show_default="DIR/.bayesify-record.sqlite3 for a folder DIR, else beside the bundle",
        ),
    ] = None,
    durability: Annotated[
        str,
        typer.Option(
            help="What a record commit survives: 'full' a power cut (each commit synced to "
            "disk), 'normal' a killed server (a power cut may lose the last commits).",
        ),
    ] = "normal",
    history_every: Annotated[
        float,
        typer.Option(
            help="Seconds between two history snapshots while requests are served "
            "(feedback always takes one).",
            min=0,
        ),
    ] = 60.0,
    max_pending: Annotated[
        int, typer.Option(help="Most served rows the record keeps awaiting outcomes.", min=1)
    ] = 100_000,
    record_days: Annotated[
        float,
        typer.Option(
            help="Days the record keeps rows awaiting outcomes, received ids and history.",
            min=0.001,
        ),
    ] = 30.0,
    history_rows: Annotated[
        int, typer.Option(help="Most history snapshots kept per model version.", min=1)
    ] = 10_000,
    int8: Annotated[
        bool, typer.Option("--int8", help="Dynamic int8 quantisation of linear layers.")
    ] = False,
    defer_max_samples: Annotated[
        int | None,
        typer.Option(
            help="Most samples the sequential deferral decision draws for a row near the "
            "threshold, when lower than the bundle's (a latency budget; rows may then flip "
            "more often than calibrated).",
            min=2,
            show_default="the bundle's",
        ),
    ] = None,
    drift_level: Annotated[
        float,
        typer.Option(
            help="False-alarm probability of one model's drift check on unshifted traffic "
            "(Bonferroni over its figures; docs/deploy.md).",
            min=1e-6,
            max=0.5,
        ),
    ] = 0.01,
    workers: Annotated[
        int,
        typer.Option(
            help="Server processes sharing the port, each with its own torch threads, "
            "micro-batcher and connection cap (--max-connections holds per worker); /metrics "
            "counts for them all. SIGTERM drains every worker; one that dies is replaced.",
            min=1,
        ),
    ] = 1,
    threads: Threads = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Serve a bundle, or every bundle in a folder, over HTTP: /v1/predict, the Open Inference
    Protocol (/v2/..., with the model repository extension to load and unload models while the
    server runs), /metrics, feedback and a status page at /. Set BAYESIFY_API_KEY to require an
    API key (sent as X-API-Key or Authorization: Bearer)."""
    import logging
    import os

    from rich.markup import escape

    from bayesify.cli.common import console, fail
    from bayesify.serve.workers import this_worker

    worker = this_worker()  # this process is one of --workers N, started by the parent below
    if workers > 1 and worker is None:  # the parent: binds the port, runs no server itself
        return _supervise(_worker_command(ctx), host, port, workers, grace_period)
    if worker is not None:
        worker.watch_parent()
    try:  # the server's packages first: without them, fail before loading torch
        from bayesify.serve import listener
        from bayesify.serve.app import API_KEY_ENV, Settings, create_app
        from bayesify.serve.model import Adaptive, ServedModel
        from bayesify.serve.repository import BatchSettings, Repository
    except ModuleNotFoundError as e:
        raise fail(escape(f'bayesify serve needs {e.name}: pip install -e ".[serve]"')) from None
    from bayesify.methods.core.adaptive import check_options

    first = worker is None or worker.index == 0  # the process that announces
    if not os.environ.get(API_KEY_ENV) and not _loopback(host) and first:
        console.print(f"[bold yellow]warning:[/] serving without an API key on {host}: anyone "
                      f"who can reach it can predict and post feedback; set {API_KEY_ENV} to "
                      "require one")  # fmt: skip
    set_threads(threads)
    adaptive = None
    try:
        if adaptive_tol is not None:
            check_options(adaptive_tol, adaptive_start, adaptive_max)
            adaptive = Adaptive(adaptive_tol, adaptive_start, adaptive_max)

        def loader(path: str, model_name: str) -> ServedModel:
            return ServedModel.load(path, model_name, int8=int8, default_samples=samples,
                                    adaptive=adaptive,
                                    defer_max_samples=defer_max_samples)  # fmt: skip

        repo = Repository.open(bundle, name, loader, BatchSettings(batch_wait_ms, batch_rows),
                               max_models=max_models, drift_level=drift_level,
                               record=_record_options(store, bundle, durability, history_every,
                                                      max_pending, record_days,
                                                      history_rows))  # fmt: skip
        limits = listener.ListenerSettings(header_timeout=header_timeout, keep_alive=keep_alive,
                                           max_connections=max_connections, grace=grace_period,
                                           reserved_connections=reserved_connections,
                                           api_key=os.environ.get(API_KEY_ENV) or None)  # fmt: skip
    except (ValueError, TypeError, OSError) as e:
        raise fail(str(e)) from None
    sock = worker.sock if worker is not None else _bind(host, port)
    settings = Settings(max_body_bytes=max_body, max_rows=max_rows, max_samples=max_samples,
                        batch_wait_ms=batch_wait_ms, batch_rows=batch_rows,
                        body_timeout_s=body_timeout)  # fmt: skip
    app = create_app(repo, settings)
    logging.getLogger("bayesify").setLevel(logging.INFO)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    for e in repo.entries() if first else ():
        version = f" version {e.version}" if repo.root is not None else ""
        console.print(f"serving {e.name}{version} ({e.model.predictor.method.name}, "
                      f"{e.model.task}) on {url}")  # fmt: skip
    for model, folders in repo.problems.items():
        for folder, why in folders.items():
            console.print(escape(f"not serving {model}/{folder}: {why}"))
    listener.run(app, sock, limits, log_level, worker.ready if worker is not None else None)


def _bind(host: str, port: int) -> socket.socket:
    """The port taken before anything is announced: a failed bind is the one message."""
    from rich.markup import escape

    from bayesify.cli.common import fail
    from bayesify.serve import listener

    try:
        return listener.bind(host, port)
    except OSError as e:
        raise fail(escape(f"cannot listen on {host}:{port}: {e.strerror or e}")) from None


def _supervise(command: list[str], host: str, port: int, workers: int, grace: float) -> None:
    """``--workers N``: bind the port, run this command as N worker processes on it until
    SIGTERM (:mod:`bayesify.serve.workers`); a worker that fails to start ends it with its code."""
    import logging
    import os

    from bayesify.cli.common import fail
    from bayesify.serve.workers import MULTIPROC_ENV, Supervisor

    try:  # the parent needs uvicorn and prometheus_client, never torch
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ModuleNotFoundError as e:
        raise fail(f'bayesify serve needs {e.name}: pip install -e ".[serve]"') from None
    sock = _bind(host, port)
    logging.getLogger("bayesify").setLevel(logging.INFO)
    supervisor = Supervisor(command, sock, workers, grace,
                            os.environ.get(MULTIPROC_ENV))  # fmt: skip
    code = supervisor.run()
    if code:
        raise typer.Exit(code)


def _worker_command(ctx: typer.Context) -> list[str]:
    """This ``bayesify serve`` command line, every option as given or defaulted, as each
    worker runs it (without ``--workers``)."""
    import sys

    args = [sys.executable, "-c", "from bayesify.cli import main; main()", ctx.info_name or "serve"]
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if param.name == "workers" or value is None:
            continue
        if param.param_type_name == "argument":
            args.append(str(value))
        elif getattr(param, "is_flag", False):
            args += param.opts[:1] if value else param.secondary_opts[:1]
        else:
            for v in value if param.multiple else [value]:
                args += [param.opts[0], str(v)]
    return args


def _record_options(
    store: str | None,
    bundle: Path,
    durability: str,
    history_every: float,
    max_pending: int,
    record_days: float,
    history_rows: int,
):  # noqa: ANN202
    """The record the server keeps (:mod:`bayesify.serve.record`); a ``ValueError`` or
    ``OSError`` in one line when it cannot be opened."""
    from bayesify.serve.record import Durability, Record, RecordOptions, Retention

    if durability not in {d.value for d in Durability}:
        raise ValueError(f"--durability is 'full' or 'normal', got {durability!r}")
    target = store if store is not None else Record.default_path(bundle)
    retention = Retention(max_age_s=record_days * 86400.0, history_rows=history_rows)
    return RecordOptions(Record.open(target, durability, retention), history_every=history_every,
                         max_pending=max_pending)  # fmt: skip


def _loopback(host: str) -> bool:
    """Whether ``host`` (a name or address) only reaches this machine."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # another host name: it may resolve to anything
        return False
