"""Progress bars draw on a terminal only: a log file or CI console is not flooded."""

from __future__ import annotations

import io

from bayesify.progress import progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drawn(stream: io.StringIO, **kwargs: object) -> str:
    for _ in progress_bar(range(3), file=stream, mininterval=0, **kwargs):
        pass
    return stream.getvalue()


def test_bar_draws_on_a_terminal_and_not_into_a_file() -> None:
    assert "3/3" in _drawn(Terminal())
    assert _drawn(io.StringIO()) == ""
    assert _drawn(Terminal(), progress=False) == ""
