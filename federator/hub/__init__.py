"""The hub process and the hub's own API kinds.

`app` wires store + API + controllers into one aiohttp application (the
top layer under the CLI); `kinds` is what the generic API server serves as
the hub's kinds (below the controllers, which read and write them). This
package's `__init__` imports nothing, so a controller importing
`federator.hub.kinds` does not load the process wiring above it.
"""
