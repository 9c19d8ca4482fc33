"""The gateway's HTTP face (aiohttp): client routes, the admin route, errors, start and stop.

Client routes, under ``/v1`` or ``/x/<execution>[/<role>]/v1`` (see ``auth``):
``POST chat/completions``, ``completions``, ``responses``, ``messages``; ``GET models``.
Admin routes (the admin token only; a client token gets 403): ``GET /admin/servers``;
``POST /admin/servers`` ``{"name", "url", "weight_version"}``; ``POST /admin/servers/<name>/drain`` ``{"grace_s"}``;
``POST /admin/servers/<name>/weight_version`` ``{"version"}``; ``DELETE /admin/servers/<name>``.

aiohttp rather than FastAPI: the gateway is a streaming proxy, so it wants a raw request body
(size-capped before parsing), a raw response stream and one client session with connection
reuse -- aiohttp is all three in one well-kept library that vLLM already installs, with no
validation layer to pay for on every chunk.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from gyrectl.gateway import anthropic, chat, completions, relay, wire_json
from gyrectl.gateway.auth import Caller, identify, is_admin, presented_key
from gyrectl.gateway.capture import CallContext
from gyrectl.gateway.commit import GroupCommit
from gyrectl.gateway.engine import EngineDeps, Generation
from gyrectl.gateway.errors import GatewayError, bad_request, forbidden, unauthorized, unavailable
from gyrectl.gateway.pool import ServerPool
from gyrectl.gateway.sampling import impose
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.gateway.sink import CallSink
from gyrectl.gateway.sse import DONE, encode
from gyrectl.gateway.upstream import Upstream, UpstreamRejected
from gyrectl.gateway.validate import (
    check_request,
    drain_grace,
    execution_settings,
    parse_body,
    server_entry,
    weight_version,
)

_APIS = {"/v1/chat/completions": "chat", "/v1/completions": "completions",
         "/v1/responses": "responses", "/v1/messages": "messages"}
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_KEY_HEADERS = ("Authorization", "x-api-key")


class Gateway:
    """``await start()``, hand harnesses ``base_url(execution)``, ``await stop()``."""

    def __init__(self, settings: GatewaySettings, *, sink: CallSink):
        self.settings = settings
        self.sink = sink
        self.pool = ServerPool(drain_grace_s=settings.drain_grace_s, sticky_slack=settings.sticky_slack,
                               server_wait_s=settings.server_wait_s)
        self.url = ""
        self.admin_url = ""
        self.sampling: dict[str, dict[str, Any]] = {}
        """Per execution, request fields the gateway sets on every call of it (an evaluation's
        ``temperature``), whatever the harness sent (:func:`~gyrectl.gateway.sampling.impose`)."""
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._deps: EngineDeps | None = None

    def base_url(self, execution: str, role: str = "main") -> str:
        """The OpenAI base URL to give the harness of ``execution`` (key: the client token)."""
        return base_url(self.url, execution, role)

    def forget_execution(self, execution: str) -> None:
        """``execution`` ended: its stickiness, version pin and sampling fields go."""
        self.pool.forget_execution(execution)
        self.sampling.pop(execution, None)

    async def start(self, *, reuse_port: bool = False, admin_port: int | None = None) -> None:
        """Listens on the settings' host and port; ``reuse_port``: beside other gateway processes
        on the same port (the kernel spreads connections over them); ``admin_port``: also on
        127.0.0.1 at that port (0: any), where the head reaches this process alone (``admin_url``)."""
        upstream = Upstream(read_timeout_s=self.settings.read_timeout_s, server_key=self.settings.server_key)
        self._deps = EngineDeps(self.pool, upstream, GroupCommit(self.sink), max_attempts=self.settings.max_attempts)
        app = web.Application(client_max_size=self.settings.max_body_bytes, middlewares=[self._errors])
        app.router.add_route("*", "/admin/servers", self._admin)
        app.router.add_route("*", "/admin/servers/{name}", self._admin)
        app.router.add_route("*", "/admin/servers/{name}/{action}", self._admin)
        app.router.add_route("*", "/admin/executions/{execution}", self._admin_execution)
        app.router.add_route("*", "/{tail:.*}", self._client)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=self.settings.drain_grace_s)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port, reuse_port=reuse_port or None,
                           backlog=4096)
        await site.start()
        self.url = f"http://{self.settings.host}:{_port(site)}"
        if admin_port is not None:
            admin = web.TCPSite(self._runner, "127.0.0.1", admin_port)
            await admin.start()
            self.admin_url = f"http://127.0.0.1:{_port(admin)}"

    async def stop(self) -> None:
        """New calls get 503 from now on; running ones finish (up to the drain grace)."""
        self._closing = True
        if self._runner is not None:
            await self._runner.cleanup()
        if self._deps is not None:
            await self._deps.upstream.close()
            await self._deps.records.close()

    # -- client calls ------------------------------------------------------------------------
    async def _client(self, request: web.Request) -> web.StreamResponse:
        caller = self._caller(request)
        if self._closing:
            raise unavailable("The gateway is shutting down.")
        if caller.api_path == "/v1/models":
            return wire_json.response({"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "gyrectl"} for m in self.settings.models]})
        api = _APIS.get(caller.api_path)
        if api is None:
            raise GatewayError(404, f"Unknown route {request.method} {request.path}.", code="unknown_url")
        if request.method != "POST":
            raise GatewayError(405, f"{caller.api_path} takes POST.", code="method_not_allowed")
        body = parse_body(await _read(request))
        check_request(api, body, self.settings.models)
        body = impose(body, self.sampling.get(caller.execution, {}))
        ctx = CallContext(caller.execution, uuid.uuid4().hex, api, caller.role, time.time())
        handler = {"chat": self._generate, "completions": self._generate,
                   "messages": self._messages, "responses": self._responses}[api]
        return await handler(request, ctx, body)

    async def _generate(self, request: web.Request, ctx: CallContext, body: dict[str, Any]) -> web.StreamResponse:
        call = Generation(self._deps, ctx, chat if ctx.api == "chat" else completions, body)
        if not body.get("stream"):
            return wire_json.response(await call.respond())
        chunks = (encode(chunk) async for chunk in call.stream())
        return await _sse(request, chunks, done=True, error_event=_openai_error_event)

    async def _messages(self, request: web.Request, ctx: CallContext, body: dict[str, Any]) -> web.StreamResponse:
        chat_body = anthropic.to_chat_request(body)
        if not chat_body["stream"]:
            reply = await Generation(self._deps, ctx, chat, chat_body).respond()
            return wire_json.response(anthropic.to_message(reply))
        chat_body["stream_options"] = {"include_usage": True}
        call = Generation(self._deps, ctx, chat, chat_body)

        async def events() -> AsyncIterator[bytes]:
            translator = anthropic.StreamTranslator()
            async for chunk in call.stream():
                for name, data in translator.feed(chunk):
                    yield encode(data, name)
            for name, data in translator.finish():
                yield encode(data, name)
        return await _sse(request, events(), done=False, error_event=_anthropic_error_event)

    async def _responses(self, request: web.Request, ctx: CallContext, body: dict[str, Any]) -> web.StreamResponse:
        if not body.get("stream"):
            return wire_json.response(await relay.respond(self._deps, ctx, body))
        events = (encode(data, name) async for name, data in relay.stream(self._deps, ctx, body))
        return await _sse(request, events, done=False, error_event=_openai_error_event)

    # -- admin ---------------------------------------------------------------------------------
    async def _admin(self, request: web.Request) -> web.Response:
        self._admin_caller(request)
        name, action = request.match_info.get("name"), request.match_info.get("action")
        body = parse_body(await _read(request)) if request.body_exists else {}
        try:
            if request.method == "POST" and name is None:
                server, url, version = server_entry(body)
                self.pool.add(server, url, weight_version=version)
            elif request.method == "POST" and action == "drain":
                self.pool.drain(name, grace_s=drain_grace(body))
            elif request.method == "POST" and action == "weight_version":
                self.pool.set_weight_version(name, weight_version(body))
            elif request.method == "DELETE" and action is None and name is not None:
                self.pool.remove(name)
            elif request.method != "GET":
                raise GatewayError(405, f"{request.method} {request.path} is not an admin action.")
        except KeyError as exc:  # the pool's: no server of that name (bodies are checked above)
            raise GatewayError(404, f"{exc.args[0]}", code="unknown_server") from exc
        return wire_json.response({"servers": [
            {"name": s.name, "url": s.url, "state": s.state.value, "num_inflight": s.num_inflight,
             "weight_version": s.weight_version, "calls": s.calls} for s in self.pool.views()]})

    async def _admin_execution(self, request: web.Request) -> web.Response:
        """What the head sets per execution when several gateway processes share the port
        (``gyrectl.gateway.processes``): POST ``{"min_version"?, "sampling"?}``, DELETE forgets it."""
        self._admin_caller(request)
        execution = request.match_info["execution"]
        if request.method == "POST":
            min_version, sampling = execution_settings(parse_body(await _read(request)))
            if min_version is not None:
                self.pool.pin_version(execution, min_version)
            if sampling is not None:
                self.sampling[execution] = sampling
        elif request.method == "DELETE":
            self.forget_execution(execution)
        else:
            raise GatewayError(405, f"{request.method} {request.path} is not an admin action.")
        return wire_json.response({"execution": execution})

    # -- shared --------------------------------------------------------------------------------
    def _caller(self, request: web.Request) -> Caller:
        caller = identify(request.path, presented_key(request.headers), self.settings.token)
        if caller is None:
            raise unauthorized()
        return caller

    def _admin_caller(self, request: web.Request) -> None:
        key = presented_key(request.headers)
        if is_admin(key, self.settings.admin_token):
            return
        if identify(request.path, key, self.settings.token) is not None:
            raise forbidden("The admin routes take the admin token; this is the client token harnesses get.")
        if not self.settings.admin_token:
            raise forbidden("This gateway's admin routes are off (it was started without an admin token).")
        raise unauthorized()

    @web.middleware
    async def _errors(self, request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        anthropic_shape = request.path.endswith("/v1/messages")
        try:
            _check_key_headers(request)
            return await handler(request)
        except GatewayError as err:
            body = err.anthropic_body() if anthropic_shape else err.openai_body()
            return wire_json.response(body, status=err.status)
        except UpstreamRejected as rejected:
            if anthropic_shape:
                return wire_json.response(_rejection(rejected).anthropic_body(), status=rejected.status)
            return web.Response(body=rejected.body, status=rejected.status, content_type="application/json")


def base_url(url: str, execution: str, role: str = "main") -> str:
    """The OpenAI base URL of ``execution`` at the gateway listening on ``url``."""
    return f"{url}/x/{execution}/v1" if role == "main" else f"{url}/x/{execution}/{role}/v1"


def _port(site: web.TCPSite) -> int:
    return site._server.sockets[0].getsockname()[1]  # the real port when asked for port 0


def _check_key_headers(request: web.Request) -> None:
    # aiohttp hands on bytes that are not UTF-8 as lone surrogates, which no key comparison can
    # read; such a header is the client's mistake, not the gateway's.
    for name in _KEY_HEADERS:
        try:
            request.headers.get(name, "").encode()
        except UnicodeEncodeError as exc:
            raise bad_request(f"The {name} header is not UTF-8 text.", param=name) from exc


async def _read(request: web.Request) -> bytes:
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise GatewayError(413, f"The request body is larger than {request.app._client_max_size} bytes.",
                           code="request_too_large") from exc


async def _sse(request: web.Request, events: AsyncIterator[bytes], *, done: bool,
               error_event: Callable[[GatewayError], bytes]) -> web.StreamResponse:
    """Streams ``events``; errors before the first event become ordinary HTTP errors, later
    ones an ``error_event`` (what OpenAI and Anthropic streams send), since the status line is
    already out; the stream then ends as usual."""
    response: web.StreamResponse | None = None
    async with contextlib.aclosing(events):
        try:
            async for event in events:
                if response is None:
                    response = web.StreamResponse(headers=_SSE_HEADERS)
                    await response.prepare(request)
                await response.write(event)
        except GatewayError as err:
            if response is None:
                raise
            await response.write(error_event(err))
        except UpstreamRejected as rejected:
            if response is None:
                raise
            await response.write(error_event(_rejection(rejected)))
    if response is None:  # a stream with no events at all
        response = web.StreamResponse(headers=_SSE_HEADERS)
        await response.prepare(request)
    if done:
        await response.write(encode(DONE))
    await response.write_eof()
    return response


def _openai_error_event(err: GatewayError) -> bytes:
    return encode(err.openai_body())


def _anthropic_error_event(err: GatewayError) -> bytes:
    return encode(err.anthropic_body(), "error")


def _rejection(rejected: UpstreamRejected) -> GatewayError:
    return GatewayError(rejected.status, _upstream_message(rejected.body))


def _upstream_message(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return body.decode(errors="replace")
