"""What every request passes before a route sees it: the API key (`Authorization: Bearer KEY` on every /v1
route; /health and /metrics stay open), the body size (413 past the limit, whether or not the client sent a
Content-Length) and the body's arrival (408 past BODY_TIMEOUT_S). A pure ASGI middleware: it reads the body
(never more than the limit) before the app does.

Below ASGI, `http_protocol` (uvicorn's h11 protocol) closes a connection whose request head has not arrived
within HEAD_TIMEOUT_S of its opening, or of the previous response on a kept-alive connection, and refuses
connections past MAX_CONNECTIONS open at once: without them, sockets that never send, or send a byte now and
then, would be held for ever until the server ran out of file descriptors."""
from __future__ import annotations

import asyncio
import hmac
import json

from .errors import APIError

HEAD_TIMEOUT_S = 15.0      # a request head, from the connection's opening or the previous response
BODY_TIMEOUT_S = 30.0      # a request body, from its head
MAX_CONNECTIONS = 1024     # open at once; more are closed as they open


class Guard:
    def __init__(self, app, api_key: str | None, max_body_bytes: int, on_reject=None):
        self.app, self.api_key, self.max_body = app, api_key, max_body_bytes
        self.on_reject = on_reject or (lambda code: None)        # counts refusals in the metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if self.api_key is not None and scope["path"].startswith("/v1"):
            given = headers.get(b"authorization", b"").decode("latin-1")
            scheme, _, key = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(), self.api_key.encode()):
                return await self.refuse(send, APIError(
                    401, "Incorrect or missing API key: send the header 'Authorization: Bearer <key>'",
                    "invalid_api_key"))
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return await self.refuse(send, self.too_large())
        body, more = bytearray(), True                 # read the body here (at most the limit), then replay it
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BODY_TIMEOUT_S
        while more:
            try:
                message = await asyncio.wait_for(receive(), deadline - loop.time())
            except asyncio.TimeoutError:
                return await self.refuse(send, APIError(408, f"the request body did not arrive within "
                                                             f"{BODY_TIMEOUT_S:g} s", "request_timeout"))
            if message["type"] != "http.request":
                return                            # the client went away before sending its body
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                return await self.refuse(send, self.too_large())
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()                # then the client's disconnect, when it comes

        await self.app(scope, replay, send)

    def too_large(self) -> APIError:
        return APIError(413, f"the request body is larger than this server's limit of {self.max_body} bytes",
                        "request_too_large")

    async def refuse(self, send, e: APIError) -> None:
        self.on_reject(e.code)
        body = json.dumps(e.body()).encode()
        await send({"type": "http.response.start", "status": e.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                    + ([(b"www-authenticate", b"Bearer")] if e.status == 401 else [])
                    + ([(b"connection", b"close")] if e.status == 408 else [])})
        await send({"type": "http.response.body", "body": body})


def http_protocol():
    """uvicorn's h11 protocol, with a deadline for every request head and a cap on open connections."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._head = None
            if len(self.connections) > MAX_CONNECTIONS:
                transport.close()
                return
            self._await_head()

        def _await_head(self) -> None:
            """Close the connection unless a request head (a new request cycle) arrives in time."""
            waiting = self.cycle
            self._head = self.loop.call_later(HEAD_TIMEOUT_S, lambda: self.cycle is waiting and self.transport.close())

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._head is not None and not self.transport.is_closing():
                self._head.cancel()
                self._await_head()

        def connection_lost(self, exc) -> None:
            if getattr(self, "_head", None) is not None:
                self._head.cancel()
            super().connection_lost(exc)

    return Protocol


def uvicorn_config(app, host: str, port: int, log_level: str = "warning"):
    import uvicorn
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, http=http_protocol(), timeout_keep_alive=5)
