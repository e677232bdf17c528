"""CLI errors that name what is wrong and how to fix it (issue 26), against a real nats-server.

A missing stream, consumer or bucket offers the closest names the server has;
a value the library refuses as written (a name, key or subject) is a usage
error (exit 2) naming its parameter; a per-key TTL the server stretches is
said in a note.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner, Result

from aiojetstream.cli._app import app
from helpers import unique_name


def run_cli(url: str, *args: str, expect: int = 0) -> Result:
    result = CliRunner().invoke(app, list(args), env={"NATS_URL": url, "COLUMNS": "200"})
    assert result.exit_code == expect, (args, result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.output
    return result


def error_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def usage_line(result: Result) -> str:
    """The one ``Error:`` line of a usage error (after Click's usage lines)."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_missing_stream_and_consumer_offer_the_closest_names(nats_url: str) -> None:
    base = unique_name("ORDERS")
    run_cli(nats_url, "stream", "add", base, "--subjects", f"{base}.>")
    run_cli(nats_url, "consumer", "add", base, "PROCESSOR")
    typo = "ORDRES" + base.removeprefix("ORDERS")  # two letters swapped
    missing = run_cli(nats_url, "stream", "info", typo, expect=1)
    assert error_line(missing) == (
        f"error: stream {typo!r} not found (code=404, err_code=10059); did you mean {base!r}?"
    )
    assert error_line(run_cli(nats_url, "stream", "info", base.lower(), expect=1)).endswith(
        f"; did you mean {base!r}?"
    )
    consumer = run_cli(nats_url, "consumer", "info", base, "PROCESSR", expect=1)
    assert error_line(consumer) == (
        f"error: consumer 'PROCESSR' not found on stream {base!r} (code=404, "
        "err_code=10014); did you mean 'PROCESSOR'?"
    )
    # Nothing close: the error as it is.
    nothing = run_cli(nats_url, "stream", "info", unique_name("ZZZZ"), expect=1)
    assert "did you mean" not in error_line(nothing)


def test_missing_buckets_offer_the_closest_buckets(nats_url: str) -> None:
    bucket = unique_name("CONFIG")
    run_cli(nats_url, "kv", "add", bucket)
    store = unique_name("FILES")
    run_cli(nats_url, "obj", "add", store)
    typo = bucket[:-1]
    assert error_line(run_cli(nats_url, "kv", "get", typo, "k", expect=1)) == (
        f"error: bucket {typo!r} not found; did you mean {bucket!r}?"
    )
    assert error_line(run_cli(nats_url, "obj", "ls", store[:-1], expect=1)) == (
        f"error: object store {store[:-1]!r} not found; did you mean {store!r}?"
    )


def test_ttl_on_a_stream_without_allow_msg_ttl_says_how(nats_url: str) -> None:
    name = unique_name("EVENTS")
    run_cli(nats_url, "stream", "add", name, "--subjects", f"{name}.>")
    refused = run_cli(nats_url, "pub", f"{name}.x", "m", "--ttl", "1h", expect=1)
    hint = f"aiojetstream stream edit {name} --allow-msg-ttl"
    assert error_line(refused) == (
        f"error: a message TTL needs allow_msg_ttl, and stream {name!r} has it off: set "
        f"allow_msg_ttl=True (update_stream can enable it, never disable it; CLI: {hint}) "
        "(code=400, err_code=10166)"
    )
    run_cli(nats_url, *hint.split()[1:])  # what it says to do works
    run_cli(nats_url, "pub", f"{name}.x", "m", "--ttl", "1h")


@pytest.mark.parametrize(
    ("args", "param", "reason"),
    [
        (("pub", "orders.*", "x"), "subject", "invalid subject 'orders.*': wildcards are not"),
        (("pub", "a b", "x"), "subject", "invalid subject 'a b': whitespace"),
        (("stream", "info", "a.b"), "name", "invalid stream name 'a.b'"),
        (("stream", "rm", "a.b", "-f"), "name", "invalid stream name 'a.b'"),
        (("consumer", "info", "S", "a.b"), "name", "invalid consumer name 'a.b'"),
        (("get", "a.b", "1"), "stream", "invalid stream name 'a.b'"),
        (("get", "S", "--last-for", "a..b"), "--last-for", "invalid subject filter 'a..b'"),
        (("stream", "ls", "--subject", "a..b"), "--subject", "invalid subject filter 'a..b'"),
        (("kv", "get", "a.b", "k"), "bucket", "invalid bucket name 'a.b'"),
        (("kv", "put", "B", "bad*key", "v"), "key", "invalid key 'bad*key'"),
        (("kv", "watch", "B", "a..b"), "keys", "invalid key filter 'a..b'"),
        (("obj", "ls", "a.b"), "bucket", "invalid bucket name 'a.b'"),
    ],
)
def test_refused_arguments_are_usage_errors(
    nats_url: str, args: tuple[str, ...], param: str, reason: str
) -> None:
    """Exit 2 with Click's usage lines, as for a bad duration (was: exit 1, an error line)."""
    stream, bucket = unique_name("S"), unique_name("B")
    run_cli(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    run_cli(nats_url, "kv", "add", bucket)
    args = tuple({"S": stream, "B": bucket}.get(arg, arg) for arg in args)
    result = run_cli(nats_url, *args, expect=2)
    assert result.stdout == ""
    assert usage_line(result).startswith(f"Error: Invalid value for '{param}': {reason}")


#: (arguments, the parameter named or None, the start of the reason): values out of the
#: server's range, refused before anything is sent. They exited with 1; and two showed a
#: Python repr (``datetime.timedelta(microseconds=500000)``, ``datetime.datetime(1, 1, 1, ...``).
OUT_OF_RANGE = [
    (("stream", "add", "NEW", "--max-age", "300000d"), "--max-age",
     "StreamConfig.max_age (25,920,000,000 s) is too long: the server's durations"),
    (("stream", "edit", "S", "--max-age", "300000d"), "--max-age",
     "StreamConfig.max_age (25,920,000,000 s) is too long"),
    (("stream", "add", "NEW", "--max-msgs", str(2**63)), "--max-msgs",
     "StreamConfig.max_msgs must be an int from -2**63 to 2**63 - 1, got 9223372036854775808"),
    (("stream", "add", "NEW", "--max-bytes", "99999999999TB"), "--max-bytes",
     "StreamConfig.max_bytes must be an int from -2**63 to 2**63 - 1"),
    (("stream", "add", "NEW", "--marker-ttl", "0.5s"), "--marker-ttl",
     "a marker TTL must be at least 1 second, got '0.5s'"),
    (("--timeout", "inf", "stream", "ls"), "--timeout", "'inf' is not a duration"),
    (("--timeout", "1e300", "stream", "ls"), "--timeout", "'1e300' is not a duration"),
    (("--timeout", "300000d", "stream", "ls"), "--timeout",
     "a wait of 1 ms to 9223372036 s (about 292 years), got '300000d'"),
    (("--timeout", "0.0001", "stream", "ls"), "--timeout", "a wait of 1 ms to"),
    (("consume", "S", "--idle", "inf", "--count", "1"), "--idle", "'inf' is not a duration"),
    (("consume", "S", "--idle", "300000d", "--count", "1"), "--idle", "a wait of 1 ms to"),
    (("consumer", "add", "S", "NEW", "--ack-wait", "300000d"), "--ack-wait",
     "ConsumerConfig.ack_wait (25,920,000,000 s) is too long"),
    (("consumer", "pause", "S", "C", "0001-01-01T00:00:00Z"), "until",
     "pause until: 0001-01-01T00:00:00+00:00 is not in the future"),
    (("kv", "add", "NEW", "--ttl", "300000d"), None,
     "StreamConfig.max_age (25,920,000,000 s) is too long"),
    (("kv", "add", "NEW", "--limit-marker-ttl", "0.5s"), "--limit-marker-ttl",
     "a marker TTL must be at least 1 second"),
    (("obj", "add", "NEW", "--ttl", "300000d"), None,
     "StreamConfig.max_age (25,920,000,000 s) is too long"),
    (("get", "S", str(2**64)), "seq", "Input should be less than or equal to 2**64 - 1"),
    (("stream", "purge", "S", "--seq", str(2**64), "-f"), "--seq",
     "Input should be less than or equal to 2**64 - 1"),
    (("consumer", "reset", "S", "C", "--seq", str(2**64)), "--seq",
     "Input should be less than or equal to 2**64 - 1"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "param", "reason"), OUT_OF_RANGE)
def test_values_out_of_the_servers_range_are_usage_errors(
    nats_url: str, args: tuple[str, ...], param: str | None, reason: str
) -> None:
    """Exit 2 with Click's usage lines, as docs/cli.md says, and nothing created."""
    stream, new = unique_name("S"), unique_name("NEW")
    run_cli(nats_url, "stream", "add", stream, "--subjects", f"{stream}.>")
    run_cli(nats_url, "consumer", "add", stream, "C")
    run_cli(nats_url, "pub", f"{stream}.a", "x")  # (an --idle taken would not wait for ever)
    names = {"S": stream, "NEW": new}
    reason = reason.replace("2**64 - 1", str(2**64 - 1))
    result = run_cli(nats_url, *(names.get(arg, arg) for arg in args), expect=2)
    assert result.stdout == ""
    where = f" for '{param}'" if param else ""
    assert usage_line(result).startswith(f"Error: Invalid value{where}: {reason}")
    listed = run_cli(nats_url, "stream", "ls", "--names").stdout.split()
    assert not [name for name in listed if new in name]  # nothing created
    assert "paused" not in run_cli(nats_url, "consumer", "info", stream, "C").stdout.lower()


def test_refused_arguments_with_debug_raise(nats_url: str) -> None:
    result = CliRunner().invoke(
        app, ["--debug", "stream", "info", "a.b"], env={"NATS_URL": nats_url}
    )
    assert result.exit_code == 1
    assert type(result.exception).__name__ == "InvalidNameError"
    out_of_range = ["--debug", "stream", "add", unique_name("NEW"), "--max-age", "300000d"]
    result = CliRunner().invoke(app, out_of_range, env={"NATS_URL": nats_url})
    assert result.exit_code == 1
    assert type(result.exception).__name__ == "InvalidOptionError"


def test_kv_ttl_the_server_stretches_is_noted(nats_url: str) -> None:
    bucket = unique_name("CONFIG")
    run_cli(nats_url, "kv", "add", bucket, "--history", "5", "--limit-marker-ttl", "1m")
    created = run_cli(nats_url, "kv", "create", bucket, "lock.job7", "worker-3", "--ttl", "30s")
    assert created.stdout == "Created lock.job7: revision 1.\n"
    assert created.stderr == (
        f"note: lock.job7 expires after 1m, not 30s: bucket {bucket} has --history 5 and "
        "--limit-marker-ttl 1m, and the server raises a shorter TTL to the marker TTL (use "
        "--ttl 1m or more, or a bucket with --history 1)\n"
    )
    purged = run_cli(nats_url, "kv", "purge", bucket, "lock.job7", "--ttl", "20s", "-f")
    assert purged.stderr.splitlines() == [
        f"note: the purge marker of lock.job7 expires after 1m, not 20s: bucket {bucket} has "
        "--history 5 and --limit-marker-ttl 1m, and the server raises a shorter TTL to the "
        "marker TTL (use --ttl 1m or more, or a bucket with --history 1)",
        "Purged lock.job7.",
    ]
    # At least the marker TTL, or a bucket with history 1: no note.
    assert run_cli(nats_url, "kv", "create", bucket, "lock.job8", "w", "--ttl", "1m").stderr == ""
    single = unique_name("CONFIG")
    run_cli(nats_url, "kv", "add", single, "--limit-marker-ttl", "1m")
    assert run_cli(nats_url, "kv", "create", single, "k", "w", "--ttl", "30s").stderr == ""
