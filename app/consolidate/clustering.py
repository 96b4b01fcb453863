"""Near-duplicate clusters among a wallet's memories: every pair at or above a cosine similarity,
joined transitively.

The pairs come from blocked matrix products in numpy (a 10,000 × 384 wallet is 10⁸ multiply-adds,
a fraction of a second), never from a Python loop over all pairs; only the pairs that pass the
threshold reach Python, where a union-find joins them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK_ROWS = 2048


@dataclass(frozen=True)
class Cluster:
    members: list[int]  # row indexes, ascending
    similarity: float  # mean similarity of the pairs that joined it


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def similar_pairs(
    vectors: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, similarity) for every i < j with cosine ≥ threshold; rows are unit vectors."""
    n = len(vectors)
    found_i, found_j, found_s = [], [], []
    for start in range(0, n, BLOCK_ROWS):
        block = vectors[start : start + BLOCK_ROWS] @ vectors.T
        rows, cols = np.nonzero(block >= threshold)
        i = rows + start
        upper = cols > i
        found_i.append(i[upper])
        found_j.append(cols[upper])
        found_s.append(block[rows[upper], cols[upper]])
    if not found_i:
        empty = np.array([], dtype=np.int64)
        return empty, empty, np.array([], dtype=np.float32)
    return np.concatenate(found_i), np.concatenate(found_j), np.concatenate(found_s)


def clusters(vectors: np.ndarray, threshold: float) -> list[Cluster]:
    if len(vectors) < 2:
        return []
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)
    pair_i, pair_j, sims = similar_pairs(unit, threshold)
    groups = _UnionFind(len(unit))
    for a, b in zip(pair_i.tolist(), pair_j.tolist(), strict=True):
        groups.union(a, b)
    members: dict[int, list[int]] = {}
    for index in sorted({*pair_i.tolist(), *pair_j.tolist()}):
        members.setdefault(groups.find(index), []).append(index)
    total: dict[int, float] = {}
    count: dict[int, int] = {}
    for a, s in zip(pair_i.tolist(), sims.tolist(), strict=True):
        root = groups.find(a)
        total[root] = total.get(root, 0.0) + s
        count[root] = count.get(root, 0) + 1
    return [
        Cluster(sorted(m), round(total[root] / count[root], 6))
        for root, m in sorted(members.items())
        if len(m) > 1
    ]
