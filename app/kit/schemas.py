"""Request-body plumbing shared by every domain's schemas: strict JSON bodies, integers as
JSON Schema means them, the paginated list, and responses read off a row."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


def integral(value: object) -> object:
    """A JSON number with no fractional part (2.0) is an integer in JSON Schema: take it as 2.
    Anything else passes through to the strict check (so `true` and `"2"` stay refused)."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    return value


# An integer as JSON Schema means it: 2 and 2.0, never true or "2".
JsonInt = Annotated[int, BeforeValidator(integral)]


# A string that Python's str.strip() does not empty: at least one character outside the set it
# strips, spelled out because a regex's \s (ECMA's, Rust's) is not quite that set.
_STRIPPED = "\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = f"[^{_STRIPPED}]"

# A job parameter: 1 to 1000 (the bounds inside the type, so the schema states them).
ParamInt = Annotated[int, Field(ge=1, le=1000), BeforeValidator(integral)]


def coarse_time(value: datetime | None, *, exact: bool) -> datetime | None:
    """A time as a response shows it: exact, or floored to the whole minute (what analysts see
    of when a job started and ended, and of the ledger's times: a run's length grows with the
    dataset's exact row count, docs/privacy.md)."""
    if value is None or exact:
        return value
    return value.replace(second=0, microsecond=0)


class RequestSchema(BaseModel):
    """A request's body (JSON or a form). A field the client may leave out is optional in the
    schema, and its default is stated in its description, not as the schema's `default`:
    generators read a `default` as "always present" (openapi-typescript makes such a field
    required), which holds of a response, not of what a client sends."""

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        defaults_in_words(handler.resolve_ref_schema(schema))
        return schema


def defaults_in_words(schema: dict[str, Any]) -> None:
    """Move each property's `default` into its description ("Default: ...")."""
    for prop in schema.get("properties", {}).values():
        if "default" not in prop:
            continue
        default = prop.pop("default")
        if default is None:
            continue  # left out means absent: nothing to say
        said = f"Default: {json.dumps(default)}."
        description = prop.get("description", "")
        prop["description"] = f"{description} {said}".strip()


class RequestBody(RequestSchema):
    """A JSON request body: strict types (no `true` for 1, no `"2"` for 2), no unknown fields,
    no NaN or infinity. What the schema says (`integer`, `number`, `string`) is what is taken;
    a JSON integer is still a valid `number`."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` to get the next page; null on the last."
    )


def from_attributes(model: type[M], source: object, **given: object) -> M:
    """A response `model` whose fields are read from `source`'s attributes of the same names,
    except those `given` (a renamed or computed field). The model's fields are the list of
    what is shown: nothing else of `source` is read."""
    values = {name: getattr(source, name) for name in model.model_fields if name not in given}
    return model.model_validate({**values, **given})
