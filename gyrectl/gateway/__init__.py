"""The OpenAI-compatible gateway between black-box agent harnesses and the rollout servers.

It records every call token-in/token-out, routes calls over a server set that changes at run
time, and hides drained, removed or dead servers from the harness. See ``docs/gateway.md``.

Runbook (a gateway in front of one local vLLM server)::

    gw = Gateway(GatewaySettings(token=run.token(), admin_token=run.admin_token(),
                                 server_key=run.server_key(), models=("tiny",)), sink=JsonlCallSink(path))
    await gw.start()
    gw.pool.add("node1", "http://127.0.0.1:8100", weight_version=0)
    # harness: OPENAI_BASE_URL=gw.base_url("exec-17"), OPENAI_API_KEY=run.token() (the client token)
    gw.pool.drain("node1")        # node1 leaves rollout; its calls move or finish
    await gw.stop()

Several processes behind one port: ``processes.GatewayProcesses`` (the head drives either through
``control.GatewayControl``).

May import: run, store, capture.
"""

from gyrectl.gateway.app import Gateway
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.gateway.sink import CallSink, JsonlCallSink

__all__ = ["CallSink", "Gateway", "GatewaySettings", "JsonlCallSink"]
