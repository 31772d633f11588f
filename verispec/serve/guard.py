"""What every request passes before a route sees it: the API key (`Authorization: Bearer KEY` on every /v1
route; /health and /metrics stay open) and the body size (413 past the limit, whether or not the client sent a
Content-Length). A pure ASGI middleware: it reads the body (never more than the limit) before the app does."""
from __future__ import annotations

import hmac
import json

from .errors import APIError


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
        while more:
            message = await receive()
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
                    + ([(b"www-authenticate", b"Bearer")] if e.status == 401 else [])})
        await send({"type": "http.response.body", "body": body})
