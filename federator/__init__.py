"""federator: a multi-cluster federation controller for ML training gangs.

The hub places each whole gang (parameter servers plus workers) into one member
cluster and delegates it to that cluster's own gang scheduler. See README.md.
"""

__version__ = "0.1.0"
