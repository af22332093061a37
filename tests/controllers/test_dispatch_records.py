"""DispatchRecords: dispatch hands its Dispatched record to status sync, which writes it with the gang's
next status write; without a consumer, dispatch writes it itself."""

from __future__ import annotations

from federator.controllers.jobs import DispatchRecord, DispatchRecords, apply_dispatch_record


def _record(epoch: int = 1, at: float = 1000.0) -> DispatchRecord:
    return DispatchRecord(cluster="c1", epoch=epoch, created=3, existing=0, at=at)


def test_without_a_consumer_a_record_is_refused() -> None:
    records = DispatchRecords()
    assert records.add("u1", _record()) is False  # dispatch then writes it itself
    assert len(records) == 0


def test_a_consumer_is_told_and_the_record_kept_until_done() -> None:
    records = DispatchRecords()
    told: list[str] = []
    records.subscribe(told.append)
    first = _record(epoch=1)
    assert records.add("u1", first)
    assert told == ["u1"]
    assert records.get("u1", now=1001.0) is first
    newer = _record(epoch=2, at=1002.0)
    records.add("u1", newer)
    records.done("u1", first)  # an older record's write never drops a newer one
    assert records.get("u1", now=1003.0) is newer
    records.done("u1", newer)
    assert records.get("u1", now=1003.0) is None


def test_records_expire_and_are_forgotten_with_their_job() -> None:
    records = DispatchRecords()
    records.subscribe(lambda _uid: None)
    records.add("u1", _record(at=1000.0))
    assert records.get("u1", now=1000.0 + DispatchRecords.TTL_SECONDS + 1) is None
    records.add("u2", _record())
    records.forget("u2")
    assert len(records) == 0


def test_unsubscribed_consumers_get_nothing_more() -> None:
    records = DispatchRecords()
    told: list[str] = []
    records.subscribe(told.append)
    records.unsubscribe(told.append)
    assert records.add("u1", _record()) is False and told == []


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
