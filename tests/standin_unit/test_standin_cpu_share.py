"""Each container of the stand-in gets its own CPU, spread over the machine's."""
from __future__ import annotations

from xeoncluster.standin.cpu_share import least_used_cpu


def test_containers_spread_over_the_cpus_before_any_shares_one() -> None:
    taken: list[int] = []
    for _ in range(5):
        taken.append(least_used_cpu(taken, allowed=[0, 1]))
    assert taken == [0, 1, 0, 1, 0]


def test_a_cpu_freed_by_a_terminated_container_is_the_next_one_used() -> None:
    assert least_used_cpu([0, 1, 1, 2], allowed=[0, 1, 2, 3]) == 3
    assert least_used_cpu([0, 1, 1, 2, 3], allowed=[0, 1, 2, 3]) == 0


def test_only_cpus_this_process_may_run_on_are_handed_out() -> None:
    assert least_used_cpu([], allowed=[6, 7]) == 6
