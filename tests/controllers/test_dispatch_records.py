"""The Dispatched record that dispatch (its only writer) writes into a job's status after its member objects
exist: the condition and one history entry per (cluster, epoch)."""

from __future__ import annotations

from federator.controllers.jobs import DispatchRecord, apply_dispatch_record, requeue


def _record(epoch: int = 1, at: float = 1000.0) -> DispatchRecord:
    return DispatchRecord(cluster="c1", epoch=epoch, created=3, existing=0, at=at)


def test_applying_a_record_sets_the_condition_and_history_once() -> None:
    status: dict[str, object] = {}
    record = _record(epoch=4)
    assert apply_dispatch_record(status, record)
    conditions = status["conditions"]
    assert isinstance(conditions, list)
    dispatched = next(c for c in conditions if c["type"] == "Dispatched")
    assert dispatched["status"] == "True" and dispatched["reason"] == "MemberObjectsCreated"
    assert "3 member objects in c1" in dispatched["message"]
    history = status["history"]
    assert isinstance(history, list) and [h["event"] for h in history] == ["Dispatched"]
    assert history[0]["epoch"] == 4 and history[0]["cluster"] == "c1"
    assert not apply_dispatch_record(status, record)  # already recorded: no change, no second entry
    assert len(status["history"]) == 1  # type: ignore[arg-type]


def test_a_dispatch_at_a_new_epoch_into_the_same_cluster_is_recorded_too() -> None:
    """A gang requeued from a cluster and placed back into it at epoch + 1, with as many objects, was
    recorded once only (chaos seed 2061632721: history Placed#2 Admitted#2 with no Dispatched#2): the
    condition's message did not change, so nothing did."""
    status: dict[str, object] = {}
    assert apply_dispatch_record(status, _record(epoch=1))
    assert apply_dispatch_record(status, _record(epoch=2, at=1010.0))
    history = status["history"]
    assert isinstance(history, list)
    assert [(h["event"], h["epoch"]) for h in history] == [("Dispatched", 1), ("Dispatched", 2)]


def test_the_entry_goes_before_what_status_sync_recorded_of_the_same_placement_first() -> None:
    """A real member scheduled a one-pod gang, and status sync wrote Admitted and Running, before dispatch wrote
    its record (a loaded run of e2e/kube/test_same_scenario.py): history still reads Placed, Dispatched, Admitted,
    Running. Entries of another placement stay where they are."""
    status: dict[str, object] = {"history": [
        {"event": "Admitted", "cluster": "c1", "epoch": 1},
        {"event": "Placed", "cluster": "c1", "epoch": 2},
        {"event": "Admitted", "cluster": "c1", "epoch": 2},
        {"event": "Running", "cluster": "c1", "epoch": 2},
    ]}
    assert apply_dispatch_record(status, _record(epoch=2))
    history = status["history"]
    assert isinstance(history, list)
    assert [(h["event"], h["epoch"]) for h in history] == [
        ("Admitted", 1), ("Placed", 2), ("Dispatched", 2), ("Admitted", 2), ("Running", 2)]


def test_the_record_says_the_mode_and_a_new_placement_drops_it() -> None:
    """How the member runs the gang goes on the twin with the dispatch (status.placement.mode, the Mode column):
    operator when dispatch created the member copy, render when it rendered the pods; a requeue drops it."""
    status: dict[str, object] = {"placement": {"cluster": "c1", "epoch": 1}}
    assert apply_dispatch_record(status, DispatchRecord(cluster="c1", epoch=1, created=2, existing=0, at=1.0,
                                                        mode="operator"))
    assert status["placement"] == {"cluster": "c1", "epoch": 1, "mode": "operator"}
    assert "operator mode" in status["history"][-1]["message"]  # type: ignore[index]
    requeue(status, reason="ClusterLost", message="lost", now=2.0, job="default/j")
    assert "mode" not in status["placement"]  # type: ignore[operator]
    assert apply_dispatch_record(status, _record(epoch=2))
    assert status["placement"]["mode"] == "render"  # type: ignore[index]
