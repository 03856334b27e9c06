"""Every error cbi1kit raises: one root and a family per stage, each naming upstream's variant.

A family is one class; which rule was broken is its ``variant``, a member of the family's
``StrEnum`` (upstream's enum variant name where upstream has one: ``Cbi1Variant.Checksum``),
with an optional ``subvariant`` for upstream's nested enums (``Format(Mismatch)`` is variant
``Format``, subvariant ``Mismatch``). Callers catch a family and branch on ``variant``. Families
about bad input also subclass ``ValueError``; a variant that is also a builtin error raises a
fixed subclass (``Cbi1EOF(Cbi1Error, EOFError)``). Each error carries where it was detected
(``offset``, ``field``) and what was expected against what was found. See docs/api.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar, Final, Generic, Self, cast

from typing_extensions import TypeVar

__all__ = [
    "CLI_EXIT_CODES",
    "CaptureEOF",
    "CaptureError",
    "CaptureVariant",
    "Cbi1EOF",
    "Cbi1Error",
    "Cbi1Variant",
    "Cbi1kitError",
    "CkfError",
    "CkfVariant",
    "CliError",
    "CliVariant",
    "DatasetError",
    "DatasetVariant",
    "FleetError",
    "FleetRuntimeError",
    "FleetVariant",
    "HashingError",
    "HashingOverflowError",
    "HashingTypeError",
    "HashingVariant",
    "IdentityError",
    "IdentityLookupError",
    "IdentityVariant",
    "KvCacheEventError",
    "KvCacheEventVariant",
    "LaneError",
    "LaneLookupError",
    "LaneValueError",
    "LaneVariant",
    "OutputError",
    "OutputVariant",
    "PublicationError",
    "PublicationOverflowError",
    "PublicationVariant",
    "RecorderError",
    "RecorderVariant",
    "RelayWireError",
    "RelayWireVariant",
    "SimulationError",
    "SimulationRuntimeError",
    "SimulationVariant",
    "TransportError",
    "TransportVariant",
    "VizError",
    "VizRuntimeError",
    "VizVariant",
    "error_name",
]


class Cbi1Variant(StrEnum):
    """The variants of ``Cbi1Error``."""

    Truncated = "Truncated"
    FrameTooLarge = "FrameTooLarge"
    Magic = "Magic"
    WireVersion = "WireVersion"
    Flags = "Flags"
    Checksum = "Checksum"
    Malformed = "Malformed"
    Format = "Format"
    DeltaImageCount = "DeltaImageCount"
    SnapshotChunkWordCount = "SnapshotChunkWordCount"
    BucketIndex = "BucketIndex"
    InvalidImage = "InvalidImage"
    LaneArray = "LaneArray"
    SnapshotBucketCount = "SnapshotBucketCount"
    ChunkSequence = "ChunkSequence"
    IncompleteCoverage = "IncompleteCoverage"


class RelayWireVariant(StrEnum):
    """The variants of ``RelayWireError``."""

    ContractMarker = "ContractMarker"
    ProtocolVersion = "ProtocolVersion"
    PoolIdentityVersion = "PoolIdentityVersion"
    MissingField = "MissingField"
    DigestLength = "DigestLength"
    IdentitySource = "IdentitySource"
    LayoutGeneration = "LayoutGeneration"
    ZeroFormatField = "ZeroFormatField"
    UnsupportedCkfFormat = "UnsupportedCkfFormat"
    BucketCountTooLarge = "BucketCountTooLarge"
    BucketCount = "BucketCount"
    UpdateKind = "UpdateKind"
    Sequence = "Sequence"
    Payload = "Payload"
    SubscriberId = "SubscriberId"
    Descriptor = "Descriptor"


class HashingVariant(StrEnum):
    """The variants of ``HashingError``."""

    BlockSize = "BlockSize"
    BlockSizeRange = "BlockSizeRange"
    TokenRange = "TokenRange"
    TokenType = "TokenType"
    MultimodalInfo = "MultimodalInfo"
    MmHashRange = "MmHashRange"
    BlockHashArgument = "BlockHashArgument"
    SequenceHashInput = "SequenceHashInput"
    TooFewTokens = "TooFewTokens"


class IdentityVariant(StrEnum):
    """The variants of ``IdentityError``."""

    Json = "Json"
    Parse = "Parse"
    Range = "Range"
    CanonicalModelId = "CanonicalModelId"
    ModelAlias = "ModelAlias"
    NotALora = "NotALora"
    UnknownModel = "UnknownModel"
    UnknownHashFormat = "UnknownHashFormat"
    QuerySemantics = "QuerySemantics"
    KvQuerySemantics = "KvQuerySemantics"
    IdentitySpec = "IdentitySpec"
    CanonicalModelRegistration = "CanonicalModelRegistration"


class CkfVariant(StrEnum):
    """The variants of ``CkfError``."""

    Config = "Config"
    Addressing = "Addressing"
    Slot = "Slot"
    FingerprintNotFound = "FingerprintNotFound"
    InvalidMaxKicks = "InvalidMaxKicks"
    PublisherFenced = "PublisherFenced"
    Usage = "Usage"


class KvCacheEventVariant(StrEnum):
    """The variants of ``KvCacheEventError``."""

    CapacityExhausted = "CapacityExhausted"
    IndexerInvariantViolation = "IndexerInvariantViolation"
    InvalidBlockSequence = "InvalidBlockSequence"
    OwnershipDegreeOverflow = "OwnershipDegreeOverflow"
    ParentBlockNotFound = "ParentBlockNotFound"
    UnsupportedResidencyDomain = "UnsupportedResidencyDomain"


class LaneVariant(StrEnum):
    """The variants of ``LaneError``."""

    Manifest = "Manifest"
    Assignment = "Assignment"
    Fault = "Fault"
    AwaitingSnapshot = "AwaitingSnapshot"
    SequenceNotReplayed = "SequenceNotReplayed"
    HistoryNotKept = "HistoryNotKept"
    TimeNotRecorded = "TimeNotRecorded"
    SeveralLanes = "SeveralLanes"
    NoSuchLane = "NoSuchLane"
    SeveralDomains = "SeveralDomains"
    NoCatalog = "NoCatalog"
    NotReady = "NotReady"
    At = "At"
    DifferentFormats = "DifferentFormats"
    NotALane = "NotALane"
    MaxAge = "MaxAge"


class PublicationVariant(StrEnum):
    """The variants of ``PublicationError``."""

    Format = "Format"
    Wire = "Wire"
    SnapshotBucketCount = "SnapshotBucketCount"
    BucketIndexOverflow = "BucketIndexOverflow"
    UnsupportedFormatIdentity = "UnsupportedFormatIdentity"


class CaptureVariant(StrEnum):
    """The variants of ``CaptureError``."""

    Truncated = "Truncated"
    Corrupt = "Corrupt"
    Malformed = "Malformed"
    Unreadable = "Unreadable"
    Changed = "Changed"
    Segments = "Segments"
    Npy = "Npy"
    Usage = "Usage"


class OutputVariant(StrEnum):
    """The variants of ``OutputError``."""

    Exists = "Exists"
    SourceInside = "SourceInside"
    NotAFile = "NotAFile"
    Unwritable = "Unwritable"


class DatasetVariant(StrEnum):
    """The variants of ``DatasetError``."""

    NotADataset = "NotADataset"
    SchemaVersion = "SchemaVersion"
    Conflict = "Conflict"
    Unreadable = "Unreadable"
    Busy = "Busy"


class FleetVariant(StrEnum):
    """The variants of ``FleetError``."""

    Cluster = "Cluster"
    Query = "Query"
    MainGuard = "MainGuard"


class RecorderVariant(StrEnum):
    """The variants of ``RecorderError``."""

    Stopped = "Stopped"
    Invalid = "Invalid"
    Usage = "Usage"
    Unreachable = "Unreachable"


class TransportVariant(StrEnum):
    """The variants of ``TransportError``."""

    Certificate = "Certificate"
    PrivateKey = "PrivateKey"
    Header = "Header"
    Authority = "Authority"
    Target = "Target"
    Pairing = "Pairing"


class SimulationVariant(StrEnum):
    """The variants of ``SimulationError``."""

    Config = "Config"
    Workload = "Workload"
    Relay = "Relay"
    RoundTrip = "RoundTrip"


class VizVariant(StrEnum):
    """The variants of ``VizError``."""

    Chart = "Chart"
    ChartData = "ChartData"
    Report = "Report"


class CliVariant(StrEnum):
    """The variants of ``CliError``: the README's exit codes by name (``CLI_EXIT_CODES``)."""

    Invalid = "Invalid"
    Usage = "Usage"
    Unreadable = "Unreadable"
    Interrupted = "Interrupted"


#: each ``CliVariant``'s exit code (the README's table)
CLI_EXIT_CODES: Final[Mapping[CliVariant, int]] = {
    CliVariant.Invalid: 1,
    CliVariant.Usage: 2,
    CliVariant.Unreadable: 3,
    CliVariant.Interrupted: 130,
}


#: a family's variant enum (the root's variants are any family's)
V_co = TypeVar("V_co", bound=StrEnum, default=StrEnum, covariant=True)


def _show(value: Any) -> str:
    """Integers in hex and decimal (exact u64), everything else as repr."""
    if isinstance(value, bool) or not isinstance(value, int):
        return repr(value)
    if 0 <= value < 10:
        return str(value)
    return f"0x{value:x} ({value})"


class Cbi1kitError(Exception, Generic[V_co]):
    """Root of every error this package raises on purpose.

    ``variant`` is a member of the family's enum (its name as a string is accepted and checked);
    ``subvariant`` names upstream's nested variant; ``message`` replaces the generated text.
    """

    #: the family's variants (set by each family)
    Variant: ClassVar[type[StrEnum]] = StrEnum
    summaries: ClassVar[Mapping[str, str]] = {}
    #: the detail alone is the message (families whose details are whole sentences)
    plain: ClassVar[bool] = False

    def __new__(cls, variant: V_co, *args: Any, **kwargs: Any) -> Self:
        family = cls.family()
        fixed = _MIXINS.get((family.Variant(variant), family)) if cls is family else None
        return super().__new__(cls if fixed is None else cast(type[Self], fixed))

    def __init__(
        self,
        variant: V_co,
        detail: str | None = None,
        *,
        subvariant: str | None = None,
        offset: int | None = None,
        field: str | None = None,
        expected: Any = None,
        actual: Any = None,
        message: str | None = None,
        **context: Any,
    ) -> None:
        self.variant: V_co = cast(V_co, self.family().Variant(variant))
        self.subvariant = subvariant
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

    @classmethod
    def family(cls) -> type[Cbi1kitError]:
        """The family class (``Cbi1Error`` for a ``Cbi1EOF``): the one that names the enum."""
        return next(c for c in cls.__mro__ if "Variant" in c.__dict__)

    @property
    def name(self) -> str:
        """``Family.Variant`` (``Cbi1Error.Checksum``): how reports and tables name the error."""
        return f"{self.family().__name__}.{self.variant}"

    @property
    def variant_path(self) -> str:
        """``Variant`` or ``Variant.Subvariant``."""
        return f"{self.variant}.{self.subvariant}" if self.subvariant else str(self.variant)

    @property
    def summary(self) -> str:
        """The variant's one-line meaning, from the family's ``summaries``."""
        return (
            self.summaries.get(self.variant_path)
            or self.summaries.get(self.variant)
            or str(self.variant)
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

    def _arguments(self) -> dict[str, Any]:
        """Every argument the error was made with but its variant, by keyword: what pickling
        rebuilds it from, and what a copy with a field changed starts from."""
        return {
            "detail": self.detail,
            "subvariant": self.subvariant,
            "offset": self.offset,
            "field": self.field,
            "expected": self.expected,
            "actual": self.actual,
            "message": self._text,
            **self.context,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.family(), self.variant, self._arguments()))


def error_name(error: BaseException) -> str:
    """How reports and tables name an error: ``Family.Variant`` for ours, else the class name."""
    return error.name if isinstance(error, Cbi1kitError) else type(error).__name__


def one_line(text: str) -> str:
    """A message on one line, its runs of whitespace one space: an error reaches the command
    line as one line, and some libraries' own messages (protobuf's, papermill's, polars') span
    several. (Not in ``__all__``: the module's front is its families and ``error_name``.)"""
    return " ".join(text.split())


def _rebuild(cls: type[Cbi1kitError], variant: StrEnum, kwargs: dict[str, Any]) -> Cbi1kitError:
    """Every argument by keyword, so families with their own positional order rebuild too."""
    return cls(variant, **kwargs)


class Cbi1Error(Cbi1kitError[Cbi1Variant], ValueError):
    """A CBI1 frame, or an encoder input, that upstream's codec rejects.

    ``variant`` is upstream's ``ImagesWireError`` variant (``Format`` carries upstream's
    ``FormatError`` variant as ``subvariant``); ``offset`` is the byte in the frame (``None``
    for encoder-side and assembly errors); ``field`` the layout path (``delta.images[3].bucket``).
    """

    Variant = Cbi1Variant

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
        "LaneArray": "lane array is not the format's uint64[bucket_count]",
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
        return self.subvariant if self.variant is Cbi1Variant.Format else None

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
        """``BucketIndex``: the lane's bucket count the bucket broke."""
        return int(self.expected)


class RelayWireError(Cbi1kitError[RelayWireVariant], ValueError):
    """A ``dynamo.kvrelay.v1`` message that breaks the v1 contract; ``field`` is its protobuf
    path (``FilterUpdate.producer.ckf_format.seed``)."""

    Variant = RelayWireVariant

    summaries: ClassVar[Mapping[str, str]] = {
        "ContractMarker": "wrong relay contract marker",
        "ProtocolVersion": "unsupported relay protocol version",
        "PoolIdentityVersion": "unsupported pool identity version",
        "MissingField": "required message field is missing",
        "DigestLength": "identity digest is not 16 bytes",
        "IdentitySource": "identity source is unspecified or unknown",
        "LayoutGeneration": "layout generation must be nonzero",
        "ZeroFormatField": "a CKF format field is zero",
        "UnsupportedCkfFormat": "unsupported CKF format",
        "BucketCountTooLarge": "CKF bucket count above 16777216 is unsupported",
        "BucketCount": "CKF bucket count is not a power of two in 2..=16777216",
        "UpdateKind": "unspecified or unknown FilterUpdate kind",
        "Sequence": "base_sequence/sequence break the rule for this kind",
        "Payload": "payload presence breaks the rule for this kind",
        "SubscriberId": "subscriber_id has a bad length or a control character",
        "Descriptor": "pool descriptor metadata is invalid",
    }

    def __init__(
        self,
        variant: RelayWireVariant,
        field: str,
        *,
        expected: Any = None,
        actual: Any = None,
        detail: str | None = None,
        **context: Any,
    ) -> None:
        super().__init__(variant, detail, field=field, expected=expected, actual=actual, **context)


class HashingError(Cbi1kitError[HashingVariant], ValueError):
    """Tokens, block sizes or options that upstream's block hashing refuses."""

    Variant = HashingVariant

    plain = True


class IdentityError(Cbi1kitError[IdentityVariant], ValueError):
    """A model, pool, producer or digest identity that upstream would not construct.

    The detail is the whole message; ``field`` and ``value`` say what was refused.
    """

    Variant = IdentityVariant

    plain = True


class CkfError(Cbi1kitError[CkfVariant], ValueError):
    """The CKF model refused a configuration, an address or a table operation; ``Usage``: a
    call given an argument it cannot take (``field`` names it)."""

    Variant = CkfVariant

    plain = True


class KvCacheEventError(Cbi1kitError[KvCacheEventVariant]):
    """An event outcome upstream reports as ``KvCacheEventError::<variant>``."""

    Variant = KvCacheEventVariant

    plain = True


class LaneError(Cbi1kitError[LaneVariant]):
    """The consumer side: a manifest or lane assignment upstream refuses (``Manifest.<variant>``,
    ``Assignment.<variant>``), a lane fault (``Fault.<variant>``), or a point of a replay that
    cannot be named (a sequence or time not replayed, several lanes or domains, a bad moment, a
    lane not ready then), or lanes that cannot be compared (``DifferentFormats``, ``NotALane``),
    or a staleness limit that is no positive duration (``MaxAge``).
    """

    Variant = LaneVariant

    plain = True


class PublicationError(Cbi1kitError[PublicationVariant], ValueError):
    """Upstream's relay adapter refused a snapshot or delta (``Cbi1AdapterError``)."""

    Variant = PublicationVariant

    plain = True


class CaptureError(Cbi1kitError[CaptureVariant], ValueError):
    """Input that cannot be read as records: a capture, a grpcurl dump, bare frames.

    ``offset`` is the byte offset, ``record_index`` the 0-based record, ``source`` the file.
    ``Usage``: a writer or reader call given an argument it cannot take (``field`` names it).
    """

    Variant = CaptureVariant

    def _message(self) -> str:
        if self.variant is CaptureVariant.Usage:  # no place in any input: the call's fault
            return self.detail or ""
        source = self.context.get("source")
        where = f"{source}: " if source else ""
        at = f" field {self.field}" if self.field else ""
        record = self.context.get("record_index")
        return f"{where}record {record} at byte offset {self.offset}{at}: {self.detail}"

    @property
    def reason(self) -> str:
        """Why the capture is damaged, in words (empty when not said)."""
        return self.detail or ""

    @property
    def record_index(self) -> int:
        """The record the damage is at (-1: none known)."""
        return int(self.context.get("record_index", -1))

    @property
    def at(self) -> int:
        """The byte offset (always known for input errors)."""
        return 0 if self.offset is None else self.offset

    @property
    def path(self) -> str | None:
        """The capture file the error is about, when known."""
        return None if (source := self.context.get("source")) is None else str(source)


class OutputError(Cbi1kitError[OutputVariant]):
    """A file a command would write: ``Exists`` (not written by this run; overwrite only when
    asked), ``SourceInside`` (the output would land on an input, such as the notebooks a report
    executes), ``NotAFile`` (a device, pipe or socket: never replaced by a file),
    ``Unwritable`` (writing it failed, a full disk say: nothing of it is left)."""

    Variant = OutputVariant

    plain = True


class DatasetError(Cbi1kitError[DatasetVariant]):
    """A partitioned dataset (``cbi1kit export --dataset``, ``cbi1kit.fleet``) that cannot be
    used: ``NotADataset`` (no ``cbi1kit-dataset.json``), ``SchemaVersion`` (written by a cbi1kit
    with other table columns: appending to it or reading it is refused), ``Conflict`` (a
    segment of a recording already in it with other content), ``Unreadable`` (a table file or
    a source's manifest that cannot be read, named), ``Busy`` (another export is writing it)."""

    Variant = DatasetVariant

    plain = True


class FleetError(Cbi1kitError[FleetVariant], ValueError):
    """What a fleet run cannot use: a Dask scheduler address or worker count (``Cluster``), a
    query it does not know (``Query``), a script's cluster outside its guard (``MainGuard``)."""

    Variant = FleetVariant

    plain = True


class RecorderError(Cbi1kitError[RecorderVariant]):
    """A recording session that cannot go on; ``exit_code`` follows the CLI's contract."""

    Variant = RecorderVariant

    plain = True
    exit_code: int = 1


class TransportError(Cbi1kitError[TransportVariant], ValueError):
    """A gRPC transport setting that cannot be used, found before any connection is made: a
    certificate or key file (``field`` is the option that named it), an auth header gRPC would
    not send, an authority, a relay address; the CLI answers it as a usage error."""

    Variant = TransportVariant

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


class SimulationError(Cbi1kitError[SimulationVariant], ValueError):
    """A workload, simulator setting or simulated relay event the simulation cannot take."""

    Variant = SimulationVariant

    plain = True


class VizError(Cbi1kitError[VizVariant], ValueError):
    """A chart given a table it cannot draw, or a report that could not be built."""

    Variant = VizVariant

    plain = True


class CliError(Cbi1kitError[CliVariant]):
    """A command's one-line failure and its exit code: ``CliError(message, code)``, the
    variant named after the code (``CLI_EXIT_CODES``)."""

    Variant = CliVariant

    plain = True

    def __new__(cls, message: str, code: int = 3) -> Self:
        return Exception.__new__(cls)

    def __init__(self, message: str, code: int = 3) -> None:
        variant = next((v for v, c in CLI_EXIT_CODES.items() if c == code), None)
        if variant is None:
            raise ValueError(f"no exit code {code} in the README's table")
        super().__init__(variant, message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return (CliError, (self.detail, self.code))


class Cbi1EOF(Cbi1Error, EOFError):
    """A frame shorter than the CBI1 header."""


class CaptureEOF(CaptureError, EOFError):
    """Input that ends inside a record."""


class HashingOverflowError(HashingError, OverflowError):
    """A number outside the binding's unsigned range."""


class HashingTypeError(HashingError, TypeError):
    """An argument of a type the binding refuses."""


class IdentityLookupError(IdentityError, LookupError):
    """A model the registry does not know."""


class LaneLookupError(LaneError, LookupError):
    """A point of a replay that cannot be named."""


class LaneValueError(LaneError, ValueError):
    """A moment or lanes that cannot be used as given."""


class PublicationOverflowError(PublicationError, OverflowError):
    """A bucket index past u32."""


class FleetRuntimeError(FleetError, RuntimeError):
    """A local cluster started outside a script's ``__main__`` guard."""


class SimulationRuntimeError(SimulationError, RuntimeError):
    """The simulated relay failed."""


class VizRuntimeError(VizError, RuntimeError):
    """A report that could not be built."""


#: the fixed subclass a family raises for a variant that is also a builtin error
_MIXINS: dict[tuple[StrEnum, type[Cbi1kitError]], type[Cbi1kitError]] = {
    (variant, mixin.family()): mixin
    for mixin, variants in (
        (Cbi1EOF, [Cbi1Variant.Truncated]),
        (CaptureEOF, [CaptureVariant.Truncated]),
        (HashingOverflowError, [HashingVariant.BlockSizeRange, HashingVariant.TokenRange]),
        (HashingOverflowError, [HashingVariant.MmHashRange]),
        (HashingTypeError, [HashingVariant.TokenType, HashingVariant.BlockHashArgument]),
        (IdentityLookupError, [IdentityVariant.UnknownModel]),
        (LaneLookupError, [LaneVariant.SequenceNotReplayed, LaneVariant.HistoryNotKept]),
        (LaneLookupError, [LaneVariant.TimeNotRecorded, LaneVariant.SeveralLanes]),
        (LaneLookupError, [LaneVariant.NoSuchLane, LaneVariant.SeveralDomains]),
        (LaneLookupError, [LaneVariant.NoCatalog, LaneVariant.NotReady]),
        (LaneValueError, [LaneVariant.At, LaneVariant.DifferentFormats]),
        (LaneValueError, [LaneVariant.NotALane, LaneVariant.MaxAge]),
        (PublicationOverflowError, [PublicationVariant.BucketIndexOverflow]),
        (FleetRuntimeError, [FleetVariant.MainGuard]),
        (SimulationRuntimeError, [SimulationVariant.Relay]),
        (VizRuntimeError, [VizVariant.Report]),
    )
    for variant in variants
}
