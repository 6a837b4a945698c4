"""The proof that the suite reaches no network: `just test` runs it in a network namespace of its own.

`just test` starts pytest under `unshare -rn` with loopback brought up and RAG_OFFLINE=1 set; this
test checks, without sending a packet anywhere, that the namespace is in effect: the only network
interface the tests can see is loopback. Loopback servers in tests (the LLM stand-in) still work.
"""

from __future__ import annotations

import os
import socket

import pytest


@pytest.mark.skipif(os.environ.get("RAG_OFFLINE") != "1", reason="runs under `just test` (a network namespace of its own)")
def test_the_suite_sees_no_network_but_loopback():
    names = sorted(name for _, name in socket.if_nameindex())
    assert names == ["lo"], f"network interfaces visible to the tests: {names}"
    with socket.create_server(("127.0.0.1", 0)) as server:  # loopback is up
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
