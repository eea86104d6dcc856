"""The resident wire over real loopback sockets: items arrive in order whichever thread
writes them, a sender never blocks on a peer that does not read, and what cannot be sent
loses the connection, named."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from drpc.executors.resident.transport import Node, TransportError
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"


class Peer:
    """A node and what reached it."""

    def __init__(self, index: int, token: bytes) -> None:
        self.items: list[Any] = []
        self.lost: list[tuple[int, str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.node = Node(index, token, self._on_items, self._on_lost)

    def _on_items(self, peer: int, items: list[Any]) -> None:
        self.gate.wait()
        self.items.extend(items)

    def _on_lost(self, peer: int, reason: str) -> None:
        self.lost.append((peer, reason))


@pytest.fixture
def pair() -> Iterator[tuple[Peer, Peer]]:
    token = secrets.token_bytes(32)
    driver, worker = Peer(0, token), Peer(1, token)
    address = driver.node.listen(HOST)
    worker.node.listen(HOST)
    worker.node.connect(0, address)
    assert driver.node.wait_for_peers([1], 10) and worker.node.wait_for_peers([0], 10)
    try:
        yield driver, worker
    finally:
        worker.gate.set()
        driver.gate.set()
        worker.node.close()
        driver.node.close()


def test_items_from_many_threads_arrive_once_each_in_each_senders_order(
    pair: tuple[Peer, Peer],
) -> None:
    driver, worker = pair
    senders, count = 4, 3000

    def send(sender: int) -> None:
        for n in range(count):
            assert worker.node.send(0, (sender, n))

    threads = [threading.Thread(target=send, args=(s,)) for s in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_until(lambda: len(driver.items) == senders * count, 20, "every item")
    for sender in range(senders):
        assert [n for s, n in driver.items if s == sender] == list(range(count))
    assert driver.lost == [] and worker.lost == []


def test_a_sender_never_blocks_on_a_peer_that_does_not_read(pair: tuple[Peer, Peer]) -> None:
    """A frame larger than the sockets' buffers, to a peer whose reader is held: the
    calling thread writes what the socket takes and leaves the rest to the writer
    thread, so the sends return; once the peer reads, everything arrives in order."""
    driver, worker = pair
    driver.gate.clear()
    assert worker.node.send(0, "first")
    wait_until(lambda: not driver.gate.is_set(), 5)  # the reader holds "first"
    big = b"x" * (32 * 1024 * 1024)
    returned = threading.Event()

    def send_more() -> None:
        worker.node.send(0, big)
        for n in range(100):
            worker.node.send(0, n)
        returned.set()

    sender = threading.Thread(target=send_more, daemon=True)
    sender.start()
    assert returned.wait(20), "a send blocked on the peer that does not read"
    driver.gate.set()
    wait_until(lambda: len(driver.items) == 102, 30, "every item once the peer reads")
    assert driver.items[0] == "first" and driver.items[1] == big
    assert driver.items[2:] == list(range(100))


def test_an_item_that_cannot_be_sent_loses_the_connection_naming_why(
    pair: tuple[Peer, Peer],
) -> None:
    driver, worker = pair
    worker.node.send(0, threading.Lock())  # cannot be pickled
    wait_until(lambda: worker.lost != [], 10, "the connection lost")
    [(peer, reason)] = worker.lost
    assert peer == 0 and reason.startswith("sending failed: TypeError")
    assert 0 not in worker.node.peers()
    wait_until(lambda: driver.lost != [], 10, "the peer sees the end")


class SlowGreeter(Node):
    """A node that takes its time adding an accepted connection (a busy process)."""

    def _add(self, peer: int, sock: socket.socket, welcome: bool = False) -> None:
        if welcome:
            time.sleep(0.3)
        super()._add(peer, sock, welcome)


def test_connect_returns_once_the_peer_can_send_back() -> None:
    """A task says it is ready right after connecting to its peers: by then each of them
    must be able to send to it, or what they send it first is dropped."""
    token = secrets.token_bytes(32)
    earlier = Peer(1, token)
    earlier.node = SlowGreeter(1, token, earlier._on_items, earlier._on_lost)
    later = Peer(2, token)
    try:
        address = earlier.node.listen(HOST)
        later.node.connect(1, address)
        assert earlier.node.peers() == [2]  # at once: no waiting
        assert earlier.node.send(2, "first")
        wait_until(lambda: later.items == ["first"], 10, "the first item")
    finally:
        later.node.close()
        earlier.node.close()


def test_a_connect_with_another_deployment_s_token_fails_naming_the_peer() -> None:
    listening = Peer(1, secrets.token_bytes(32))
    stranger = Peer(2, secrets.token_bytes(32))
    try:
        host, port = listening.node.listen(HOST)
        with pytest.raises(TransportError, match=f"resident node 1 at {host}:{port} closed"):
            stranger.node.connect(1, (host, port))
        assert listening.node.peers() == [] and stranger.node.peers() == []
    finally:
        stranger.node.close()
        listening.node.close()
