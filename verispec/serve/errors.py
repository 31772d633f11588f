"""OpenAI-style error bodies: {"error": {"message", "type", "param", "code"}} with the matching HTTP status."""
from __future__ import annotations


class APIError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 kind: str = "invalid_request_error", headers: dict | None = None):
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")   # echoed input: always encodable
        super().__init__(message)
        self.status, self.message, self.code, self.param, self.kind = status, message, code, param, kind
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def response(self):
        from fastapi.responses import JSONResponse
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def server_error(message: str) -> APIError:
    return APIError(500, message, "server_error", kind="server_error")


def unavailable(message: str) -> APIError:
    return APIError(503, message, "server_unavailable", kind="server_error")
