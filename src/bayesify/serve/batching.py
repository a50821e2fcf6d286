"""Micro-batching: concurrent requests gathered into one vectorised pass, off the event loop.

Requests wait at most ``max_wait_ms`` (or until ``max_rows`` rows are gathered) for company;
the gathered rows run as one call of ``run(key, arrays)`` in a single worker thread, and each
caller gets its own slice of the answer. Requests with different keys (e.g. different sample
counts) are run as separate passes of the same gathering. With ``max_rows=0`` each request runs
alone in the same worker (batching off). A caller that went away is skipped when answers are
handed out; the pass itself is never interrupted, so other callers are not disturbed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: run(key, arrays) -> one result per array, in order
RunFn = Callable[[Hashable, Sequence[np.ndarray]], list[Any]]


@dataclass
class _Item:
    key: Hashable
    rows: np.ndarray
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)


class MicroBatcher:
    """Gathers ``submit`` calls into passes of ``run``; see the module docstring."""

    def __init__(
        self,
        run: RunFn,
        *,
        max_wait_ms: float = 2.0,
        max_rows: int = 64,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        if max_wait_ms < 0 or max_rows < 0:
            raise ValueError(f"max_wait_ms and max_rows must be >= 0, got {max_wait_ms}, "
                             f"{max_rows}")  # fmt: skip
        self.run = run
        self.max_wait = max_wait_ms / 1000
        self.max_rows = max_rows
        self.on_batch = on_batch
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bayesify-batch")
        self._queue: asyncio.Queue[_Item] | None = None
        self._task: asyncio.Task | None = None

    @property
    def enabled(self) -> bool:
        return self.max_rows > 0

    async def start(self) -> None:
        if self.enabled and self._task is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.create_task(self._loop(), name="bayesify-batcher")

    async def stop(self) -> None:
        """Finish what is queued, then stop the worker."""
        if self._task is not None:
            assert self._queue is not None
            await self._queue.join()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        # waits for the pass running (batching off: every request's) without blocking the loop
        await asyncio.to_thread(self._executor.shutdown, True)

    async def submit(self, key: Hashable, rows: np.ndarray) -> Any:
        """The result of ``run`` for ``rows`` (run together with concurrent submissions)."""
        loop = asyncio.get_running_loop()
        if not self.enabled:
            if self.on_batch:
                self.on_batch(len(rows))
            out = await loop.run_in_executor(self._executor, self.run, key, [rows])
            return out[0]
        if self._queue is None:
            raise RuntimeError("the batcher is not started")
        item = _Item(key, rows, loop.create_future())
        await self._queue.put(item)
        return await item.future

    async def _loop(self) -> None:
        assert self._queue is not None
        queue = self._queue
        loop = asyncio.get_running_loop()
        while True:
            first = await queue.get()
            batch = [first]
            rows = len(first.rows)
            deadline = first.enqueued + self.max_wait
            while rows < self.max_rows:
                timeout = deadline - time.perf_counter()
                try:
                    item = queue.get_nowait() if timeout <= 0 else await asyncio.wait_for(
                        queue.get(), timeout)  # fmt: skip
                except (asyncio.QueueEmpty, TimeoutError):
                    break
                batch.append(item)
                rows += len(item.rows)
            try:
                groups: dict[Hashable, list[_Item]] = {}
                for item in batch:
                    groups.setdefault(item.key, []).append(item)
                for key, items in groups.items():
                    live = [i for i in items if not i.future.done()]
                    if not live:
                        continue
                    if self.on_batch:
                        self.on_batch(sum(len(i.rows) for i in live))
                    try:
                        outs = await loop.run_in_executor(
                            self._executor, self.run, key, [i.rows for i in live])  # fmt: skip
                    except Exception as e:  # noqa: BLE001 - each caller gets the failure
                        for i in live:
                            if not i.future.done():
                                i.future.set_exception(e)
                        continue
                    for i, out in zip(live, outs, strict=True):
                        if not i.future.done():
                            i.future.set_result(out)
            finally:
                for _ in batch:
                    queue.task_done()
