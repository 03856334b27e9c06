"""Regenerate the checked-in ``kvrelay_v1_pb2*`` modules from ``kvrelay_v1.proto``
(``python -m cbi1kit._proto.regenerate``): ``grpc_tools.protoc`` with ``--python_out``,
``--pyi_out`` and ``--grpc_python_out``, then two edits. The gRPC module's absolute
``import kvrelay_v1_pb2`` becomes package-relative; the ``.pyi`` gets
``# mypy: disable-error-code="type-arg"`` (bare ``Mapping``) and the gRPC module
``# mypy: ignore-errors`` (``grpc`` has no stubs). Checked in so that installing cbi1kit needs
no protobuf compiler.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE / "kvrelay_v1.proto"
GRPC_MODULE = HERE / "kvrelay_v1_pb2_grpc.py"
STUB = HERE / "kvrelay_v1_pb2.pyi"
GRPC_PRAGMA = "# mypy: ignore-errors\n"
STUB_PRAGMA = '# mypy: disable-error-code="type-arg"\n'


def main() -> int:
    """Run protoc through ``grpc_tools`` and make the gRPC module's import package-relative."""
    from grpc_tools import protoc  # dev dependency; imported here so the package never needs it

    args = [
        "grpc_tools.protoc",
        f"-I{HERE}",
        f"--python_out={HERE}",
        f"--pyi_out={HERE}",
        f"--grpc_python_out={HERE}",
        str(PROTO),
    ]
    status = protoc.main(args)
    if status != 0:
        print(f"protoc failed with status {status}", file=sys.stderr)
        return int(status)
    text = GRPC_MODULE.read_text()
    fixed, count = re.subn(
        r"^import kvrelay_v1_pb2 as ", "from . import kvrelay_v1_pb2 as ", text, flags=re.M
    )
    if count != 1:
        print("expected exactly one absolute kvrelay_v1_pb2 import to rewrite", file=sys.stderr)
        return 1
    if not fixed.startswith(GRPC_PRAGMA):
        fixed = GRPC_PRAGMA + fixed
    GRPC_MODULE.write_text(fixed)
    stub = STUB.read_text()
    if not stub.startswith(STUB_PRAGMA):
        STUB.write_text(STUB_PRAGMA + stub)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
