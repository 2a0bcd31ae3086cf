"""uvicorn's httptools protocol with a deadline on each request's head (endpoint.head_timeout_s).

uvicorn times nothing before a request's headers are read: a connection that never sends one,
or sends its headers a byte at a time, is held for ever and counts against limit_concurrency,
so a few hundred of them answer every other client 503. The deadline runs from the connection
(its first request) or from the first byte of a later one on a kept-alive connection (between
requests uvicorn's keep-alive timeout runs) to the end of the headers; past it the client gets a
408 and the connection is closed. The body's deadline is request.read_body's.
"""
from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_LATE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
         b"connection: close\r\ncontent-length: %d\r\n\r\n%s")


def with_head_deadline(head_timeout_s: float) -> type:
    """The protocol class for uvicorn.Config(http=...)."""

    class HeadDeadlineProtocol(HttpToolsProtocol):
        _head_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._head_timer is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._head_timer = self.loop.call_later(head_timeout_s, self._late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _late(self) -> None:
            self._head_timer = None
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete:  # no answer being written
                reason = (f"the request's headers did not arrive within {head_timeout_s:g} s "
                          "(endpoint.head_timeout_s)").encode()
                self.transport.write(_LATE % (len(reason), reason))
            self.transport.close()

    return HeadDeadlineProtocol
