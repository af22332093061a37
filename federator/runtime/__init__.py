"""Process runtime shared by the hub, the simulator and the agent: waiting
on events without swallowing cancellation (`waits`) and the garbage
collector's settings for long-running servers (`gcpolicy`). Imports nothing
of federator above the standard library and the logger.
"""
