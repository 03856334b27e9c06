"""Model identity: canonical model ids and aliases, what a registration serves (a base model or
a LoRA adapter), and the registration a requested model resolves to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from cbi1kit.errors import IdentityError, IdentityVariant
from cbi1kit.hashing._fields import _json_field, _json_obj, _json_str

# Rust `str::trim` strips Unicode White_Space; Python's `str.strip` also strips \x1c-\x1f.
_WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _text_error(variant: IdentityVariant, kind: str, value: str, reason: str) -> IdentityError:
    """Upstream ``CanonicalModelIdError`` / ``ModelAliasError``: ``reason`` is ``empty`` or
    ``surrounding_whitespace``."""
    what = (
        "must not be empty"
        if reason == "empty"
        else "must not contain leading or trailing whitespace"
    )
    return IdentityError(
        variant, f"{kind} {what}: {value!r}", field=kind, value=value, reason=reason
    )


def _surrounded_by_white_space(value: str) -> bool:
    return value[0] in _WHITE_SPACE or value[-1] in _WHITE_SPACE


@dataclass(frozen=True, slots=True, order=True)
class _ModelName:
    """A validated model name: non-empty, no Unicode White_Space at either end (Rust ``trim``).

    Ordered as Rust orders ``String`` (code point order equals UTF-8 byte order). Subclasses
    differ only in the upstream error type they raise.
    """

    value: str
    _variant: ClassVar[IdentityVariant]  # upstream's error type
    _kind: ClassVar[str]  # how messages name the value

    def __post_init__(self) -> None:
        if not isinstance(self.value, str):
            raise IdentityError(
                IdentityVariant.Json,
                f"{self._kind} must be a str, got {self.value!r}",
                value=self.value,
            )
        if not self.value:
            raise _text_error(self._variant, self._kind, self.value, "empty")
        if _surrounded_by_white_space(self.value):
            raise _text_error(self._variant, self._kind, self.value, "surrounding_whitespace")

    def __str__(self) -> str:
        return self.value

    def to_json(self) -> str:
        return self.value

    @classmethod
    def from_json(cls, value: Any) -> Self:
        return cls(_json_str(value, cls._kind))


@dataclass(frozen=True, slots=True, order=True)
class CanonicalModelId(_ModelName):
    """A model's canonical name (upstream ``CanonicalModelId``)."""

    _variant = IdentityVariant.CanonicalModelId
    _kind = "canonical model ID"


@dataclass(frozen=True, slots=True, order=True)
class ModelAlias(_ModelName):
    """Another name a request may use for a registration; validated like a canonical ID."""

    _variant = IdentityVariant.ModelAlias
    _kind = "model alias"


def _model_id(value: CanonicalModelId | str) -> CanonicalModelId:
    return value if isinstance(value, CanonicalModelId) else CanonicalModelId(value)


@dataclass(frozen=True, slots=True)
class ModelTarget:
    """What a registration serves: a base model, or a LoRA ``adapter`` on ``base_model``.

    Upstream is an enum ``Base{base_model} | Lora{base_model, adapter}``; here ``adapter`` is
    ``None`` for ``Base``. The adapter's canonical name is what salts LoRA block hashes.
    """

    base_model: CanonicalModelId
    adapter: CanonicalModelId | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_model", _model_id(self.base_model))
        if self.adapter is not None:
            object.__setattr__(self, "adapter", _model_id(self.adapter))

    @classmethod
    def base(cls, base_model: CanonicalModelId | str) -> ModelTarget:
        """A ``Base`` target: ``base_model`` itself."""
        return cls(_model_id(base_model))

    @classmethod
    def lora(
        cls, base_model: CanonicalModelId | str, adapter: CanonicalModelId | str
    ) -> ModelTarget:
        """A ``Lora`` target: ``adapter`` on ``base_model``."""
        return cls(_model_id(base_model), _model_id(adapter))

    @property
    def kind(self) -> str:
        """The upstream variant name, ``Base`` or ``Lora``."""
        return "Base" if self.adapter is None else "Lora"

    @property
    def lora_name(self) -> str | None:
        """The string that salts this target's block hashes, or None for a base model."""
        return None if self.adapter is None else self.adapter.value

    def to_json(self) -> dict[str, Any]:
        """Serde's externally tagged enum: ``{"Base": {...}}`` or ``{"Lora": {...}}``."""
        if self.adapter is None:
            return {"Base": {"base_model": self.base_model.value}}
        return {"Lora": {"base_model": self.base_model.value, "adapter": self.adapter.value}}

    @classmethod
    def from_json(cls, value: Any) -> ModelTarget:
        """Read the tagged object: exactly one key, ``Base`` or ``Lora``."""
        obj = _json_obj(value, "ModelTarget")
        if len(obj) != 1:
            raise IdentityError(
                IdentityVariant.Json,
                "ModelTarget JSON must have exactly one variant key",
                field="ModelTarget",
                value=obj,
            )
        ((variant, body),) = obj.items()
        inner = _json_obj(body, f"ModelTarget.{variant}")
        base = CanonicalModelId.from_json(_json_field(inner, "base_model", variant))
        if variant == "Base":
            return cls(base)
        if variant == "Lora":
            return cls(base, CanonicalModelId.from_json(_json_field(inner, "adapter", variant)))
        raise IdentityError(
            IdentityVariant.Json,
            f"unknown ModelTarget variant {variant!r} (expected Base or Lora)",
            field="ModelTarget",
            value=variant,
        )


@dataclass(frozen=True, slots=True)
class CanonicalModelRegistration:
    """A model a pool serves, what it targets, and the aliases requests may use for it.

    Aliases are normalised as upstream's ``with_target``: an alias equal to the model is
    dropped, the rest are sorted and deduplicated, so equal registrations compare equal.
    """

    model: CanonicalModelId
    target: ModelTarget
    aliases: tuple[ModelAlias, ...] = ()

    def __post_init__(self) -> None:
        model = _model_id(self.model)
        aliases = {a if isinstance(a, ModelAlias) else ModelAlias(a) for a in self.aliases}
        object.__setattr__(self, "model", model)
        object.__setattr__(
            self, "aliases", tuple(sorted(a for a in aliases if a.value != model.value))
        )

    @classmethod
    def new(
        cls, model: CanonicalModelId | str, aliases: Iterable[ModelAlias | str] = ()
    ) -> CanonicalModelRegistration:
        """A base-model registration (``target = Base{base_model: model}``)."""
        model_id = _model_id(model)
        return cls(model_id, ModelTarget.base(model_id), tuple(_alias(a) for a in aliases))

    @classmethod
    def with_target(
        cls,
        model: CanonicalModelId | str,
        target: ModelTarget,
        aliases: Iterable[ModelAlias | str] = (),
    ) -> CanonicalModelRegistration:
        """A registration serving ``target`` (e.g. a LoRA adapter): upstream's ``with_target``."""
        return cls(_model_id(model), target, tuple(_alias(a) for a in aliases))

    @property
    def lora_name(self) -> str | None:
        """The canonical adapter name that salts this registration's hashes (None for base)."""
        return self.target.lora_name

    def matches(self, requested_model: str) -> bool:
        """Whether a request naming ``requested_model`` is served by this registration."""
        return self.model.value == requested_model or any(
            a.value == requested_model for a in self.aliases
        )

    def to_json(self) -> dict[str, Any]:
        """Serde's object: ``model``, ``target`` (tagged, see :class:`ModelTarget`), ``aliases``."""
        return {
            "model": self.model.to_json(),
            "target": self.target.to_json(),
            "aliases": [a.to_json() for a in self.aliases],
        }

    @classmethod
    def from_json(cls, value: Any) -> CanonicalModelRegistration:
        """Read :meth:`to_json`'s object; the aliases are normalised again."""
        obj = _json_obj(value, "CanonicalModelRegistration")
        aliases = _json_field(obj, "aliases", "CanonicalModelRegistration")
        if not isinstance(aliases, list):
            raise IdentityError(
                IdentityVariant.Json, "aliases must be a list", field="aliases", value=aliases
            )
        return cls.with_target(
            CanonicalModelId.from_json(_json_field(obj, "model", "CanonicalModelRegistration")),
            ModelTarget.from_json(_json_field(obj, "target", "CanonicalModelRegistration")),
            [ModelAlias.from_json(a) for a in aliases],
        )


def _alias(value: ModelAlias | str) -> ModelAlias:
    return value if isinstance(value, ModelAlias) else ModelAlias(value)


def resolve_registration(
    registrations: Iterable[CanonicalModelRegistration], requested_model: str
) -> CanonicalModelRegistration:
    """The first registration whose model or one of whose aliases is ``requested_model``.

    Mirrors upstream's query path (the first match in advertised order wins).
    """
    regs = list(registrations)
    for registration in regs:
        if registration.matches(requested_model):
            return registration
    known = [r.model.value for r in regs]
    raise IdentityError(
        IdentityVariant.UnknownModel,
        f"model {requested_model!r} matches no registration (known: {', '.join(known) or '-'})",
        field="requested_model",
        value=requested_model,
        requested_model=requested_model,
        known=tuple(known),
    )


def resolve_lora_name(
    registrations: Iterable[CanonicalModelRegistration], requested_model: str
) -> str | None:
    """The adapter name that salts a request's block hashes: the *canonical* adapter, even when
    the request names an alias; None when the resolved target is a base model."""
    return resolve_registration(registrations, requested_model).lora_name
