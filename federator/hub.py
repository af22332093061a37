"""The hub process: wires store + API + controllers into one aiohttp app.

It must never import federator.sim: the hub cannot tell a simulator from a
real cluster; only the CLI starts both.
"""
