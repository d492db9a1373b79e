"""Plain-Python float64 loops the reference implementations of DESIGN §5 are written with."""

from __future__ import annotations


def matmul(X: list[list[float]], Y: list[list[float]]) -> list[list[float]]:
    """X·Y for nested lists, (n × m)·(m × p) -> n × p, skipping zero entries of X."""
    n, m, p = len(X), len(Y), len(Y[0])
    out = [[0.0] * p for _ in range(n)]
    for i in range(n):
        for k in range(m):
            x = X[i][k]
            if x == 0.0:
                continue
            for j in range(p):
                out[i][j] += x * Y[k][j]
    return out
