"""Models whose aliases are nested below the top level, for the typed payload tests.

Each must read back (``model_validate_json``) what a publish writes of it. Written
by field name, a model with no alias of its own but nested ones did not: every
such message was terminated. ``SHAPES`` maps a name to the model, an example
and a hypothesis strategy of its values.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, NamedTuple, TypeVar

import pydantic
from hypothesis import strategies as st
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, RootModel
from pydantic.alias_generators import to_camel
from typing_extensions import TypedDict

T = TypeVar("T")

INTS = st.integers(min_value=-(2**53), max_value=2**53)
TEXT = st.text(max_size=8)


class Line(BaseModel):
    product_id: int = Field(alias="productId")


class Order(BaseModel):
    """No alias of its own: its lines have one."""

    id: int
    lines: list[Line]


class Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel)


class CamelLine(Camel):
    product_id: int


class CamelOrder(Camel):
    """``id`` and ``lines`` camel-case to themselves: only the nested model differs."""

    id: int
    lines: list[CamelLine]


class Box(BaseModel, Generic[T]):
    item: T


class Lines(RootModel[list[Line]]):
    pass


class Cat(BaseModel):
    kind: Literal["cat"]
    pet_name: str = Field(alias="petName")


class Dog(BaseModel):
    kind: Literal["dog"]
    bark: bool


class Owner(BaseModel):
    pet: Annotated[Cat | Dog, Field(discriminator="kind")]


class Node(BaseModel):
    """Recursive: its schema is a definitions schema."""

    tag_name: str = Field(alias="tagName")
    kids: list[Node] = []


class Spot(TypedDict):
    x_pos: Annotated[int, Field(alias="xPos")]


@pydantic.dataclasses.dataclass
class Place:
    place_name: str = Field(alias="placeName")


class Where(BaseModel):
    spot: Spot
    place: Place


class WrittenAs(BaseModel):
    order_id: int = Field(serialization_alias="orderId")  # read by name only


class ByName(BaseModel):
    model_config = ConfigDict(validate_by_name=True, validate_by_alias=False)
    order_id: int = Field(alias="orderId")


class ReadByName(BaseModel):
    """Nested models read by name only: written by name (pydantic's default)."""

    written: WrittenAs
    by_name: ByName


class Choice(BaseModel):
    order_id: int = Field(
        validation_alias=AliasChoices("orderId", "oid"), serialization_alias="oid"
    )


class Shape(NamedTuple):
    cls: Any
    example: Any
    values: st.SearchStrategy[Any]


def _nodes() -> st.SearchStrategy[Node]:
    return st.recursive(
        TEXT.map(lambda tag: Node(tagName=tag)),
        lambda kids: st.builds(
            lambda tag, nodes: Node(tagName=tag, kids=nodes), TEXT, st.lists(kids, max_size=3)
        ),
        max_leaves=8,
    )


_LINES = st.lists(INTS.map(lambda i: Line(productId=i)), max_size=4)

SHAPES: dict[str, Shape] = {
    "nested list": Shape(
        Order,
        Order(id=1, lines=[Line(productId=7)]),
        st.builds(lambda i, lines: Order(id=i, lines=lines), INTS, _LINES),
    ),
    "alias_generator base": Shape(
        CamelOrder,
        CamelOrder(id=1, lines=[CamelLine(productId=7)]),
        st.builds(
            lambda i, ids: CamelOrder(id=i, lines=[CamelLine(productId=p) for p in ids]),
            INTS,
            st.lists(INTS, max_size=4),
        ),
    ),
    "generic": Shape(
        Box[Line],
        Box[Line](item=Line(productId=7)),
        INTS.map(lambda i: Box[Line](item=Line(productId=i))),
    ),
    "root model": Shape(Lines, Lines([Line(productId=7)]), _LINES.map(Lines)),
    "discriminated union": Shape(
        Owner,
        Owner(pet=Cat(kind="cat", petName="tom")),
        st.one_of(
            TEXT.map(lambda name: Owner(pet=Cat(kind="cat", petName=name))),
            st.booleans().map(lambda bark: Owner(pet=Dog(kind="dog", bark=bark))),
        ),
    ),
    "recursive": Shape(
        Box[Node],
        Box[Node](item=Node(tagName="a", kids=[Node(tagName="b")])),
        _nodes().map(lambda node: Box[Node](item=node)),
    ),
    "typed dict and dataclass": Shape(
        Where,
        Where(spot={"xPos": 1}, place=Place(placeName="here")),
        st.builds(
            lambda x, name: Where(spot={"xPos": x}, place=Place(placeName=name)),
            INTS,
            TEXT,
        ),
    ),
    "read by name": Shape(
        ReadByName,
        ReadByName(written=WrittenAs(order_id=1), by_name=ByName(order_id=2)),
        st.builds(
            lambda a, b: ReadByName(written=WrittenAs(order_id=a), by_name=ByName(order_id=b)),
            INTS,
            INTS,
        ),
    ),
    "alias choices": Shape(
        Box[Choice],
        Box[Choice](item=Choice(oid=3)),
        INTS.map(lambda i: Box[Choice](item=Choice(oid=i))),
    ),
}
