"""Process runtime shared by the hub, the simulator and the agent: background
loops as named, supervised tasks (`tasks`), waiting on events without
swallowing cancellation (`waits`) and the garbage collector's settings for
long-running servers (`gcpolicy`). Imports nothing of federator but the
logger (`federator.obs`; the import-linter contract `runtime-bottom`).
"""
