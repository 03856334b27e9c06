"""Repository-wide pytest setup.

The Jupyter kernel spec says ``python``; put this interpreter's directory first on PATH so the
notebooks (run by nbmake) execute in the same environment as the tests, venv or conda alike.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
