"""The live box log: what followers read while a box prints, and the bounds on disk."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

from impyard.box.watch.livelog import (
    MARKER,
    HeadTailWriter,
    LogReader,
    live_dir,
)
from impyard.common.textsafe import StreamEscaper, escape_text

HEAD, TAIL, SEGMENT = 1000, 3000, 512


def stream_of(size: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.randrange(32, 127) for _ in range(size))


def drain(reader: LogReader) -> bytes:
    out = b""
    while not reader.ended:
        chunks = reader.read()
        out += b"".join(chunks)
        if not chunks:
            break
    return out


def disk_bytes(log: Path) -> int:
    files = [log, *live_dir(log).iterdir()]
    return sum(f.stat().st_size for f in files if f.suffix in (".log", ".seg"))


def test_a_follower_reads_every_byte_past_the_head_while_the_box_prints(tmp_path: Path) -> None:
    log = tmp_path / "box.log"
    data = stream_of(20_000)
    writer = HeadTailWriter(log, HEAD, TAIL, SEGMENT)
    reader = LogReader(log)
    seen = b""
    peak = 0
    for start in range(0, len(data), 97):
        writer.write(data[start : start + 97])
        seen += b"".join(reader.read())
        peak = max(peak, disk_bytes(log))
    assert seen == data  # live, past the head bound, nothing skipped or doubled
    assert peak <= HEAD + TAIL + SEGMENT
    kept = writer.close()
    assert kept.truncated and kept.seen_bytes == len(data)
    assert reader.read() == [] and reader.ended
    assert sorted(p.name for p in live_dir(log).iterdir()) == ["end.json", "layout.json"]


def test_the_final_log_keeps_the_head_a_marker_and_the_tail(tmp_path: Path) -> None:
    log = tmp_path / "box.log"
    data = stream_of(10_000)
    writer = HeadTailWriter(log, HEAD, TAIL, SEGMENT)
    writer.write(data)
    writer.close()
    omitted = len(data) - HEAD - TAIL
    marker = MARKER.format(omitted=omitted, head=HEAD, tail=TAIL).encode()
    assert log.read_bytes() == data[:HEAD] + marker + data[-TAIL:]


def test_a_short_log_is_kept_whole_and_read_whole_after_the_end(tmp_path: Path) -> None:
    log = tmp_path / "box.log"
    writer = HeadTailWriter(log, HEAD, TAIL, SEGMENT)
    writer.write(b"tick 1\n")
    writer.write(b"tick 2\n")
    writer.close()
    assert log.read_bytes() == b"tick 1\ntick 2\n"
    assert drain(LogReader(log)) == b"tick 1\ntick 2\n"


def test_a_reader_that_starts_after_the_end_gets_the_final_log_with_its_marker(
    tmp_path: Path,
) -> None:
    log = tmp_path / "box.log"
    data = stream_of(9_000)
    writer = HeadTailWriter(log, HEAD, TAIL, SEGMENT)
    writer.write(data)
    writer.close()
    assert drain(LogReader(log)) == log.read_bytes()


def test_a_reader_behind_the_kept_tail_skips_ahead_and_says_so(tmp_path: Path) -> None:
    log = tmp_path / "box.log"
    data = stream_of(30_000)
    writer = HeadTailWriter(log, HEAD, TAIL, SEGMENT)
    reader = LogReader(log)
    writer.write(data[:500])
    first = b"".join(reader.read())
    writer.write(data[500:])  # the reader sleeps through 29,500 bytes
    rest = drain(reader)
    assert first == data[:500]
    assert b"bytes of box output skipped: the reader fell behind" in rest
    assert rest.endswith(data[-2000:])  # caught up with the live tail
    writer.close()
    assert drain(reader) == b""
    assert reader.ended


def test_a_reader_behind_when_the_log_ends_finishes_with_the_final_tail(tmp_path: Path) -> None:
    log = tmp_path / "box.log"
    data = stream_of(30_000)
    writer = HeadTailWriter(log, HEAD, TAIL, SEGMENT)
    reader = LogReader(log)
    writer.write(data[:1500])  # into the first segment
    assert b"".join(reader.read()) == data[:1500]
    writer.write(data[1500:])
    writer.close()
    rest = drain(reader)
    assert reader.ended
    assert rest.endswith(data[-TAIL:])
    assert b"skipped" in rest
    assert log.read_bytes().endswith(rest[-TAIL:])  # the same final bytes as box.log


def test_followers_in_threads_see_the_same_stream_as_a_writer_in_another(tmp_path: Path) -> None:
    log = tmp_path / "box.log"
    data = stream_of(50_000)
    writer = HeadTailWriter(log, HEAD, 64_000, SEGMENT)  # the tail holds it all: no skip
    results: list[bytes] = []

    def follow() -> None:
        reader = LogReader(log)
        out = b""
        while not reader.ended:
            chunks = reader.read()
            out += b"".join(chunks)
            if not chunks:
                # Idle as the product's followers are: three readers spinning on the
                # interpreter lock starved the writer (over 10 s under a loaded suite).
                time.sleep(0.001)
        results.append(out)

    threads = [threading.Thread(target=follow) for _ in range(3)]
    for thread in threads:
        thread.start()
    for start in range(0, len(data), 333):
        writer.write(data[start : start + 333])
    writer.close()
    for thread in threads:
        thread.join(10)
    assert results == [data, data, data]


def test_a_copy_made_again_after_a_crash_starts_the_log_over(tmp_path: Path) -> None:
    log = tmp_path / "box.log"
    first = HeadTailWriter(log, HEAD, TAIL, SEGMENT)
    first.write(stream_of(5000, seed=1))
    # The host dies here: its files close with the process, segments stay behind.
    first._out.close()
    first._close_segment()
    second = HeadTailWriter(log, HEAD, TAIL, SEGMENT)
    second.write(b"again\n")
    second.close()
    assert log.read_bytes() == b"again\n"
    assert not list(live_dir(log).glob("*.seg"))


def test_the_end_record_is_a_small_json_document(tmp_path: Path) -> None:
    log = tmp_path / "box.log"
    writer = HeadTailWriter(log, HEAD, TAIL, SEGMENT)
    writer.write(stream_of(4500))
    writer.close()
    end = json.loads((live_dir(log) / "end.json").read_text())
    assert end == {
        "seen": 4500,
        "head": HEAD,
        "marker": len(log.read_bytes()) - HEAD - TAIL,
        "tail": TAIL,
    }
    assert os.path.getsize(log) == HEAD + end["marker"] + TAIL


def test_terminal_controls_are_shown_as_escapes_never_sent() -> None:
    hostile = "title \x1b]0;pwned\x07 clear \x1b[2J cr \r bell \x07 c1 \x9b del \x7f\n"
    shown = escape_text(hostile)
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    assert "\x9b" not in shown and "\x7f" not in shown
    assert "\\x1b]0;pwned\\x07" in shown and "\\x1b[2J" in shown
    assert shown.endswith("\n") and "\t" in escape_text("a\tb")


def test_a_stream_split_inside_a_character_or_an_escape_is_shown_the_same() -> None:
    data = "é ☃ \x1b[2J end\n".encode() + b"\xff\xfe"
    whole = StreamEscaper()
    expected = whole.feed(data) + whole.flush()
    pieces = StreamEscaper()
    split = "".join(pieces.feed(data[i : i + 1]) for i in range(len(data))) + pieces.flush()
    assert split == expected
    assert "é ☃ \\x1b[2J end\n" in expected and expected.endswith("\\xff\\xfe")


def test_a_log_written_before_live_logs_is_read_whole_once(tmp_path: Path) -> None:
    log = tmp_path / "box.log"
    data = stream_of(2_500_000)  # more than one read's worth
    log.write_bytes(data)
    reader = LogReader(log)
    assert reader.read() == [] and not reader.started() and reader.legacy()
    assert b"".join(reader.read_whole()) == data
    assert reader.ended and reader.position == len(data)
