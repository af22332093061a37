"""`free_port`: ports for processes started next (etcd members) come from below the kernel's ephemeral
range, so an outgoing connection cannot take one between the pick and the listener's bind."""

from __future__ import annotations

import socket

from federator.store.etcd_process import _ephemeral_range, free_port


def test_free_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low, _ = _ephemeral_range()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(10000 <= p < low for p in ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", ports[-1]))

