"""The master lease in folder storage: conditional writes (create-only, compare-and-swap) that other
processes cannot slip between, the lease's takes, renewals and hand-overs with their epochs, the fence,
and a forged lease refused in one line."""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from xeoncluster.cluster.master_lease import NAME, STALE_SECONDS, LeaseBook, MasterLease
from xeoncluster.cluster.untrusted import Refused
from xeoncluster.providers.aws.spec import AWS
from xeoncluster.storage.base import StaleVersion, StorageLocation, Versioned
from xeoncluster.storage.folder import FolderStorage

A, B, C = "i-0aaaaaaaaaaaaaaaa", "i-0bbbbbbbbbbbbbbbb", "i-0cccccccccccccccc"
ROUNDS, RACERS = 30, 4


def folder(root: Path) -> FolderStorage:
    return FolderStorage(StorageLocation(url=str(root), folder=str(root)))


@pytest.fixture
def storage(tmp_path: Path) -> FolderStorage:
    return folder(tmp_path / "storage")


@pytest.fixture
def book(storage: FolderStorage) -> LeaseBook:
    return LeaseBook(storage, "c1", AWS.instance_id)


def test_write_if_creates_only_what_is_absent(storage: FolderStorage) -> None:
    assert storage.read_versioned("c1/x.json") is None
    version = storage.write_if("c1/x.json", "one", None)
    with pytest.raises(StaleVersion):
        storage.write_if("c1/x.json", "two", None)
    assert storage.read_versioned("c1/x.json") == Versioned("one", version)


def test_write_if_refuses_a_version_since_replaced(storage: FolderStorage) -> None:
    first = storage.write_if("c1/x.json", "one", None)
    second = storage.write_if("c1/x.json", "two", first)
    with pytest.raises(StaleVersion):
        storage.write_if("c1/x.json", "three", first)
    with pytest.raises(StaleVersion):
        storage.write_if("c1/other.json", "three", first)  # a version of an object that is not there
    assert storage.read_versioned("c1/x.json") == Versioned("two", second) and second != first


def test_two_spellings_of_a_key_share_one_lock(storage: FolderStorage) -> None:
    version = storage.write_if("c1/x.json", "one", None)
    with pytest.raises(StaleVersion):
        storage.write_if("c1//./x.json", "two", None)
    assert storage.write_if("c1/./x.json", "two", version)


def test_the_locks_stay_out_of_listings_and_of_the_clusters_folder(storage: FolderStorage) -> None:
    storage.write_if("c1/x.json", "one", None)
    assert [o.key for o in storage.objects("")] == ["c1/x.json"]
    storage.delete(["c1/x.json"])
    assert not (storage.root / "c1").exists()


def test_the_first_take_makes_epoch_1_and_another_node_gets_nothing_while_it_is_fresh(book: LeaseBook) -> None:
    lease = book.take(A, "node0", now=100, stale_after=30)
    assert lease == MasterLease(epoch=1, holder=A, holder_name="node0", renewed_at=100.0)
    assert book.take(B, "node1", now=129, stale_after=30) is None
    assert book.current() == lease


def test_taking_ones_own_lease_renews_it_at_the_same_epoch(book: LeaseBook) -> None:
    book.take(A, "node0", now=100, stale_after=30)
    again = book.take(A, "node0", now=200, stale_after=30)
    assert again is not None and (again.epoch, again.renewed_at) == (1, 200.0)


def test_a_stale_lease_is_taken_at_the_next_epoch_and_its_old_holder_is_fenced(book: LeaseBook) -> None:
    old = book.take(A, "node0", now=100, stale_after=30)
    assert old is not None
    new = book.take(B, "node1", now=131, stale_after=30)
    assert new is not None and (new.epoch, new.holder) == (2, B)
    assert not book.holds(old) and book.holds(new)
    with pytest.raises(StaleVersion, match="no longer holds epoch 1"):
        book.renew(old, now=132)
    assert book.current() == new


def test_a_holder_known_gone_is_taken_from_at_once(book: LeaseBook) -> None:
    book.take(A, "node0", now=100, stale_after=30)
    assert book.take(B, "node1", now=101, stale_after=30, force_from=C) is None
    taken = book.take(B, "node1", now=101, stale_after=30, force_from=A)
    assert taken is not None and (taken.epoch, taken.holder) == (2, B)


def test_renew_keeps_the_epoch_and_hand_over_bumps_it(book: LeaseBook) -> None:
    lease = book.take(A, "node0", now=100, stale_after=30)
    assert lease is not None
    renewed = book.renew(lease, now=110)
    assert (renewed.epoch, renewed.renewed_at) == (1, 110.0) and book.holds(lease)
    successor = book.hand_over(renewed, B, "node1", now=111)
    assert successor == MasterLease(epoch=2, holder=B, holder_name="node1", renewed_at=111.0)
    assert book.holds(successor) and not book.holds(renewed)
    with pytest.raises(StaleVersion):
        book.hand_over(renewed, C, "node2", now=112)
    assert book.current() == successor


def test_a_successor_outside_the_providers_rule_is_refused_before_anything_is_written(book: LeaseBook) -> None:
    lease = book.take(A, "node0", now=100, stale_after=30)
    assert lease is not None
    with pytest.raises(Refused, match="instance id 'xc-a-node1'"):
        book.hand_over(lease, "xc-a-node1", "node1", now=101)
    assert book.current() == lease


@pytest.mark.parametrize(("stored", "says"), [
    ({"epoch": 3, "holder": "i-0abc; reboot", "holder_name": "node1", "renewed_at": 1.0}, "holder"),
    ({"epoch": 3, "holder": "xc-a-node1", "holder_name": "node1", "renewed_at": 1.0}, "instance id 'xc-a-node1'"),
    ({"epoch": 0, "holder": A, "holder_name": "node1", "renewed_at": 1.0}, "epoch"),
    ({"epoch": 3, "holder": A, "holder_name": "../node1", "renewed_at": 1.0}, "holder_name"),
    ({"epoch": 3, "holder": A, "holder_name": "node1", "renewed_at": 1e300}, "renewed_at"),
    ({"epoch": "3", "holder": A, "holder_name": "node1", "renewed_at": 1.0}, "epoch"),
    ("not json\n\x1b[2J", "the lease"),
    ({"epoch": 3, "holder": A, "holder_name": "node1", "renewed_at": 1.0, "pad": "x" * 5000}, "too long"),
])
def test_a_forged_lease_is_refused_in_one_line_naming_where_it_was_read(
        book: LeaseBook, storage: FolderStorage, stored: Any, says: str) -> None:
    storage.put_text(book.key, stored if isinstance(stored, str) else json.dumps(stored))
    with pytest.raises(Refused) as refused:
        book.current()
    line = refused.value.one_line()
    assert len(line.splitlines()) == 1 and line.isprintable()
    assert line.startswith(f"{storage.root / 'c1' / NAME}") and says in line
    with pytest.raises(Refused):
        book.take(B, "node1", now=10**6, stale_after=30)
    assert not book.holds(MasterLease(epoch=3, holder=A, holder_name="node1", renewed_at=1.0))


class AnswerLost(FolderStorage):
    """Writes, then answers as a client that sent the write again would: refused, by its own first copy."""

    def write_if(self, key: str, text: str, version: str | None) -> str:
        super().write_if(key, text, version)
        raise StaleVersion("the retry found the first copy")


def test_a_write_whose_answer_was_lost_stands_when_the_stored_lease_is_it(tmp_path: Path) -> None:
    book = LeaseBook(AnswerLost(StorageLocation(url=str(tmp_path), folder=str(tmp_path))), "c1")
    lease = book.take(A, "node0", now=100, stale_after=30)
    assert lease is not None and book.current() == lease


def contend(root: str, me: int, barrier: Any, results: Any) -> None:
    """One racer: each round every racer takes, with a holder of its own, the lease last written a
    round ago (stale): round 0 races create-only writes, the others compare-and-swap."""
    book = LeaseBook(folder(Path(root)), "c1")
    for round_ in range(ROUNDS):
        barrier.wait(timeout=60)
        won = book.take(f"p{me}-r{round_}", f"node{me}", now=1000.0 * (round_ + 1), stale_after=10)
        results.put((round_, me, won.epoch if won else None))


def test_racing_processes_take_a_stale_lease_exactly_once_per_round(storage: FolderStorage) -> None:
    context = multiprocessing.get_context("spawn")  # no fork of the test runner's threads
    barrier, results = context.Barrier(RACERS), context.Queue()
    racers = [context.Process(target=contend, args=(str(storage.root), n, barrier, results)) for n in range(RACERS)]
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=120) for _ in range(ROUNDS * RACERS)]
    for racer in racers:
        racer.join(timeout=60)
    assert [racer.exitcode for racer in racers] == [0] * RACERS
    winners = {r: [(me, epoch) for round_, me, epoch in outcomes if round_ == r and epoch is not None]
               for r in range(ROUNDS)}
    assert {r: [epoch for _, epoch in won] for r, won in winners.items()} == {r: [r + 1] for r in range(ROUNDS)}
    final = LeaseBook(storage, "c1").current()
    assert final is not None and (final.epoch, final.holder) == (ROUNDS, f"p{winners[ROUNDS - 1][0][0]}-r{ROUNDS - 1}")


YEAR = 365 * 86400.0


def forge(storage: FolderStorage, book: LeaseBook, renewed_at: float, holder: str = C, epoch: int = 4) -> None:
    """A lease written straight to storage: by any node's role, or by an honest node whose clock is off."""
    storage.put_text(book.key, json.dumps({"epoch": epoch, "holder": holder, "holder_name": "node2",
                                           "renewed_at": renewed_at}))


@pytest.mark.parametrize(("taker", "force_from"), [(A, None), (B, None), (B, A)],
                         ids=["the master's renewal", "a take", "a forced takeover"])
def test_a_lease_renewed_a_year_ahead_by_another_holder_is_taken_as_stale(
        storage: FolderStorage, taker: str, force_from: str | None) -> None:
    notes: list[str] = []
    book = LeaseBook(storage, "c1", AWS.instance_id, note=notes.append)
    forge(storage, book, renewed_at=1000 + YEAR)
    taken = book.take(taker, "node0", now=1000, stale_after=STALE_SECONDS, force_from=force_from)
    assert taken is not None and (taken.epoch, taken.holder, taken.renewed_at) == (5, taker, 1000.0)
    assert book.holds(taken) and book.renew(taken, now=1010).renewed_at == 1010.0
    [line] = notes
    assert f"renewed {YEAR:.0f} s in the future (by node2, {C}): taken as stale" in line


def test_a_holder_renews_its_own_lease_from_the_future_at_its_epoch(storage: FolderStorage) -> None:
    notes: list[str] = []
    book = LeaseBook(storage, "c1", AWS.instance_id, note=notes.append)
    forge(storage, book, renewed_at=1000 + YEAR, holder=A)
    renewed = book.take(A, "node2", now=1000, stale_after=STALE_SECONDS)
    assert renewed is not None and (renewed.epoch, renewed.renewed_at) == (4, 1000.0) and notes == []


def test_a_lease_a_few_seconds_ahead_is_an_honest_clock_and_is_kept_until_stale(storage: FolderStorage) -> None:
    notes: list[str] = []
    book = LeaseBook(storage, "c1", AWS.instance_id, note=notes.append)
    forge(storage, book, renewed_at=1005)
    assert book.take(B, "node1", now=1000, stale_after=30) is None
    assert book.take(B, "node1", now=1035, stale_after=30) is None
    taken = book.take(B, "node1", now=1036, stale_after=30)
    assert taken is not None and taken.epoch == 5 and notes == []
