"""Routing policy and the server state machine, as pure functions."""

import asyncio

import pytest

from gyrectl.gateway.lifecycle import ServerEvent, ServerState, Transition, transition
from gyrectl.gateway.pool import ServerPool
from gyrectl.gateway.routing import ServerView, choose_server

A, D, X = ServerState.ACTIVE, ServerState.DRAINING, ServerState.DOWN


def view(name, inflight, state=A):
    return ServerView(name, f"http://{name}", state, inflight)


def test_least_loaded_without_history():
    assert choose_server([view("a", 3), view("b", 1), view("c", 2)], sticky=None) == "b"


def test_sticky_until_the_slack_is_used_up():
    servers = [view("a", 5), view("b", 1)]
    assert choose_server(servers, sticky="a", sticky_slack=4) == "a"
    assert choose_server(servers, sticky="a", sticky_slack=3) == "b"


def test_only_active_and_not_excluded():
    servers = [view("a", 0, D), view("b", 9, X), view("c", 7)]
    assert choose_server(servers, sticky="a") == "c"
    assert choose_server(servers, sticky=None, exclude={"c"}) is None


@pytest.mark.parametrize(("state", "event", "inflight", "pinned", "expected"), [
    (A, ServerEvent.DRAIN, 0, 0, Transition(None)),
    (A, ServerEvent.DRAIN, 2, 0, Transition(D)),
    (D, ServerEvent.CALL_ENDED, 1, 0, Transition(D)),
    (D, ServerEvent.CALL_ENDED, 0, 0, Transition(None)),
    (D, ServerEvent.GRACE_EXPIRED, 2, 0, Transition(None, cancel_calls=True)),
    (D, ServerEvent.GRACE_EXPIRED, 2, 1, Transition(D, cancel_calls=True)),
    (D, ServerEvent.GRACE_EXPIRED, 1, 1, Transition(D, cancel_calls=False)),
    (A, ServerEvent.REMOVE, 3, 1, Transition(None, cancel_calls=True)),
    (A, ServerEvent.FAILED, 3, 0, Transition(X)),
    (D, ServerEvent.FAILED, 3, 0, Transition(D)),
    (A, ServerEvent.CALL_ENDED, 0, 0, Transition(A)),
])
def test_transitions(state, event, inflight, pinned, expected):
    assert transition(state, event, num_inflight=inflight, num_pinned=pinned) == expected


def test_pool_drain_cancels_movable_calls_after_grace():
    async def scenario():
        pool = ServerPool(drain_grace_s=0.01)
        pool.add("a", "http://a")
        pool.add("b", "http://b")
        movable = await pool.acquire("e1")
        pinned = await pool.acquire("e1", movable=False)
        assert movable.server == pinned.server == "a"  # sticky
        pool.drain("a")
        elsewhere = await pool.acquire("e1")
        assert elsewhere.server == "b"  # drained: no new calls
        await asyncio.sleep(0.05)
        assert movable.cancelled and not pinned.cancelled
        pool.release(movable)  # the cancelled call moves on; the pinned one still holds "a"
        assert [v.name for v in pool.views()] == ["a", "b"]
        pool.release(pinned)
        return [v.name for v in pool.views()]
    assert asyncio.run(scenario()) == ["b"]


def test_pool_waits_for_a_server_then_503():
    async def scenario():
        pool = ServerPool(server_wait_s=1.0)
        later = asyncio.get_running_loop().call_later(0.05, pool.add, "a", "http://a")
        lease = await pool.acquire("e")
        later.cancel()
        pool.remove("a")
        empty = ServerPool(server_wait_s=0.05)
        with pytest.raises(Exception) as caught:
            await empty.acquire("e")
        return lease.server, caught.value.status
    assert asyncio.run(scenario()) == ("a", 503)
