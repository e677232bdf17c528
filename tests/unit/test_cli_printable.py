"""The command line's printable form, file names from server data, and its bounded collectors."""

from __future__ import annotations

import asyncio
import io
import random
import sys
import unicodedata
from contextlib import redirect_stdout

import pytest
from rich.console import Console

from aiojetstream import PubAck
from aiojetstream.cli._bench import BenchResult, LatencySample
from aiojetstream.cli._common import (
    Output,
    describe_error,
    kv_table,
    printable,
    printable_text,
    safe_file_name,
)
from aiojetstream.cli._messages import AckWindow, DescriptionColumn

#: Characters a terminal shows as they are: tab, and the joiners scripts and emoji need.
KEPT = {"\t", "\u200c", "\u200d"}


def unprintable_characters() -> list[str]:
    """Every control, format, separator and surrogate code point of this Python's Unicode."""
    return [
        chr(code)
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in ("Cc", "Cf", "Zl", "Zp", "Cs")
        and chr(code) not in KEPT
    ]


def test_every_control_and_format_character_is_escaped() -> None:
    missed = [f"U+{ord(c):04X}" for c in unprintable_characters() if printable(c) == c]
    assert missed == []
    body = [c for c in unprintable_characters() if c != "\n"]
    assert [f"U+{ord(c):04X}" for c in body if printable(c, lines=True) == c] == []
    for char in KEPT:
        assert printable(char) == char


@pytest.mark.parametrize(
    ("text", "line", "body"),
    [
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07", "\\x1b]0;title\\x07"),
        ("a\x00b\x7f\x9bc", "a\\x00b\\x7f\\x9bc", "a\\x00b\\x7f\\x9bc"),
        ("ok\rEVIL", "ok\\rEVIL", "ok\\rEVIL"),
        ("one\ntwo\r\nthree\r", "one\\ntwo\\r\\nthree\\r", "one\ntwo\r\nthree\\r"),
        ("abc\u202edef\u2066", "abc\\u202edef\\u2066", "abc\\u202edef\\u2066"),
        ("tag\U000e0041", "tag\\U000e0041", "tag\\U000e0041"),
        ("lone\ud800", "lone\\ud800", "lone\\ud800"),
        ("tab\tkept é 日本 👨\u200d👩 [bold]x[/bold] \\x1b", None, None),
    ],
)
def test_printable_forms(text: str, line: str | None, body: str | None) -> None:
    assert printable(text) == (text if line is None else line)
    assert printable(text, lines=True) == (text if body is None else body)


def test_payloads_other_bytes_as_hex() -> None:
    assert printable_text(b"bin\xff\x00\r\x07end\n2") == "bin\\xff\\x00\\r\\x07end\n2"
    assert printable_text(b"a\nb", lines=False) == "a\\nb"


def test_file_names_from_server_data() -> None:
    assert safe_file_name("a\x1b]0;t\x07\t\u202eb.txt") == "a_]0;t___b.txt"
    assert safe_file_name("plain name.txt") == "plain name.txt"


def test_errors_are_one_printable_line() -> None:
    text = describe_error(ValueError("bad\x1b[2J name\r\nnext \u202eline"))
    assert text == "bad\\x1b[2J name next \\u202eline"


def test_output_escapes_lines_tables_and_notes(capsys: pytest.CaptureFixture[str]) -> None:
    out = Output(False)
    out.print("name \x1b[2J\nforged line")
    out.body(b"first\x07\nsecond")
    out.table(kv_table("Title \x1b]0;t\x07", [("Description", "[bold]d[/bold] \x1b[31m\x00")]))
    out.note("Deleted \x1b[2J\u202e.")
    captured = capsys.readouterr()
    assert captured.out.startswith("name \\x1b[2J\\nforged line\nfirst\\x07\nsecond\n")
    assert "Title \\x1b]0;t\\x07" in captured.out
    assert "[bold]d[/bold] \\x1b[31m\\x00" in captured.out  # no markup, no control
    assert captured.err == "Deleted \\x1b[2J\\u202e.\n"
    assert "\x1b" not in captured.out + captured.err


def test_progress_description_is_escaped() -> None:
    from rich.progress import Progress

    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    with Progress(DescriptionColumn(), console=console) as progress:
        task = progress.add_task("Fetching \x1b]0;t\x07[bold]x", total=1)
        text = DescriptionColumn().render(progress.tasks[task])
    assert text.plain == "Fetching \\x1b]0;t\\x07[bold]x"


def test_latency_sample_is_bounded() -> None:
    sample = LatencySample(size=100, rng=random.Random(7))
    for n in range(50):
        sample.add(float(n))
    assert sample.values == [float(n) for n in range(50)]  # all of them, up to the size
    for n in range(50, 100_000):
        sample.add(float(n))
    assert len(sample.values) == 100
    assert sample.seen == 100_000
    assert sample.largest == 99_999.0
    # A uniform sample: its median is near the middle.
    assert 25_000 < sorted(sample.values)[50] < 75_000
    result = BenchResult.sampled("pub", 100_000, 1, 1.0, sample, "ack latency").as_dict()
    assert result["ack_latency_ms"]["max"] == 99_999.0  # exact, though not in the sample


def test_ack_window_keeps_no_future_and_stops_at_the_first_failure() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        window = AckWindow()
        acks: list[int] = []
        futures = [loop.create_future() for _ in range(3)]
        for fut in futures:
            window.track(fut, lambda ack: acks.append(ack.seq))
        futures[0].set_result(PubAck(stream="S", seq=1))
        futures[1].set_exception(RuntimeError("full"))
        futures[2].set_exception(RuntimeError("later"))
        await asyncio.sleep(0)  # the done callbacks run
        kept = [v for v in vars(window).values() if isinstance(v, list | dict | asyncio.Future)]
        assert kept == []  # counts and the first error only
        assert acks == [1]
        assert window.outstanding == 0
        with pytest.raises(RuntimeError, match="full"):
            window.check()
        with pytest.raises(RuntimeError, match="full"):
            await window.wait()

    asyncio.run(main())


def test_ack_window_wait_returns_once_all_are_acknowledged() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        window = AckWindow()
        await window.wait()  # nothing outstanding
        fut: asyncio.Future[PubAck] = loop.create_future()
        window.track(fut, lambda ack: None)
        loop.call_soon(fut.set_result, PubAck(stream="S", seq=1))
        await asyncio.wait_for(window.wait(), 5)

    asyncio.run(main())


def test_ack_window_keeps_a_failing_callback_s_error_and_wakes_its_waiter() -> None:
    """A callback that raised while wait() waited left wait() waiting for good (its
    error only reached asyncio's log): it is the window's error now."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        window = AckWindow()
        fut: asyncio.Future[PubAck] = loop.create_future()

        def broken(ack: PubAck) -> None:
            raise ValueError("the callback failed")

        window.track(fut, broken)
        loop.call_soon(fut.set_result, PubAck(stream="S", seq=1))
        with pytest.raises(ValueError, match="the callback failed"):
            await asyncio.wait_for(window.wait(), 5)
        assert window.outstanding == 0

    asyncio.run(main())


def test_redirected_output_is_escaped_too() -> None:
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        Output(False).print("\x1b[2J")
    assert buffer.getvalue() == "\\x1b[2J\n"
