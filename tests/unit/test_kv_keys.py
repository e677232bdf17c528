"""Key, key filter and bucket name validation (ADR-8), and the bucket -> stream mapping."""

from __future__ import annotations

import re
import string
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from aiojetstream import (
    DiscardPolicy,
    InvalidKeyError,
    InvalidNameError,
    InvalidStreamConfigError,
    KeyValueConfig,
    StoreCompression,
    StreamSource,
    SubjectTransformConfig,
)
from aiojetstream._kv import kv_stream_config, validate_key, validate_key_filter
from aiojetstream._kv.keys import watch_filters
from aiojetstream._models.kv import validate_bucket_name
from aiojetstream._validation import tokens_cover

TOKEN_CHARS = string.ascii_letters + string.digits + "-/_="
KEY_CHARS = TOKEN_CHARS + "."
NOISE = KEY_CHARS + "*> \t\r\n\x00ä$#:+"
TOKEN = st.text(alphabet=TOKEN_CHARS, min_size=1, max_size=8)
BUCKET_CHARS = string.ascii_letters + string.digits + "_-"


def key_oracle(key: str) -> bool:
    """ADR-8 / nats.go ``keyValid``, written independently."""
    return (
        re.fullmatch(r"[-/_=.a-zA-Z0-9]+", key) is not None
        and not key.startswith(".")
        and not key.endswith(".")
        and ".." not in key
    )


def filter_oracle(key: str) -> bool:
    tokens = key.split(".")
    for i, token in enumerate(tokens):
        if token == "*" or (token == ">" and i == len(tokens) - 1):
            continue
        if re.fullmatch(r"[-/_=a-zA-Z0-9]+", token) is None:
            return False
    return True


@given(st.lists(TOKEN, min_size=1, max_size=6))
def test_dotted_tokens_are_valid_keys_and_filters(tokens: list[str]) -> None:
    key = ".".join(tokens)
    assert validate_key(key) == key
    assert validate_key_filter(key) == key


@given(st.text(alphabet=NOISE, max_size=30))
def test_keys_match_the_adr8_rules(key: str) -> None:
    if key_oracle(key):
        assert validate_key(key) == key
    else:
        with pytest.raises(InvalidKeyError) as info:
            validate_key(key)
        assert isinstance(info.value, ValueError)
        assert repr(key) in str(info.value)


@given(st.text(alphabet=NOISE, max_size=30))
def test_filters_allow_whole_token_wildcards_only(key: str) -> None:
    if filter_oracle(key):
        assert validate_key_filter(key) == key
    else:
        with pytest.raises(InvalidKeyError):
            validate_key_filter(key)


@given(
    st.lists(st.one_of(TOKEN, st.just("*")), min_size=1, max_size=5),
    st.booleans(),
)
def test_wildcards_only_in_filters(tokens: list[str], tail: bool) -> None:
    key = ".".join([*tokens, ">"] if tail else tokens)
    assert validate_key_filter(key) == key
    if "*" in tokens or tail:
        with pytest.raises(InvalidKeyError, match="wildcards"):
            validate_key(key)


def _matches(filter_tokens: list[str], key: list[str]) -> bool:
    for i, token in enumerate(filter_tokens):
        if token == ">":
            return len(key) > i
        if i >= len(key) or (token != "*" and token != key[i]):
            return False
    return len(filter_tokens) == len(key)


def _all_keys(max_len: int) -> list[list[str]]:
    keys: list[list[str]] = [[]]
    found = []
    for _ in range(max_len):
        keys = [[*k, t] for k in keys for t in ("a", "b", "z")]
        found += keys
    return found


FILTER = st.builds(
    lambda tokens, tail: [*tokens, ">"] if tail else tokens,
    st.lists(st.sampled_from(["a", "b", "*"]), min_size=0, max_size=3),
    st.booleans(),
).filter(bool)


@given(FILTER, FILTER)
def test_watch_filters_refuse_exactly_a_filter_covering_another(
    first: list[str], second: list[str]
) -> None:
    """Refused iff every key one matches the other matches too (checked on every key
    of up to one token more than the longer filter, over its tokens and one more)."""
    keys = _all_keys(max(len(first), len(second)) + 1)

    def covers(wide: list[str], narrow: list[str]) -> bool:
        return all(_matches(wide, k) for k in keys if _matches(narrow, k))

    a, b = ".".join(first), ".".join(second)
    if a == b:
        assert watch_filters([a, b]) == [a]
    elif covers(first, second) or covers(second, first):
        with pytest.raises(InvalidKeyError, match="overlap"):
            watch_filters([a, b])
    else:
        assert watch_filters([a, b]) == [a, b]


@given(st.lists(FILTER, max_size=7))
def test_watch_filters_name_the_first_overlapping_pair_of_a_list(
    filters: list[list[str]],
) -> None:
    """Only pairs with a wildcard filter are compared (a literal covers only itself):
    the same pair is named as by comparing every pair in list order."""
    texts = list(dict.fromkeys(".".join(f) for f in filters))
    expected = None
    for i, first in enumerate(texts):
        for second in texts[i + 1 :]:
            a, b = first.split("."), second.split(".")
            if tokens_cover(a, b) or tokens_cover(b, a):
                expected = {first, second}
                break
        if expected:
            break
    if expected is None:
        assert watch_filters([".".join(f) for f in filters]) == texts
    else:
        with pytest.raises(InvalidKeyError, match="overlap") as info:
            watch_filters([".".join(f) for f in filters])
        assert set(re.findall(r"'([^']*)'", str(info.value))[:2]) == expected


def test_watch_filters_of_many_keys_compare_only_wildcard_pairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every pair was compared: a watch of 6,000 keys held the event loop 6 s (CPU)."""
    from aiojetstream._kv import keys

    calls = 0
    cover = tokens_cover

    def counted(wide: list[str], narrow: list[str]) -> bool:
        nonlocal calls
        calls += 1
        return cover(wide, narrow)

    monkeypatch.setattr(keys, "tokens_cover", counted)  # (the name keys.py calls)
    filters = [f"k.{i}" for i in range(3_000)] + ["w.*"]
    assert watch_filters(filters) == filters
    assert calls <= 2 * len(filters)  # each literal against the one wildcard filter


def test_watch_filters_keep_the_order_and_drop_repeats() -> None:
    assert watch_filters(["c", "a.*", "c", "*.b", "a.*"]) == ["c", "a.*", "*.b"]
    assert watch_filters([]) == []


@pytest.mark.parametrize(
    "bad", ["", ".", ".a", "a.", "a..b", "a b", "a\r\nb", "a*b", ">.a", "a.>.b", "ä", "a$"]
)
def test_invalid_examples(bad: str) -> None:
    with pytest.raises(InvalidKeyError):
        validate_key(bad)
    with pytest.raises(InvalidKeyError):
        validate_key_filter(bad)


@pytest.mark.parametrize("bad", [None, 1, b"key"])
def test_non_strings(bad: object) -> None:
    with pytest.raises(InvalidKeyError):
        validate_key(bad)
    with pytest.raises(InvalidNameError):
        validate_bucket_name(bad)


@given(st.text(alphabet=BUCKET_CHARS, min_size=1, max_size=64))
def test_valid_bucket_names(bucket: str) -> None:
    assert validate_bucket_name(bucket) == bucket
    assert KeyValueConfig(bucket=bucket).bucket == bucket
    assert kv_stream_config(KeyValueConfig(bucket=bucket)).name == f"KV_{bucket}"


@given(st.text(alphabet=BUCKET_CHARS + ".*> /\\\t\nä$", max_size=20))
def test_bucket_names_match_the_adr8_rule(bucket: str) -> None:
    if re.fullmatch(r"[a-zA-Z0-9_-]+", bucket):
        assert validate_bucket_name(bucket) == bucket
    else:
        with pytest.raises(InvalidNameError):
            validate_bucket_name(bucket)
        with pytest.raises(InvalidNameError):  # when the config is sent, not when built
            kv_stream_config(KeyValueConfig(bucket=bucket))


@given(
    st.integers(min_value=1, max_value=64),
    st.one_of(st.none(), st.integers(min_value=1, max_value=10_000)),
    st.one_of(st.none(), st.integers(min_value=1, max_value=3_600)),
    st.booleans(),
)
def test_bucket_to_stream_mapping(
    history: int, ttl: int | None, marker: int | None, compression: bool
) -> None:
    cfg = KeyValueConfig(
        bucket="b", history=history, ttl=ttl, limit_marker_ttl=marker, compression=compression
    )
    sc = kv_stream_config(cfg)
    assert sc.name == "KV_b"
    assert sc.subjects == ["$KV.b.>"]
    assert sc.max_msgs_per_subject == history
    assert sc.max_age == timedelta(seconds=ttl or 0)
    window = min(timedelta(seconds=ttl), timedelta(minutes=2)) if ttl else timedelta(minutes=2)
    assert sc.duplicate_window == window
    assert sc.discard is DiscardPolicy.NEW
    assert sc.allow_rollup_hdrs
    assert sc.deny_delete
    assert not sc.deny_purge
    assert sc.allow_direct
    assert sc.compression is (StoreCompression.S2 if compression else StoreCompression.NONE)
    assert sc.max_msg_size == -1
    assert sc.max_bytes == -1
    assert sc.num_replicas == 1
    if marker is None:
        assert not sc.allow_msg_ttl
        assert sc.subject_delete_marker_ttl is None
    else:
        assert sc.allow_msg_ttl
        assert sc.subject_delete_marker_ttl == timedelta(seconds=marker)


def test_sources_and_mirrors_mapping() -> None:
    sc = kv_stream_config(
        KeyValueConfig(
            bucket="agg",
            sources=[
                StreamSource(name="one"),
                StreamSource(name="KV_two"),
                StreamSource(
                    name="ORDERS",
                    subject_transforms=[SubjectTransformConfig(src="o.>", dest="$KV.agg.o.>")],
                ),
            ],
        )
    )
    assert sc.subjects == ["$KV.agg.>"]
    assert sc.sources is not None
    assert [s.name for s in sc.sources] == ["KV_one", "KV_two", "ORDERS"]
    transforms = [s.subject_transforms for s in sc.sources]
    assert transforms[0] == [SubjectTransformConfig(src="$KV.one.>", dest="$KV.agg.>")]
    assert transforms[1] == [SubjectTransformConfig(src="$KV.two.>", dest="$KV.agg.>")]
    assert transforms[2] == [SubjectTransformConfig(src="o.>", dest="$KV.agg.o.>")]

    mirror = kv_stream_config(KeyValueConfig(bucket="r", mirror=StreamSource(name="origin")))
    assert mirror.mirror is not None
    assert mirror.mirror.name == "KV_origin"
    assert mirror.mirror_direct
    assert mirror.subjects is None
    with pytest.raises(InvalidStreamConfigError, match="mirror"):
        kv_stream_config(
            KeyValueConfig(bucket="r", mirror=StreamSource(name="origin"), limit_marker_ttl=1)
        )


def test_limit_marker_ttl_must_be_at_least_one_second() -> None:
    for bad in (0, 0.5, timedelta(milliseconds=999)):
        with pytest.raises(ValidationError, match="at least 1 second"):
            KeyValueConfig(bucket="b", limit_marker_ttl=bad)
    assert KeyValueConfig(bucket="b", limit_marker_ttl=1).limit_marker_ttl == timedelta(seconds=1)
