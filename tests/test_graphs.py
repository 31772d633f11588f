"""Fixed-shape passes (`model.graphs`), the form CUDA graphs capture, run here without capture: padded rows, a
mask over the whole cache and writes to explicit slots must give each real row what the eager pass gives it."""
import gc

import torch

from verispec.model import graphs
from verispec.model.llama import Llama, LlamaConfig
from verispec.tree import build_tree


def tiny(seed=0, max_position=1024) -> Llama:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                      num_kv_heads=2, max_position=max_position)
    model = Llama(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    return model


def prefilled(model, prompt, capacity=256):
    cache = model.new_cache(capacity)
    model(torch.tensor([prompt]), torch.arange(len(prompt))[None], cache)
    return cache


def test_capacity_leaves_room_for_the_largest_bucket():
    for n in (1, 100, 448, 449, 1000):
        c = graphs.capacity(n)
        assert c >= n + graphs.ROOM and c % graphs.ROUND == 0
    assert [graphs.bucket(n) for n in (1, 16, 17, 64, 65, 129)] == [16, 16, 32, 64, 128, None]


@torch.inference_mode()
def test_a_huge_claimed_context_tables_a_bounded_rope():
    """A file may claim a context of millions: the fixed-shape passes table RoPE up to TABLE_MAX positions, not
    gigabytes at load (a pass past the table is left to the eager path, `GraphRunner.__call__`)."""
    runner = graphs.GraphRunner(tiny(max_position=10 ** 6), capture=False)
    assert len(runner.table) == graphs.TABLE_MAX < 10 ** 6


@torch.inference_mode()
def test_chain_pass_matches_the_eager_pass():
    model = tiny()
    prompt = list(range(5, 40))
    runner = graphs.GraphRunner(model, capture=False)
    for n in (1, 5, 16, 20):                       # buckets 16, 16, 16, 32: 15, 11, 0 and 12 padded rows
        tokens = torch.randint(0, 300, (1, n))
        positions = torch.arange(len(prompt), len(prompt) + n)[None]
        eager_cache, dense_cache = prefilled(model, prompt), prefilled(model, prompt)
        want = model(tokens, positions, eager_cache)                              # [1, n, D]
        got = runner(tokens, positions, dense_cache, None, None)
        assert got.shape == want.shape and dense_cache.length == eager_cache.length == len(prompt) + n
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(dense_cache.k[:, :, :, :dense_cache.length],
                                   eager_cache.k[:, :, :, :eager_cache.length], atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_tree_pass_matches_each_path_alone():
    model = tiny(1)
    prompt = list(range(50, 90))
    tree = build_tree([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
    tokens = torch.randint(0, 300, (1, 1 + tree.size))
    start = len(prompt)
    positions = (start + torch.tensor(tree.depths))[None]
    mask = torch.cat([torch.ones(1 + tree.size, start, dtype=torch.bool), tree.ancestry], 1)[None]
    runner = graphs.GraphRunner(model, capture=False)
    got = runner(tokens, positions, prefilled(model, prompt), mask, None)[0]     # [1+n, D]
    for node in range(1 + tree.size):
        path = tree.ancestry[node].nonzero().flatten().tolist()                   # root .. node
        alone = model(tokens[:, path], torch.arange(start, start + len(path))[None], prefilled(model, prompt))
        torch.testing.assert_close(got[node], alone[0, -1], atol=1e-4, rtol=1e-4)


@torch.inference_mode()
def test_a_mask_leak_is_caught():
    """Counter-test: a real row that also sees a padded row's key no longer matches (so the tests above can fail)."""
    model = tiny(2)
    prompt = list(range(10, 30))
    tokens, positions = torch.tensor([[7, 8]]), torch.tensor([[20, 21]])
    want = model(tokens, positions, prefilled(model, prompt))
    cache = prefilled(model, prompt)
    step = graphs._Pass(model, cache, 16, False, False, None)
    step.load(tokens, None, positions, None, 20)
    step.mask[0, 0, 0, 25] = True                                                  # row 0 sees padded row 5
    cache.k[:, :, :, 25].normal_()
    got = step.run()[:, :2]
    assert not torch.allclose(got[0, 0], want[0, 0], atol=1e-3)


@torch.inference_mode()
def test_a_pass_goes_with_its_cache():
    """The runner keeps a cache's passes (graphs, static buffers) only while the cache lives: a server making a
    cache per request must not accumulate them."""
    model = tiny(3)
    runner = graphs.GraphRunner(model, capture=False)
    cache = prefilled(model, list(range(10, 30)))
    runner(torch.tensor([[5]]), torch.tensor([[20]]), cache, None, None)
    assert len(runner.passes) == 1
    del cache
    gc.collect()
    assert len(runner.passes) == 0


@torch.inference_mode()
def test_a_packed_pass_is_each_sequence_alone():
    """Where passes are fixed-shape (CUDA), a packed pass runs each sequence's own pass: the serving batch and
    batched drafting give each sequence what it gets alone, bit for bit."""
    model = tiny(4)
    a, b = list(range(10, 30)), list(range(40, 47))
    graphs._everywhere[0] = True
    try:
        ca, cb = prefilled(model, a), prefilled(model, b)
        alone = [model(torch.tensor([[3, 4]]), torch.tensor([[20, 21]]), ca),
                 model(torch.tensor([[9]]), torch.tensor([[7]]), cb)]
        ca.truncate(20)
        cb.truncate(7)
        packed = model.forward_packed([(torch.tensor([[3, 4]]), torch.tensor([[20, 21]]), ca, None),
                                       (torch.tensor([[9]]), torch.tensor([[7]]), cb, None)])
    finally:
        graphs._everywhere[0] = False
    assert all(torch.equal(p, q) for p, q in zip(packed, alone))


def test_graphs_stay_off_for_training_and_go_with_a_move():
    """A pass with gradients on (training) runs eagerly; moving or casting the model drops its captured passes
    (they read the weights where they were)."""
    model = tiny(5)
    graphs._everywhere[0] = True
    try:
        with torch.enable_grad():
            model(torch.tensor([[1, 2, 3]]), torch.arange(3)[None], model.new_cache(256))
        assert model._graphs is None
        with torch.inference_mode():
            model(torch.tensor([[1, 2, 3]]), torch.arange(3)[None], model.new_cache(256))
        assert model._graphs is not None
        model.float()
        assert model._graphs is None
    finally:
        graphs._everywhere[0] = False
