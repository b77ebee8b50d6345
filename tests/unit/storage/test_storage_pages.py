"""The scratch page store: pages read back, freed pages give their space back, and
nothing of an earlier run survives opening."""

from __future__ import annotations

from pathlib import Path

from warren.storage.pages import PageStore


def test_pages_read_back_and_files_go_when_their_pages_are_freed(tmp_path: Path) -> None:
    store = PageStore.open(tmp_path / "pages", file_max_bytes=100)
    refs = [store.write(b"page %02d " % n * 3) for n in range(10)]  # 24 bytes each
    assert [store.read(ref) for ref in refs] == [b"page %02d " % n * 3 for n in range(10)]
    assert store.files == 3 and store.live_pages == 10
    for ref in refs[:8]:  # the first two files empty out and are deleted
        store.free(ref)
    assert store.files == 1 and len(list((tmp_path / "pages").iterdir())) == 1
    for ref in refs[8:]:  # the file being written is kept and written over from its start
        store.free(ref)
    assert store.live_pages == 0 and store.files == 1
    again = store.write(b"again")
    assert (again.offset, store.read(again)) == (0, b"again")
    store.close()


def test_a_page_larger_than_a_file_gets_a_file_of_its_own(tmp_path: Path) -> None:
    store = PageStore.open(tmp_path / "pages", file_max_bytes=10)
    small, large = store.write(b"small"), store.write(b"x" * 50)
    assert small.file_id != large.file_id and store.read(large) == b"x" * 50
    store.close()


def test_opening_forgets_pages_of_an_earlier_run(tmp_path: Path) -> None:
    first = PageStore.open(tmp_path / "pages")
    first.write(b"left behind by a crash")
    second = PageStore.open(tmp_path / "pages")
    assert second.live_pages == 0 and list((tmp_path / "pages").iterdir()) == []
    second.close()
