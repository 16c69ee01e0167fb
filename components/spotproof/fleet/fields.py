"""The field metadata that ties a fleet field to its config key, and the objects read with it.

A fleet field declares its config key, reader (which states the allowed range) and default
once, with :func:`setting`; :func:`read_settings` then reads every such field of a type,
so no reader restates a key, a range or a default.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any, NoReturn, TypeVar

from spotproof.fleet.errors import SpecError
from spotproof.fleet.readers import decode

MISSPELT = 0.8
"""How alike (difflib's ratio) an unknown key and an accepted one are when the first is
taken for a misspelling of the second: ``maxNode``/``maxNodes`` is 0.93."""

T = TypeVar("T")
E = TypeVar("E", bound=StrEnum)
MISSING: Any = dataclasses.MISSING
Reader = Callable[[str, Any], Any]


@dataclass(frozen=True)
class Setting:
    """Where a spec field comes from in stack config."""

    key: str
    """The camelCase config key, relative to its object (``maxNodes``)."""
    read: Reader | None
    """Parses and range-checks the raw value; None when the value depends on others
    already read (a pool's zones depend on its GPU), so its type's reader reads it."""
    derived_default: Callable[[dict[str, Any]], Any] | None = None
    """A default computed from the fields read before it. Its field's own default is then
    None, so that a spec built in a program tells a value it was given from one it was
    not (a given ``maxNodes`` of 3 is judged; a missing one is derived)."""


def setting(
    key: str,
    read: Reader | None = None,
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    derived_default: Callable[[dict[str, Any]], Any] | None = None,
) -> Any:
    """A dataclass field read from config key ``key`` with ``read``."""
    metadata = {"setting": Setting(key, read, derived_default)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def setting_of(cls: type, name: str) -> Setting:
    for spec_field in dataclasses.fields(cls):
        if spec_field.name == name and "setting" in spec_field.metadata:
            return spec_field.metadata["setting"]
    raise KeyError(f"{cls.__name__}.{name} has no config setting")


def config_key(cls: type, name: str) -> str:
    """The config key of field ``name`` of ``cls`` (``minNodes``)."""
    return setting_of(cls, name).key


def setting_keys(cls: type) -> set[str]:
    """Every config key the fields of ``cls`` are read from."""
    return {
        spec_field.metadata["setting"].key
        for spec_field in dataclasses.fields(cls)
        if "setting" in spec_field.metadata
    }


def default_of(cls: type, name: str) -> Any:
    for spec_field in dataclasses.fields(cls):
        if spec_field.name == name:
            if spec_field.default_factory is not MISSING:
                return spec_field.default_factory()
            return spec_field.default
    raise KeyError(name)


def read_settings(cls: type, obj: ConfigObject, **given: Any) -> dict[str, Any]:
    """Read every field of ``cls`` that has a reader, in field order, from ``obj``.

    ``given`` are values the caller already has (read with a context-dependent reader, or
    not from config at all); they are not read again and are visible to derived defaults.
    Fields without a reader and not given are left out, for the type's reader to add."""
    obj.refuse_misspelt(setting_keys(cls))
    values = dict(given)
    for spec_field in dataclasses.fields(cls):
        found = spec_field.metadata.get("setting")
        if spec_field.name in given or found is None or found.read is None:
            continue
        default = (
            found.derived_default(values)
            if found.derived_default is not None
            else default_of(cls, spec_field.name)
        )
        values[spec_field.name] = obj.field(found.key, found.read, default)
    return values


def read_object(cls: type[T], key: str, raw: Any, **given: Any) -> T:
    """An instance of ``cls`` whose fields all come from settings (or ``given``)."""
    obj = ConfigObject(key, raw, fields_of=cls)
    value = cls(**read_settings(cls, obj, **given))
    obj.finish()
    return value


class ConfigObject:
    """One config object being read; remembers which keys were read to reject the rest."""

    def __init__(
        self, key: str, raw: Any, separator: str = ".", fields_of: type | None = None
    ) -> None:
        """``fields_of``: the spec type read from this object, whose keys are checked for
        misspellings at once, before any field is read by hand."""
        raw = decode(raw)
        if not isinstance(raw, Mapping):
            raise SpecError(key, raw, "expected an object", "a mapping of field names to values")
        self.key, self.raw, self.known = key, raw, set[str]()
        self.separator = separator  # ":" between a config namespace and its keys
        if fields_of is not None:
            self.refuse_misspelt(setting_keys(fields_of))

    def key_of(self, name: str) -> str:
        return f"{self.key}{self.separator}{name}"

    def field(self, name: str, parse: Callable[[str, Any], T], default: Any = MISSING) -> T:
        self.known.add(name)
        key = self.key_of(name)
        if name not in self.raw or self.raw[name] is None:
            if default is MISSING:  # what a reader allows, where it says (``choice``)
                raise SpecError(key, None, "required", getattr(parse, "allowed", "a value"))
            return default
        return parse(key, self.raw[name])

    def section(self, name: str, parse: Callable[[str, Any], T]) -> T:
        """A nested object whose fields all have defaults: absent reads as ``{}``."""
        self.known.add(name)
        return parse(self.key_of(name), self.raw.get(name) or {})

    def refuse_misspelt(self, accepted: Iterable[str]) -> None:
        """Before any value is judged: a key that is not accepted but is close to an
        accepted key the object lacks is a misspelling, and reported as one. Otherwise
        ``maxNode: 4`` would surface as ``maxNodes`` being required, or as a default
        that another field then contradicts."""
        accepted = set(accepted)
        absent = sorted(accepted - set(self.raw))
        for name in self.raw:
            if name in accepted or name in self.known:
                continue
            close = difflib.get_close_matches(str(name), absent, n=1, cutoff=MISSPELT)
            if close:
                self._unknown(name, sorted(accepted | self.known), close[0])

    def finish(self) -> None:
        for name in self.raw:
            if name not in self.known:
                unread = sorted(self.known - set(self.raw))
                close = difflib.get_close_matches(str(name), unread, n=1, cutoff=MISSPELT)
                self._unknown(name, sorted(self.known), close[0] if close else None)

    def _unknown(self, name: Any, accepted: list[str], meant: str | None) -> NoReturn:
        hint = f" (did you mean {meant}?)" if meant else ""
        raise SpecError(
            self.key_of(name), self.raw[name], f"unknown field{hint}", ", ".join(accepted)
        )


# --- spec types built directly in a program ---------------------------------------------

_JUDGED = ContextVar("spotproof_spec_judged", default=False)


@contextmanager
def judged() -> Iterator[None]:
    """Within it, spec types are being built by a config reader that has already judged
    their values, so they are not judged again on construction."""
    token = _JUDGED.set(True)
    try:
        yield
    finally:
        _JUDGED.reset(token)


class Checked:
    """A spec type that judges itself when a program builds it directly.

    Its values are written back as the stack config that would give them (fields left at
    their default are left out, as a stack would leave them out) and read by the type's
    own config reader, :meth:`judge`: a typed value is refused exactly as the same value in
    a stack file is, with the same message, and the instance then holds what config
    reading would have given (``max_nodes="4"`` becomes ``4``). Keys in the message are
    the Python field names (``GkeGpuPool.max_nodes``)."""

    @classmethod
    def judge(cls, key: str, raw: Mapping[str, Any]) -> Any:
        """The config reader of this type: returns the instance ``raw`` describes."""
        return read_object(cls, key, raw)

    def __post_init__(self) -> None:
        if _JUDGED.get():
            return
        cls = type(self)
        with judged():
            try:
                read = cls.judge(cls.__name__, as_config(self))
            except SpecError as error:
                raise SpecError(
                    python_key(cls, error.key), error.value, error.problem, error.allowed
                ) from None
        for spec_field in dataclasses.fields(self):  # type: ignore[arg-type]
            object.__setattr__(self, spec_field.name, getattr(read, spec_field.name))


def as_config(value: Any) -> Any:
    """``value`` as stack config would spell it."""
    if hasattr(value, "config_text"):
        return value.config_text()
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        spelt = {}
        for spec_field in dataclasses.fields(value):
            found = spec_field.metadata.get("setting")
            given = getattr(value, spec_field.name)
            if found is None or _is_default(value, spec_field, given):
                continue
            spelt[found.key] = as_config(given)
        return spelt
    if isinstance(value, list | tuple):
        return [as_config(item) for item in value]
    if isinstance(value, Mapping):
        return {key: as_config(item) for key, item in value.items()}
    return value


def _is_default(instance: Any, spec_field: dataclasses.Field[Any], given: Any) -> bool:
    if spec_field.default is not MISSING:
        default = spec_field.default
    elif spec_field.default_factory is not MISSING:
        default = spec_field.default_factory()
    else:
        return False
    try:
        return bool(given == default) and type(given) is type(default)
    except Exception:  # a value whose == raises is not the default
        return False


def python_key(cls: type, key: str) -> str:
    """``GkeGpuPool.maxNodes[0]`` as the program wrote it: ``GkeGpuPool.max_nodes[0]``."""
    names = {
        spec_field.metadata["setting"].key: spec_field.name
        for spec_field in dataclasses.fields(cls)
        if "setting" in spec_field.metadata
    }
    match = re.fullmatch(rf"{re.escape(cls.__name__)}\.([A-Za-z0-9-]+)(.*)", key)
    if not match or match.group(1) not in names:
        return key
    return f"{cls.__name__}.{names[match.group(1)]}{match.group(2)}"
