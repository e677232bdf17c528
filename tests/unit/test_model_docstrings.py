"""Field descriptions come from attribute docstrings, exactly as pydantic would extract them."""

from __future__ import annotations

import pydantic
import pytest
from pydantic._internal._docs_extraction import extract_docstrings_from_cls

import aiojetstream
from aiojetstream._models._base import DocumentedModel, attribute_docstrings

MODELS = [
    obj
    for name in aiojetstream.__all__
    if isinstance(obj := getattr(aiojetstream, name), type) and issubclass(obj, pydantic.BaseModel)
]


def test_every_public_model_is_documented() -> None:
    assert MODELS
    for model in MODELS:
        if model is not aiojetstream.RawStreamMessage:
            assert issubclass(model, DocumentedModel), model


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_descriptions_match_pydantic(model: type[pydantic.BaseModel]) -> None:
    for klass in model.__mro__:
        if isinstance(klass, type) and issubclass(klass, DocumentedModel):
            expected = extract_docstrings_from_cls(klass, use_inspect=True)
            assert attribute_docstrings(klass) == expected, klass
    for name, field in model.model_fields.items():
        docs = [attribute_docstrings(k).get(name) for k in model.__mro__ if isinstance(k, type)]
        expected_doc = next((d for d in docs if d is not None), None)
        if expected_doc is not None:
            assert field.description is not None, f"{model.__name__}.{name}"


def test_descriptions_reach_the_json_schema() -> None:
    schema = aiojetstream.StreamConfig.model_json_schema()
    assert "ADR-43" in schema["properties"]["allow_msg_ttl"]["description"]
    entry = aiojetstream.KeyValueEntry.model_json_schema()
    assert entry["properties"]["revision"]["description"].startswith("The entry's stream sequence")
