"""Token trees on their own: building, validation, ancestry, paths."""
import pytest
import torch

from verispec.errors import VerispecError
from verispec.tree import build_tree, chain, topk_per_depth


def test_small_tree_buffers():
    t = build_tree([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
    assert t.choices == ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0))      # breadth-first
    assert t.parents == (-1, 0, 0, 1, 1, 2, 3)
    assert t.depths == (0, 1, 1, 2, 2, 2, 3)
    assert t.paths == ((1, 4), (2, 5), (1, 3, 6))                           # one per leaf, leaf order
    assert t.children(1) == [3, 4] and t.rank(4) == 1
    expected = torch.zeros(7, 7, dtype=torch.bool)
    for i, ancestors in enumerate([[0], [0, 1], [0, 2], [0, 1, 3], [0, 1, 4], [0, 2, 5], [0, 1, 3, 6]]):
        expected[i, ancestors] = True
    assert torch.equal(t.ancestry, expected)


def test_input_order_does_not_matter():
    a = build_tree([(0,), (0, 0), (1,)])
    b = build_tree([(1,), (0, 0), (0,)])
    assert a.choices == b.choices and torch.equal(a.ancestry, b.ancestry)


@pytest.mark.parametrize("paths,kwargs,needle", [
    ([(0, 1)], {}, "orphan"),
    ([(0,), (0,)], {}, "twice"),
    ([(0,), (0, 0), (0, 0, 0)], {"max_depth": 2}, "deeper"),
    ([(i,) for i in range(10)], {"max_nodes": 8}, "exceeds"),
    ([], {}, "at least one"),
    ([(0,), (-1,)], {}, "non-negative"),
])
def test_invalid_trees_are_refused(paths, kwargs, needle):
    with pytest.raises(VerispecError, match=needle):
        build_tree(paths, **kwargs)


def test_chain_and_per_depth_builders():
    c = chain(4)
    assert c.size == 4 and c.depth == 4 and c.paths == ((1, 2, 3, 4),)
    t = topk_per_depth([2, 2, 1])
    assert t.size == 2 + 4 + 4 and t.depth == 3 and len(t.paths) == 4
