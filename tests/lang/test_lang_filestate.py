"""`lang.usercode.filestate`: a cached result holds while the files it looked at are as they were, and is never
reused while one of them was written too recently to tell a rewrite from no change."""

import os
import time

from srpo_dsl.lang.usercode.filestate import FileCache, look, recording


def test_a_result_is_reused_only_while_its_settled_files_are_unchanged(tmp_path):
    path, missing = tmp_path / "a.txt", tmp_path / "b.txt"
    path.write_text("one")
    cache: FileCache[str] = FileCache(4)
    computed = []

    def compute() -> str:
        computed.append(1)
        look(missing)
        return path.read_text() if look(path).is_file else "none"

    assert [cache.get("k", compute) for _ in range(2)] == ["one", "one"]
    assert len(computed) == 2  # just written: a same-size rewrite in the same tick would change nothing
    long_ago = time.time_ns() - 60 * 10**9
    os.utime(path, ns=(long_ago, long_ago))
    assert [cache.get("k", compute) for _ in range(2)] == ["one", "one"] and len(computed) == 3
    with recording() as reads:  # a hit hands on the states it depends on, for the server to watch
        cache.get("k", compute)
    assert set(reads) == {path, missing} and len(computed) == 3
    missing.write_text("now here")
    cache.get("k", compute)
    assert len(computed) == 4
    path.unlink()
    assert cache.get("k", compute) == "none"
