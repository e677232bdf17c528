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


def test_generated_docstrings_are_current() -> None:
    # The models' descriptions come from the generated table: after editing a
    # model's docstrings, run `python -m aiojetstream._models._docgen`.
    from aiojetstream._models import _docgen, _docstrings

    table = _docstrings.DOCSTRINGS
    assert _docgen.collect() == table


def test_a_model_outside_the_table_has_its_source_parsed() -> None:
    # A subclass defined elsewhere (here: this test module) is not in the table.
    assert __name__ not in _docstrings_table()
    assert attribute_docstrings(_UserConfig) == {"extra_field": "A user's own field."}
    assert _UserConfig.model_fields["extra_field"].description == "A user's own field."
    assert _UserConfig.model_fields["name"].description is not None


def _docstrings_table() -> dict[str, dict[str, dict[str, str]]]:
    from aiojetstream._models import _docstrings

    return _docstrings.DOCSTRINGS


class _UserConfig(aiojetstream.StreamConfig):
    extra_field: int = 0
    """A user's own field."""


def test_importing_the_models_parses_no_source() -> None:
    import subprocess
    import sys

    # ast.parse counted from the start: neither the import nor a description parses source.
    code = (
        "import ast\n"
        "parsed = []\n"
        "parse = ast.parse\n"
        "ast.parse = lambda *a, **k: parsed.append(a) or parse(*a, **k)\n"
        "from aiojetstream import StreamConfig, ConsumerConfig, KeyValueConfig, StreamInfo\n"
        "assert StreamConfig.model_fields['max_age'].description.startswith('Maximum age')\n"
        "assert not parsed, 'source parsed'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
