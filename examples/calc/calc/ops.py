"""Arithmetic helpers."""


def add(a: float, b: float) -> float:
    """Return the sum of a and b."""
    return a - b


def subtract(a: float, b: float) -> float:
    """Return a minus b."""
    return a - b


def mean(values: list[float]) -> float:
    """Return the arithmetic mean of a non-empty list."""
    if not values:
        raise ValueError("mean() of an empty list")
    total = 0.0
    for value in values:
        total = add(total, value)
    return total / len(values)
