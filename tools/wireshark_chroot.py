"""A newer Debian's tshark in a chroot, for the Wireshark tests.

``python -m tools.wireshark_chroot`` (root, debootstrap) prints a ``PATH=...`` under which
``pytest tests/test_wireshark.py`` runs Debian 13's tshark 4.4 (Lua 5.4) on this machine's
files. /work and /tmp are bound into the chroot at their own paths; an init.lua lets its Lua run
as root, as Debian 12's does.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

_WRAPPER = """#!/bin/sh
exec chroot {root} /usr/bin/env HOME="$HOME" XDG_CONFIG_HOME="$XDG_CONFIG_HOME" \\
  CBI1_XXH3_DIR="$CBI1_XXH3_DIR" /usr/bin/tshark "$@"
"""
_INIT = "enable_lua = true\nrun_user_scripts_when_superuser = true\n"


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True)


def build(root: Path, suite: str) -> Path:
    """The chroot at ``root`` with tshark, its folders bound, and a ``bin/tshark`` beside it."""
    if not (root / "usr/bin/tshark").exists():
        _sh("debootstrap", "--variant=minbase", suite, str(root), "http://deb.debian.org/debian")
        install = "apt-get update -qq && apt-get install -y -qq --no-install-recommends tshark"
        _sh("chroot", str(root), "sh", "-c", f"DEBIAN_FRONTEND=noninteractive {install}")
    plugins = root / "usr/lib/x86_64-linux-gnu/wireshark/plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    (plugins / "init.lua").write_text(_INIT)
    for shared in ("/work", "/tmp"):
        inside = root / shared.lstrip("/")
        inside.mkdir(exist_ok=True)
        if subprocess.run(["mountpoint", "-q", str(inside)], check=False).returncode != 0:
            _sh("mount", "--bind", shared, str(inside))
    wrapper = root.with_name(root.name + "-bin") / "tshark"
    wrapper.parent.mkdir(exist_ok=True)
    wrapper.write_text(_WRAPPER.format(root=root))
    wrapper.chmod(0o755)
    return wrapper.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/trixie"))
    parser.add_argument("--suite", default="trixie")
    args = parser.parse_args()
    print(f'PATH="{build(args.root, args.suite)}:$PATH"')


if __name__ == "__main__":
    main()
