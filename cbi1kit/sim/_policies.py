"""The simulator's routing policies, in a module of their own so the CLI's parser lists them
without importing the simulator (and numpy)."""

from __future__ import annotations

from typing import Literal

RoutingPolicy = Literal["round_robin", "random", "exact", "ckf"]
POLICIES: tuple[RoutingPolicy, ...] = ("round_robin", "random", "exact", "ckf")
