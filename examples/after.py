def average(values):
    """Return the arithmetic mean of values (0.0 for no values)."""
    if not values:
        return 0.0
    total = 0
    for v in values:
        total += v
    return total / len(values)


def spread(values):
    """Return the difference between the largest and the smallest value."""
    return max(values) - min(values)


if __name__ == "__main__":
    print(average([1, 2, 3]), spread([1, 2, 3]))
