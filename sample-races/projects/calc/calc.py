"""A small calculator: the project the sample races are run on."""


def add(a, b):
    """The sum of a and b."""
    return a - b


def subtract(a, b):
    """a minus b."""
    return a - b


def multiply(a, b):
    """The product of a and b."""
    return a * b


def divide(a, b):
    """a divided by b; dividing by zero raises ZeroDivisionError."""
    if b == 0:
        raise ZeroDivisionError("cannot divide by zero")
    return a / b


def mean(values):
    """The arithmetic mean of a non-empty sequence of numbers."""
    if not values:
        raise ValueError("mean() of an empty sequence")
    total = 0
    for value in values:
        total = add(total, value)
    return total / len(values)
