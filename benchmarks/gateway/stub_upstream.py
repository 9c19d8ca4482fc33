"""A stub rollout server for gateway benchmarks: answers vLLM's chat route in vLLM's shape (token
ids and logprobs included, as the gateway asks for them), streaming or not, after a delay (the
stub's ``--delay-ms``, or the call's own ``stub_delay_ms`` body field, which the gateway passes on
like any field it does not know), with no model behind it, so what is measured is the gateway and
not an engine.

    python benchmarks/gateway/stub_upstream.py [--delay-ms 0] [--tokens 16]   # prints its URL

A streamed reply sends one chunk per token (the first with the prompt's token ids), at once or,
with the call's ``stub_pause_ms``, one after another with that pause between them (a long call).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web

PROMPT_IDS = list(range(1, 65))


def reply(tokens: int) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": "x" * tokens},
              "token_ids": list(range(100, 100 + tokens)),
              "logprobs": {"content": [{"token": "x", "logprob": -0.5} for _ in range(tokens)]},
              "finish_reason": "stop"}
    return json.dumps({"id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "tiny",
                       "prompt_token_ids": PROMPT_IDS, "choices": [choice],
                       "usage": {"prompt_tokens": len(PROMPT_IDS), "completion_tokens": tokens,
                                 "total_tokens": len(PROMPT_IDS) + tokens}}).encode()


def chunks(tokens: int) -> list[bytes]:
    out = []
    for i in range(tokens):
        chunk = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "tiny",
                 "choices": [{"index": 0, "delta": {"content": "x"}, "token_ids": [100 + i],
                              "logprobs": {"content": [{"token": "x", "logprob": -0.5}]},
                              "finish_reason": "stop" if i == tokens - 1 else None}]}
        if i == 0:
            chunk["prompt_token_ids"] = PROMPT_IDS
        out.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    return out + [b"data: [DONE]\n\n"]


def app(*, delay_s: float, tokens: int) -> web.Application:
    body, pieces = reply(tokens), chunks(tokens)
    events = b"".join(pieces)

    async def chat(request: web.Request) -> web.StreamResponse:
        body_in = await request.json()
        delay = body_in.get("stub_delay_ms", delay_s * 1000) / 1000
        if delay:
            await asyncio.sleep(delay)
        stream = body_in.get("stream")
        if not stream:
            return web.Response(body=body, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        pause = body_in.get("stub_pause_ms", 0) / 1000
        if not pause:
            await response.write(events)
        for i, piece in enumerate(pieces if pause else ()):  # a long call: a pause before each chunk but the first
            if i:
                await asyncio.sleep(pause)
            await response.write(piece)
        await response.write_eof()
        return response

    application = web.Application()
    application.router.add_post("/v1/chat/completions", chat)
    return application


async def serve(port: int, delay_s: float, tokens: int) -> None:
    runner = web.AppRunner(app(delay_s=delay_s, tokens=tokens), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=4096)
    await site.start()
    print(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.delay_ms / 1000, args.tokens))
