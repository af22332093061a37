"""The hub's revisioned store: one protocol (protocol.py), three backends
(memory.py, sqlite.py, etcd.py), and leader election on leases (leader.py).
`open_store(url)` is the one way to get a backend from a URL."""
