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


def test_a_wide_tree_spec_is_refused_before_it_is_built():
    """Per-depth widths whose tree passes the node limit are refused at once, however many nodes they imply."""
    from verispec.errors import VerispecError
    from verispec.tree import parse_tree
    for spec in ("1000,1000,1000", "16,16", "257"):
        with pytest.raises(VerispecError, match="exceeds the limit of 256"):
            parse_tree(spec)                       # (before: a billion paths built for the first one)
    assert len(parse_tree("16,15").choices) == 256


def test_a_tree_files_name_may_hold_a_plus(tmp_path):
    from verispec.api import GRAFT_NGRAM, split_graft
    from verispec.tree import parse_tree
    path = tmp_path / "my+tree.json"
    path.write_text("[[0], [1], [0, 0]]")
    assert split_graft(str(path)) == (str(path), 0) and len(parse_tree(str(path)).choices) == 3
    assert split_graft(f"{path}+ngram") == (str(path), GRAFT_NGRAM)
