"""``cbi1kit explain``: one request step by step through each lane."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cbi1kit._json import dumps as to_json
from cbi1kit._text import wrapped
from cbi1kit.cli._common import (
    EXIT_INVALID,
    EXIT_USAGE,
    U64,
    answer_args,
    at_least,
    check_regular_file,
    check_source,
    input_bytes,
    ranged,
    verdict,
    violations_note,
)
from cbi1kit.cli._lanes import at_arg, max_age_arg, replay_source, usage_if_unanswerable
from cbi1kit.errors import Cbi1kitError, CliError

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands

_U32_MAX: Final = (1 << 32) - 1


def _parse_tokens(text: str) -> list[int]:
    """Tokens as text: integers (``0x`` allowed) separated by commas or white space, a JSON
    list's brackets allowed; each a u32. ``ValueError`` names the first bad one."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    items = re.split(r"\s*,\s*|\s+", body.strip())
    if items == [""]:
        raise ValueError("no tokens")
    tokens = []
    for i, item in enumerate(items):
        try:
            value = int(item, 0)
        except ValueError:
            raise ValueError(f"token {i} ({item!r}) is not an integer") from None
        if not 0 <= value <= _U32_MAX:
            raise ValueError(f"token {i} ({item}) is outside 0..={_U32_MAX} (u32)")
        tokens.append(value)
    return tokens


def _token_list(text: str) -> list[int]:
    """``--tokens 1,2,3``: checked at parse time."""
    try:
        return _parse_tokens(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _read_tokens(path: Path) -> list[int]:
    """``--tokens-file``: exit 3 when it cannot be read or is empty, 1 when it holds anything
    but tokens."""
    data = input_bytes(path)
    try:
        return _parse_tokens(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CliError(
            f"{path}: not text ({exc.reason} at byte {exc.start})", EXIT_INVALID
        ) from None
    except ValueError as exc:
        raise CliError(f"{path}: {exc}", EXIT_INVALID) from None


def _trace_request(path: Path, index: int) -> Any:
    """Request ``index`` of a Mooncake trace (a bad trace: exit_code's answer)."""
    from cbi1kit.sim._workload import read_mooncake

    check_regular_file(path)
    workload = read_mooncake(path, limit=index + 1)
    if index >= len(workload):
        raise CliError(
            f"--request {index} is outside {path}'s {len(workload)} request(s)", EXIT_USAGE
        )
    return workload.request(index)


def run(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._shorthands import explain

    check_source(args.capture)
    tokens: list[int] | None = args.tokens
    request = None
    if args.request is not None and args.trace is None:
        raise CliError("--request goes with --trace", EXIT_USAGE)
    if args.tokens_file is not None:
        tokens = _read_tokens(args.tokens_file)
    elif args.trace is not None:
        if args.request is None:
            raise CliError("--trace needs --request N (which request of the trace)", EXIT_USAGE)
        request = _trace_request(args.trace, args.request)
    report = replay_source(args.capture, None, not args.no_progress, history=True)
    try:
        result = explain(
            report,
            model=args.model,
            tokens=tokens,
            request=request,
            at=args.at,
            max_age=args.max_age,
            lora=args.lora,
            local_dc=args.local_dc,
            tie_key=args.tie_key,
            domain=args.domain,
            verification_window=args.verification_window,
        )
    except Cbi1kitError as exc:
        usage_if_unanswerable(exc, {args.capture: report})
        raise
    if args.json:
        print(
            to_json({"capture": str(args.capture), **result.to_dict(), "ok": report.ok}, indent=2)
        )
        return verdict(report.ok)
    print(wrapped(str(result)))
    return violations_note(report)


def register(sub: Commands) -> None:
    """``cbi1kit explain``."""
    from cbi1kit.ckf._limits import DEFAULT_VERIFICATION_WINDOW, MAX_VERIFICATION_WINDOW

    p = sub.add_parser(
        "explain",
        help="one request step by step: hashes, fingerprints, buckets, each lane's slots, depth",
        description="Explain how a global router sees a request for a model at one moment: the "
        "catalog's registration and query semantics for the model (or a LoRA alias), the block "
        "hashes, each block's fingerprint and buckets, then per DC lane of the consumer table "
        "whether a slot of bucket a or b holds the fingerprint and since which snapshot or delta, "
        "the prefix depth upstream's search finds, where the chain breaks (and which delta "
        "removed the block), and the DC the router prefers.",
        epilog="--at as for `cbi1kit view`. Ties at the deepest depth go to --local-dc, then to "
        "the lowest stable rank for --tie-key (the global gateway's request key), then to the "
        "lowest pool id. Whether a match is a true or a false positive cannot be told from the "
        "consumer's side (16-bit fingerprints): ck.explain(..., truth=) in Python can.",
    )
    p.add_argument(
        "capture", type=Path, metavar="CAPTURE", help="kvrcap capture with its catalog stream"
    )
    p.add_argument(
        "--model", required=True, metavar="M", help="a model or alias the catalog's pools register"
    )
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--tokens", type=_token_list, metavar="1,2,3", help="the request's tokens (u32 each)"
    )
    given.add_argument(
        "--tokens-file", type=Path, metavar="F", help="a file of tokens (commas or spaces)"
    )
    given.add_argument(
        "--trace", type=Path, metavar="TRACE", help="a Mooncake trace (with --request)"
    )
    p.add_argument(
        "--request", type=at_least(0), metavar="N", help="which request of --trace (from 0)"
    )
    p.add_argument("--lora", metavar="ALIAS", help="a LoRA alias or adapter of the model")
    at_arg(p)
    max_age_arg(p)
    p.add_argument("--local-dc", metavar="DC", help="the router's own DC: it wins a tie")
    p.add_argument("--tie-key", type=U64, metavar="KEY", help="the request's tie key (u64)")
    p.add_argument(
        "--domain", metavar="PREFIX", help="the indexer domain, when the model spans several"
    )
    p.add_argument(
        "--verification-window",
        type=ranged(1, MAX_VERIFICATION_WINDOW),
        metavar="W",
        default=DEFAULT_VERIFICATION_WINDOW,
        help="the router's prefix-search verification window "
        f"(1..={MAX_VERIFICATION_WINDOW}, default {DEFAULT_VERIFICATION_WINDOW})",
    )
    answer_args(p, "explanation")
    p.set_defaults(handler=run)
