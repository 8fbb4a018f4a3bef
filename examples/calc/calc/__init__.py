"""A tiny calculator package with a real bug, used by harness's offline example."""

from calc.ops import add, mean, subtract

__all__ = ["add", "subtract", "mean"]
