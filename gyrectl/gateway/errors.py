"""Errors the gateway answers with, in the shapes OpenAI and Anthropic clients parse.

A harness's SDK turns the status code into its exception class (400 -> BadRequestError, 401 ->
AuthenticationError, 404 -> NotFoundError, 413, 503 -> retried by most SDKs), so each failure
gets the status an OpenAI server would give, with an OpenAI-style ``{"error": {...}}`` body
(Anthropic's ``{"type": "error", "error": {...}}`` on ``/v1/messages``).
"""

from __future__ import annotations

import enum
from typing import Any

_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 502: "api_error", 503: "overloaded_error"}


class GatewayError(Exception):
    """A request the gateway refuses or cannot serve; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param

    def openai_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def anthropic_body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(self.status, "api_error"),
                                           "message": self.message}}


def bad_request(message: str, *, param: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param)


def unauthorized() -> GatewayError:
    return GatewayError(401, "Missing or invalid API key (the run's gateway token).",
                        type="authentication_error", code="invalid_api_key")


def forbidden(message: str) -> GatewayError:
    return GatewayError(403, message, type="permission_error", code="forbidden")


def unknown_model(model: str, served: tuple[str, ...]) -> GatewayError:
    return GatewayError(404, f"The model {model!r} does not exist; served: {', '.join(served)}.",
                        code="model_not_found", param="model")


def unavailable(message: str) -> GatewayError:
    return GatewayError(503, message, type="server_error", code="service_unavailable")


def bad_gateway(message: str) -> GatewayError:
    return GatewayError(502, message, type="server_error", code="bad_gateway")


class Loss(enum.Enum):
    """How a call lost its server; ``retry.after_loss`` says what each means."""
    GONE = "gone"
    """Refused, reset, timed out, or cut between two events: the server is lost."""
    GARBAGE = "garbage"
    """It answered, but not a reply (no JSON, invalid UTF-8, a reply missing its fields)."""
    ERROR = "error"
    """It answered 5xx, or an error event in a stream."""
    ENDED = "ended"
    """The call was ended on purpose: our cancel (drain grace over, removal) or the server's
    own abort (a coordinator's ``/pause?mode=abort``); the server itself is fine."""


class UpstreamLost(Exception):
    """The server answering a call failed it or went away: the call is re-sent elsewhere, so
    this reaches the client only as the error of a call no server could finish."""

    def __init__(self, message: str, loss: Loss = Loss.GONE):
        super().__init__(message)
        self.loss = loss
