"""Every error cbi1kit raises: one root and a family per stage, each naming upstream's variant.

A family is one class; which rule was broken is its ``variant`` (upstream's enum variant name
where upstream has one, ``Checksum``, ``ContractMarker``, ``BucketIndexOverflow``), with an
optional ``subvariant`` for upstream's nested enums (``Format(Mismatch)`` is variant ``Format``,
subvariant ``Mismatch``). Callers catch a family and branch on ``variant``, as they would match
upstream's enum. Families that are about bad input also subclass ``ValueError``.

Every instance carries where it was detected (``offset``, ``field``, the dotted field path) and
what was expected against what was found; the message says all of it. Extra context a family
needs (``record_index``, ``lane``, ``bucket``, ...) is set as attributes from keyword arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "CaptureError",
    "Cbi1Error",
    "Cbi1kitError",
    "CkfError",
    "DatasetError",
    "HashingError",
    "IdentityError",
    "KvCacheEventError",
    "LaneError",
    "OutputError",
    "PublicationError",
    "RecorderError",
    "RelayWireError",
    "SimulationError",
    "TransportError",
    "VizError",
    "error_name",
]


def _show(value: Any) -> str:
    """Integers in hex and decimal (exact u64), everything else as repr."""
    if isinstance(value, bool) or not isinstance(value, int):
        return repr(value)
    if 0 <= value < 10:
        return str(value)
    return f"0x{value:x} ({value})"


class Cbi1kitError(Exception):
    """Root of every error this package raises on purpose.

    ``variant`` may be given dotted (``"Format.Mismatch"``) to set ``subvariant`` too.
    ``message`` replaces the generated text where a family words its own.
    """

    summaries: ClassVar[Mapping[str, str]] = {}
    #: the detail alone is the message (families whose details are whole sentences)
    plain: ClassVar[bool] = False
    #: variants that are also a builtin error (``Truncated`` is an ``EOFError``), as the Python
    #: binding and the standard library raise them; the instance's class mixes that in
    builtins: ClassVar[Mapping[str, type[Exception]]] = {}

    def __new__(cls, variant: str, *args: Any, **kwargs: Any) -> Cbi1kitError:
        extra = cls.builtins.get(variant.partition(".")[0])
        mixed = cls if extra is None or issubclass(cls, extra) else _with_builtin(cls, extra)
        return super().__new__(mixed)

    def __init__(
        self,
        variant: str,
        detail: str | None = None,
        *,
        offset: int | None = None,
        field: str | None = None,
        expected: Any = None,
        actual: Any = None,
        message: str | None = None,
        **context: Any,
    ) -> None:
        self.variant, _, sub = variant.partition(".")
        self.subvariant: str | None = sub or None
        self.detail = detail
        self.offset = offset
        self.field = field
        self.expected = expected
        self.actual = actual
        self.context = context
        for name, value in context.items():
            if not isinstance(getattr(type(self), name, None), property):
                setattr(self, name, value)
        self._text = message
        super().__init__(message if message is not None else self._message())

    @property
    def name(self) -> str:
        """``Family.Variant`` (``Cbi1Error.Checksum``): how reports and tables name the error."""
        return f"{type(self).__name__}.{self.variant}"

    @property
    def variant_path(self) -> str:
        """``Variant`` or ``Variant.Subvariant``, as given to the constructor."""
        return f"{self.variant}.{self.subvariant}" if self.subvariant else self.variant

    @property
    def summary(self) -> str:
        return (
            self.summaries.get(self.variant_path)
            or self.summaries.get(self.variant)
            or self.variant
        )

    def _where(self) -> str:
        if self.field is not None:
            where = f" at {self.field}"
            if self.offset is not None:
                where += f" (offset {self.offset})"
            return where
        return "" if self.offset is None else f" at offset {self.offset}"

    def _message(self) -> str:
        if self.plain and self.detail:
            return self.detail
        text = f"{self.summary}{self._where()}"
        if self.detail:
            text += f": {self.detail}"
        elif self.expected is not None or self.actual is not None:
            text += f": expected {_show(self.expected)}, got {_show(self.actual)}"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs = {
            "detail": self.detail,
            "offset": self.offset,
            "field": self.field,
            "expected": self.expected,
            "actual": self.actual,
            "message": self._text,
            **self.context,
        }
        family = type(self).__dict__.get("_family", type(self))
        return (_rebuild, (family, self.variant_path, kwargs))


_MIXED: dict[tuple[type[Cbi1kitError], type[Exception]], type[Cbi1kitError]] = {}


def error_name(error: BaseException) -> str:
    """How reports and tables name an error: ``Family.Variant`` for ours, else the class name."""
    return error.name if isinstance(error, Cbi1kitError) else type(error).__name__


def one_line(text: str) -> str:
    """A message on one line, its runs of whitespace one space: an error reaches the command
    line as one line, and some libraries' own messages (protobuf's, papermill's, polars') span
    several. (Not in ``__all__``: the module's front is its families and ``error_name``.)"""
    return " ".join(text.split())


def _with_builtin(family: type[Cbi1kitError], extra: type[Exception]) -> type[Cbi1kitError]:
    """The family's class for a variant that is also ``extra``: same name, same family."""
    mixed = _MIXED.get((family, extra))
    if mixed is None:
        names = {"__module__": family.__module__, "__qualname__": family.__qualname__}
        mixed = type(family.__name__, (family, extra), {**names, "_family": family})
        _MIXED[family, extra] = mixed
    return mixed


def _rebuild(cls: type[Cbi1kitError], variant: str, kwargs: dict[str, Any]) -> Cbi1kitError:
    """Every argument by keyword, so families with their own positional order rebuild too."""
    return cls(variant, **kwargs)


class Cbi1Error(Cbi1kitError, ValueError):
    """A CBI1 frame, or an encoder input, that upstream's codec rejects.

    ``variant`` is upstream's ``ImagesWireError`` variant (``Format`` carries upstream's
    ``FormatError`` variant as ``subvariant``); ``offset`` is the byte in the frame (``None``
    for encoder-side and assembly errors); ``field`` the layout path (``delta.images[3].bucket``).
    """

    builtins: ClassVar[Mapping[str, type[Exception]]] = {"Truncated": EOFError}

    summaries: ClassVar[Mapping[str, str]] = {
        "Truncated": "frame shorter than the CBI1 header",
        "FrameTooLarge": "CBI1 frame exceeds the maximum size",
        "Magic": "bad CBI1 magic",
        "Magic.Legacy": "not a CBI1 frame: this is a legacy CKF1 prototype frame",
        "WireVersion": "unsupported CBI1 wire version",
        "Flags": "unknown CBI1 frame flags",
        "Checksum": "checksum mismatch",
        "Malformed": "CBI1 frame body is malformed",
        "Format": "CKF format error",
        "Format.Version": "unsupported CKF format version",
        "Format.FingerprintBits": "unsupported fingerprint width",
        "Format.SlotsPerBucket": "unsupported slots per bucket",
        "Format.Mismatch": "format mismatch",
        "Format.BucketCount": "bucket count is not a power of two in 2..=16777216",
        "DeltaImageCount": "delta has more images than the CBI1 maximum",
        "SnapshotChunkWordCount": "snapshot chunk has more words than the CBI1 maximum",
        "BucketIndex": "bucket index outside the declared lane",
        "InvalidImage": "delta image is not a (u32 bucket, u64 word) pair",
        "SnapshotBucketCount": "snapshot lane length differs from the format's bucket count",
        "ChunkSequence": "snapshot chunk sequence violation",
        "IncompleteCoverage": "snapshot chunks do not cover the lane",
    }

    @property
    def value(self) -> Any:
        """The offending value (upstream's tuple-variant payload, e.g. ``WireVersion(2)``)."""
        return self.actual

    @property
    def maximum(self) -> Any:
        """The bound that was exceeded, for the count and size variants."""
        return self.expected

    @property
    def format_variant(self) -> str | None:
        """Upstream's ``FormatError`` variant, for ``Format`` errors."""
        return self.subvariant if self.variant == "Format" else None

    @property
    def seed(self) -> int:
        """``Format(Mismatch)``: the frame's seed (``actual`` is ``(seed, buckets)``)."""
        return int(self.actual[0])

    @property
    def buckets(self) -> int:
        """``Format(Mismatch)``: the frame's bucket count."""
        return int(self.actual[1])

    @property
    def bucket(self) -> int:
        """``BucketIndex``: the bucket (``expected`` is the lane's bucket count)."""
        return int(self.actual)

    @property
    def bucket_count(self) -> int:
        return int(self.expected)


class RelayWireError(Cbi1kitError, ValueError):
    """A ``dynamo.kvrelay.v1`` message that breaks the v1 contract; ``field`` is its protobuf
    path (``FilterUpdate.producer.ckf_format.seed``)."""

    summaries: ClassVar[Mapping[str, str]] = {
        "ContractMarker": "wrong relay contract marker",
        "ProtocolVersion": "unsupported relay protocol version",
        "PoolIdentityVersion": "unsupported pool identity version",
        "MissingField": "required message field is missing",
        "DigestLength": "identity digest is not 16 bytes",
        "IdentitySource": "identity source is unspecified or unknown",
        "LayoutGeneration": "layout generation must be nonzero",
        "UnsupportedCkfFormat": "unsupported CKF format",
        "BucketCount": "CKF bucket count is not a power of two in 2..=16777216",
        "UpdateKind": "unspecified or unknown FilterUpdate kind",
        "Sequence": "base_sequence/sequence break the rule for this kind",
        "Payload": "payload presence breaks the rule for this kind",
        "SubscriberId": "subscriber_id must be 1..128 bytes without control characters",
        "Descriptor": "pool descriptor metadata is invalid",
    }

    def __init__(
        self,
        variant: str,
        field: str,
        *,
        expected: Any = None,
        actual: Any = None,
        detail: str | None = None,
        **context: Any,
    ) -> None:
        super().__init__(variant, detail, field=field, expected=expected, actual=actual, **context)


class HashingError(Cbi1kitError, ValueError):
    """Tokens, block sizes or options that upstream's block hashing refuses."""

    builtins: ClassVar[Mapping[str, type[Exception]]] = {
        "BlockSizeRange": OverflowError,
        "TokenRange": OverflowError,
        "MmHashRange": OverflowError,
        "TokenType": TypeError,
        "BlockHashArgument": TypeError,
    }

    plain = True


class IdentityError(Cbi1kitError, ValueError):
    """A model, pool, producer or digest identity that upstream would not construct.

    The detail is the whole message; ``field`` and ``value`` say what was refused.
    """

    builtins: ClassVar[Mapping[str, type[Exception]]] = {"UnknownModel": LookupError}

    plain = True


class CkfError(Cbi1kitError, ValueError):
    """The CKF model refused a configuration, an address or a table operation."""

    plain = True


class KvCacheEventError(Cbi1kitError):
    """An event outcome upstream reports as ``KvCacheEventError::<variant>``."""

    plain = True


class LaneError(Cbi1kitError):
    """The consumer side: a manifest or lane assignment upstream refuses (``Manifest.<variant>``,
    ``Assignment.<variant>``), a lane fault (``Fault.<variant>``), or a point of a replay that
    cannot be named (a sequence or time not replayed, several lanes or domains, a bad moment, a
    lane not ready then), or lanes that cannot be compared (``DifferentFormats``, ``NotALane``).
    """

    builtins: ClassVar[Mapping[str, type[Exception]]] = {
        "SequenceNotReplayed": LookupError,
        "HistoryNotKept": LookupError,
        "TimeNotRecorded": LookupError,
        "SeveralLanes": LookupError,
        "NoSuchLane": LookupError,
        "SeveralDomains": LookupError,
        "NoCatalog": LookupError,
        "NotReady": LookupError,
        "At": ValueError,
        "DifferentFormats": ValueError,
        "NotALane": ValueError,
    }

    plain = True


class PublicationError(Cbi1kitError, ValueError):
    """Upstream's relay adapter refused a snapshot or delta (``Cbi1AdapterError``)."""

    builtins: ClassVar[Mapping[str, type[Exception]]] = {"BucketIndexOverflow": OverflowError}

    plain = True


class CaptureError(Cbi1kitError, ValueError):
    """Input that cannot be read as records: a capture, a grpcurl dump, bare frames.

    ``offset`` is the byte offset, ``record_index`` the 0-based record, ``source`` the file.
    """

    builtins: ClassVar[Mapping[str, type[Exception]]] = {"Truncated": EOFError}

    def _message(self) -> str:
        source = self.context.get("source")
        where = f"{source}: " if source else ""
        at = f" field {self.field}" if self.field else ""
        record = self.context.get("record_index")
        return f"{where}record {record} at byte offset {self.offset}{at}: {self.detail}"

    @property
    def reason(self) -> str:
        return self.detail or ""

    @property
    def record_index(self) -> int:
        return int(self.context.get("record_index", -1))

    @property
    def at(self) -> int:
        """The byte offset (always known for input errors)."""
        return 0 if self.offset is None else self.offset

    @property
    def path(self) -> str | None:
        source = self.context.get("source")
        return None if source is None else str(source)


class OutputError(Cbi1kitError):
    """A file a command would write: ``Exists`` (not written by this run; overwrite only when
    asked), ``SourceInside`` (the output would land on an input, such as the notebooks a report
    executes), ``NotAFile`` (a device, pipe or socket: never replaced by a file)."""

    plain = True


class DatasetError(Cbi1kitError):
    """A partitioned dataset (``cbi1kit export --dataset``, ``cbi1kit.fleet``) that cannot be
    used: ``NotADataset`` (no ``cbi1kit-dataset.json``), ``SchemaVersion`` (written by a cbi1kit
    with other table columns: appending to it or reading it is refused), ``Conflict`` (a
    segment of a recording already in it with other content), ``Unreadable`` (a table file that
    cannot be read, named)."""

    plain = True


class RecorderError(Cbi1kitError):
    """A recording session that cannot go on; ``exit_code`` follows the CLI's contract."""

    plain = True
    exit_code: int = 1


class TransportError(Cbi1kitError, ValueError):
    """A gRPC transport setting that cannot be used, found before any connection is made: a
    certificate or key file (``field`` is the option that named it), an auth header gRPC would
    not send, an authority, a relay address; the CLI answers it as a usage error."""

    summaries: ClassVar[Mapping[str, str]] = {
        "Certificate": "not a usable PEM certificate file",
        "PrivateKey": "not a usable PEM private key for the certificate",
        "Header": "not a metadata header gRPC can send",
        "Authority": "not an authority",
        "Target": "not a relay address gRPC dials as given",
        "Pairing": "these options go together",
    }

    def _message(self) -> str:
        at = f"{self.field}: " if self.field else ""
        return f"{at}{self.detail}" if self.detail else f"{at}{self.summary}"


class SimulationError(Cbi1kitError, ValueError):
    """A workload, simulator setting or simulated relay event the simulation cannot take."""

    builtins: ClassVar[Mapping[str, type[Exception]]] = {"Relay": RuntimeError}

    plain = True


class VizError(Cbi1kitError, ValueError):
    """A chart given a table it cannot draw, or a report that could not be built."""

    builtins: ClassVar[Mapping[str, type[Exception]]] = {"Report": RuntimeError}

    plain = True
