"""The board the workers of a node share: connection_max and memory counted for the node."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from warren.runtime.workers.board import BOARD_VARIABLE, Board


@pytest.fixture
def boards() -> Iterator[tuple[Board, Board, Board]]:
    """The supervisor's board and the views of workers 0 and 1 (as inherited)."""
    supervisor = Board.create(2)
    first, second = (
        Board.inherited({BOARD_VARIABLE: str(os.dup(supervisor.fd))}, 2, index) for index in (0, 1)
    )
    assert first is not None and second is not None
    yield supervisor, first, second
    for board in (supervisor, first, second):
        board.close()


def test_a_node_of_one_has_no_board() -> None:
    assert Board.inherited({}, 1, 0) is None


def test_connection_max_is_the_nodes_whichever_worker_admits(
    boards: tuple[Board, Board, Board],
) -> None:
    _, first, second = boards
    assert first.admit(3) and second.admit(3) and first.admit(3)
    assert not second.admit(3) and not first.admit(3)
    second.left()
    assert first.admit(3)
    assert first.connections() == second.connections() == 3


def test_a_handed_connection_is_counted_without_the_check(
    boards: tuple[Board, Board, Board],
) -> None:
    _, first, second = boards
    assert first.admit(1)
    second.count()  # first hands it to second, then uncounts it
    first.left()
    assert second.connections() == 1 and not second.admit(1)


def test_no_limit_admits_and_still_counts(boards: tuple[Board, Board, Board]) -> None:
    _, first, _ = boards
    assert all(first.admit(0) for _ in range(5))
    assert first.connections() == 5


def test_memory_is_the_sum_over_the_workers(boards: tuple[Board, Board, Board]) -> None:
    _, first, second = boards
    assert first.report_memory(300) == 300
    assert second.report_memory(500) == 800
    assert first.report_memory(100) == 600


def test_a_worker_that_exited_counts_no_more(boards: tuple[Board, Board, Board]) -> None:
    supervisor, first, second = boards
    assert first.admit(2) and first.admit(2)
    first.report_memory(1000)
    second.report_memory(10)
    supervisor.clear(0)
    assert (second.connections(), second.memory()) == (0, 10)
    assert second.admit(2)
