"""ADR-43 stream settings: the pure rules checked before a stream create/update is sent."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from aiojetstream import (
    FeatureNotSupportedError,
    InvalidOptionError,
    InvalidStreamConfigError,
    JetStreamError,
    StreamConfig,
    StreamSource,
)
from aiojetstream._models import to_wire
from aiojetstream._ttl_rules import (
    MIN_MARKER_TTL,
    TTL_API_LEVEL,
    apply_ttl_defaults,
    check_api_level,
    check_not_disabling,
    check_stream_config,
    may_disable_msg_ttl,
    request_body,
    uses_ttl_settings,
)

# Durations as pydantic accepts them from a user (timedelta or seconds).
_under_a_second = st.one_of(
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(microseconds=999_999)),
    st.just(0.0),
    # (a positive number under a microsecond is refused as such by the config itself:
    # test_a_number_of_seconds_under_a_microsecond_is_refused)
    st.floats(min_value=1e-6, max_value=0.999_999),
)
_at_least_a_second = st.one_of(
    st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=3650)),
    st.integers(min_value=1, max_value=10**8),
)


def _cfg(**kw: object) -> StreamConfig:
    return StreamConfig(name="S", subjects=["s.>"], **kw)


def test_error_classes() -> None:
    assert issubclass(InvalidStreamConfigError, InvalidOptionError)
    assert issubclass(InvalidStreamConfigError, ValueError)
    assert issubclass(FeatureNotSupportedError, JetStreamError)
    assert not issubclass(FeatureNotSupportedError, ValueError)


def test_feature_not_supported_error_attributes_and_pickle() -> None:
    err = FeatureNotSupportedError("allow_msg_ttl", 1, 0, "2.11")
    assert (err.feature, err.required_level, err.server_level, err.server_version) == (
        "allow_msg_ttl",
        1,
        0,
        "2.11",
    )
    assert "nats-server >= 2.11" in str(err)
    assert "API level 0" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is FeatureNotSupportedError
    assert str(again) == str(err)
    assert again.server_version == "2.11"


# --------------------------------------------------------------------------- uses


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, False),
        ({"allow_msg_ttl": True}, True),
        ({"subject_delete_marker_ttl": 1}, True),
        ({"allow_msg_ttl": True, "subject_delete_marker_ttl": 5}, True),
        ({"allow_rollup_hdrs": True, "deny_purge": True, "max_age": 60}, False),
    ],
)
def test_uses_ttl_settings(kw: dict[str, object], expected: bool) -> None:
    assert uses_ttl_settings(_cfg(**kw)) is expected


# --------------------------------------------------------------------------- marker TTL


@given(_under_a_second)
def test_marker_ttl_under_a_second_is_refused(ttl: timedelta | float) -> None:
    with pytest.raises(InvalidStreamConfigError, match="at least 1 second"):
        check_stream_config(_cfg(subject_delete_marker_ttl=ttl))


@given(st.floats(min_value=0, max_value=5e-7, exclude_min=True))
def test_a_number_of_seconds_under_a_microsecond_is_refused(ttl: float) -> None:
    """It was taken as 0 (for ``max_age``, ``ttl``, ``ack_wait``: unlimited or the
    server's default, silently)."""
    with pytest.raises(ValidationError, match="below a microsecond"):
        _cfg(subject_delete_marker_ttl=ttl)
    with pytest.raises(ValidationError, match="below a microsecond"):
        _cfg(max_age=ttl)
    # A string is exact to the nanosecond.
    assert to_wire(_cfg(max_age="400ns"))["max_age"] == 400


@given(_at_least_a_second)
def test_marker_ttl_of_a_second_or_more_is_accepted(ttl: timedelta | int) -> None:
    check_stream_config(_cfg(subject_delete_marker_ttl=ttl))


def test_marker_ttl_boundaries() -> None:
    assert timedelta(seconds=1) == MIN_MARKER_TTL
    check_stream_config(_cfg(subject_delete_marker_ttl=MIN_MARKER_TTL))
    check_stream_config(_cfg(subject_delete_marker_ttl=1.0))
    with pytest.raises(InvalidStreamConfigError):
        check_stream_config(_cfg(subject_delete_marker_ttl=timedelta(0)))
    with pytest.raises(InvalidStreamConfigError):
        check_stream_config(_cfg(subject_delete_marker_ttl=MIN_MARKER_TTL - timedelta.resolution))


def test_marker_ttl_none_means_unset() -> None:
    check_stream_config(_cfg())
    check_stream_config(_cfg(subject_delete_marker_ttl=None))
    assert "subject_delete_marker_ttl" not in to_wire(_cfg())


@pytest.mark.parametrize(
    "bad",
    [timedelta(seconds=-1), -1, -0.5, 0, float("nan"), "500ms", "1x", True],
)
def test_marker_ttl_bypassing_validation_is_still_refused(bad: object) -> None:
    # model_construct skips pydantic: the rule itself must still hold.
    cfg = StreamConfig.model_construct(
        name="S",
        subjects=["s.>"],
        subject_delete_marker_ttl=bad,  # type: ignore[arg-type]
    )
    with pytest.raises(InvalidStreamConfigError):
        check_stream_config(cfg)


def test_marker_ttl_on_a_mirror_is_refused() -> None:
    cfg = StreamConfig(name="M", mirror=StreamSource(name="ORIGIN"), subject_delete_marker_ttl=5)
    with pytest.raises(InvalidStreamConfigError, match="mirror"):
        check_stream_config(cfg)


def test_mirror_rules() -> None:
    # A mirror may allow per-message TTLs; a stream that sources may set markers.
    check_stream_config(StreamConfig(name="M", mirror=StreamSource(name="O"), allow_msg_ttl=True))
    check_stream_config(
        StreamConfig(name="A", sources=[StreamSource(name="O")], subject_delete_marker_ttl=1)
    )


# --------------------------------------------------------------------------- API level


@given(
    level=st.integers(min_value=-1, max_value=20),
    allow=st.booleans(),
    marker=st.booleans(),
    pedantic=st.booleans(),
)
def test_api_level_rule(level: int, allow: bool, marker: bool, pedantic: bool) -> None:
    cfg = _cfg(allow_msg_ttl=allow, subject_delete_marker_ttl=1 if marker else None)
    needs = allow or marker or pedantic
    if needs and level < TTL_API_LEVEL:
        with pytest.raises(FeatureNotSupportedError) as info:
            check_api_level(cfg, level, pedantic=pedantic)
        assert info.value.required_level == 1
        assert info.value.server_level == level
        assert "nats-server >= 2.11" in str(info.value)
    else:
        check_api_level(cfg, level, pedantic=pedantic)


@pytest.mark.parametrize(
    ("kw", "pedantic", "feature"),
    [
        ({"subject_delete_marker_ttl": 1}, False, "subject_delete_marker_ttl"),
        (
            {"allow_msg_ttl": True, "subject_delete_marker_ttl": 1},
            False,
            "subject_delete_marker_ttl",
        ),
        ({"allow_msg_ttl": True}, False, "allow_msg_ttl"),
        ({}, True, "pedantic mode"),
    ],
)
def test_api_level_error_names_the_feature(
    kw: dict[str, object], pedantic: bool, feature: str
) -> None:
    with pytest.raises(FeatureNotSupportedError) as info:
        check_api_level(_cfg(**kw), 0, pedantic=pedantic)
    assert info.value.feature == feature
    assert str(info.value).startswith(feature)


# --------------------------------------------------------------------------- defaults


@given(
    allow=st.booleans(),
    marker=st.booleans(),
    rollup=st.booleans(),
    deny_purge=st.booleans(),
    deny_delete=st.booleans(),
    pedantic=st.booleans(),
)
def test_defaults(
    allow: bool, marker: bool, rollup: bool, deny_purge: bool, deny_delete: bool, pedantic: bool
) -> None:
    cfg = _cfg(
        allow_msg_ttl=allow,
        subject_delete_marker_ttl=2 if marker else None,
        allow_rollup_hdrs=rollup,
        deny_purge=deny_purge,
        deny_delete=deny_delete,
        max_age=60,
    )
    out = apply_ttl_defaults(cfg, pedantic=pedantic)
    if pedantic or not (allow or marker):
        assert out is cfg
        return
    assert out.allow_rollup_hdrs is True
    assert out.deny_purge is False
    assert out.allow_msg_ttl is True  # set, or implied by the marker TTL
    assert out.subject_delete_marker_ttl == cfg.subject_delete_marker_ttl
    # Nothing else changes.
    untouched = {"allow_rollup_hdrs", "deny_purge", "allow_msg_ttl"}
    for field in StreamConfig.model_fields:
        if field not in untouched:
            assert getattr(out, field) == getattr(cfg, field), field
    wire = to_wire(out)
    assert wire["allow_rollup_hdrs"] is True
    assert wire["allow_msg_ttl"] is True
    assert wire.get("deny_purge", False) is False


def test_defaults_keep_unknown_server_fields() -> None:
    from aiojetstream._models import from_wire

    cfg = from_wire(
        StreamConfig,
        {"name": "S", "subjects": ["s.>"], "allow_msg_ttl": True, "future_field": {"x": 1}},
    )
    out = apply_ttl_defaults(cfg)
    assert to_wire(out)["future_field"] == {"x": 1}
    assert out.allow_rollup_hdrs is True


def test_defaults_leave_an_already_conforming_config_alone() -> None:
    cfg = _cfg(allow_msg_ttl=True, subject_delete_marker_ttl=1, allow_rollup_hdrs=True)
    assert apply_ttl_defaults(cfg) is cfg


# --------------------------------------------------------------------------- never disable


@given(current=st.booleans(), new=st.booleans())
def test_allow_msg_ttl_can_be_enabled_never_disabled(current: bool, new: bool) -> None:
    cur_cfg = _cfg(allow_msg_ttl=current)
    new_cfg = _cfg(allow_msg_ttl=new)
    assert may_disable_msg_ttl(new_cfg) is (not new)
    if current and not new:
        with pytest.raises(InvalidStreamConfigError, match="cannot be disabled"):
            check_not_disabling(cur_cfg, new_cfg)
    else:
        check_not_disabling(cur_cfg, new_cfg)


def test_a_marker_ttl_keeps_allow_msg_ttl_on() -> None:
    # Non-pedantic: the marker TTL implies allow_msg_ttl, so no lookup is needed.
    sent = apply_ttl_defaults(_cfg(subject_delete_marker_ttl=1))
    assert not may_disable_msg_ttl(sent)
    check_not_disabling(_cfg(allow_msg_ttl=True), sent)
    # Pedantic: sent as given, so it may disable and must be checked.
    sent = apply_ttl_defaults(_cfg(subject_delete_marker_ttl=1), pedantic=True)
    assert may_disable_msg_ttl(sent)


# --------------------------------------------------------------------------- body


def test_request_body() -> None:
    wire = to_wire(_cfg(allow_msg_ttl=True))
    assert request_body(wire) is wire
    assert "pedantic" not in request_body(wire, pedantic=False)
    body = request_body(wire, pedantic=True)
    assert body == {**wire, "pedantic": True}
    assert "pedantic" not in wire  # not mutated
