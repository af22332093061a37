"""Fencing: what keeps a gang from running in two clusters at once.

- `hublease`: the hub's Lease in each member cluster, renewed while in
  contact, and the moment after which any copy left in an unreachable
  member is dead (`fenced_after`);
- `agent`: the member-side fence agent that deletes this hub's objects once
  that Lease stops being renewed.
The hub-side checks that act on these (dispatch refusing a member whose agent
may be fencing, the GC's epoch fence) live with the controllers that do the
writes; docs/failover.md is the whole story. This package never writes hub
objects.
"""
