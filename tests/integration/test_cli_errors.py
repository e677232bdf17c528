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


def test_refused_arguments_with_debug_raise(nats_url: str) -> None:
    result = CliRunner().invoke(
        app, ["--debug", "stream", "info", "a.b"], env={"NATS_URL": nats_url}
    )
    assert result.exit_code == 1
    assert type(result.exception).__name__ == "InvalidNameError"


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
