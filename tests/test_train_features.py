"""The target's features of distill-data sequences, stored beside the shards: shared by training runs, computed
once per sequence, never taken for other sequences or another target."""
import shutil

import pytest
import torch

from verispec.cli import main
from verispec.train import features as store
from verispec.train.data import load_examples
from verispec.train.medusa import answer_features


@pytest.fixture
def counted(monkeypatch):
    """The sequences the target reads for features, run by run (`counted.append([])` starts a run)."""
    runs = [[]]
    real = store.answer_features

    def counting(target, examples, **kw):
        runs[-1].extend(e.tokens.tolist() for e in examples)
        return real(target, examples, **kw)
    monkeypatch.setattr(store, "answer_features", counting)
    return runs


def eagle(data, out, model, *flags):
    return main(["train-eagle", "--data", str(data), "--out", str(out), "--model", str(model), "--head-tokens",
                 "256", "--batch", "2", "--dtype", "fp32", "--steps", "2", "--eval-every", "2", *flags])


def test_runs_share_stored_features_and_compute_only_new_sequences(tmp_path, tiny_dir, tiny_distill_dir, counted):
    data = tmp_path / "data"
    shards = sorted(tiny_distill_dir.glob("shard-*.pt"))
    assert len(shards) >= 3
    data.mkdir()
    for s in shards[:-1]:
        shutil.copy(s, data / s.name)
    assert eagle(data, tmp_path / "a", tiny_dir) == 0
    assert 0 < len(counted[-1]) <= len(load_examples(data))
    assert sorted(p.name for p in (data / "features").glob("*/shard-*.pt")) == [s.name for s in shards[:-1]]
    counted.append([])
    assert eagle(data, tmp_path / "b", tiny_dir, "--lr", "1e-3", "--seed", "1") == 0     # another run: none read
    assert main(["train-medusa", "--data", str(data), "--out", str(tmp_path / "m"), "--model", str(tiny_dir),
                 "--heads", "2", "--head-tokens", "256", "--steps", "2", "--eval-every", "2", "--batch", "32",
                 "--dtype", "fp32"]) == 0                                               # Medusa shares them
    assert counted[-1] == []
    shutil.copy(shards[-1], data / shards[-1].name)                      # distill-data went on: one more shard
    counted.append([])
    assert eagle(data, tmp_path / "c", tiny_dir) == 0
    new = [e.tokens.tolist() for e in load_examples(data) if e.shard == shards[-1].name]
    assert counted[-1] and all(t in new for t in counted[-1])                  # only the new shard's sequences
    counted.append([])
    assert eagle(data, tmp_path / "d", tiny_dir, "--max-tokens", "24") == 0     # cut shorter: other sequences
    shorter = [e.tokens.tolist() for e in load_examples(data, 24)]
    assert counted[-1] and all(t in shorter and len(t) <= 24 for t in counted[-1])
    assert eagle(data, tmp_path / "e", tiny_dir, "--dtype", "bf16") == 0       # another target: a store of its own
    assert len(list((data / "features").iterdir())) == 2


def test_stored_features_are_those_of_each_sequence(tmp_path, tiny_dir, tiny_distill_dir):
    """Read back from the store, each example gets its own sequence's features, whichever call computed them and
    in whatever order the examples come; a damaged file is computed again, not trusted."""
    from verispec.model import loader
    target, _, _ = loader.load(str(tiny_dir), "fp32", "cpu")
    examples = load_examples(tiny_distill_dir)[:20]
    (tmp_path / "data").mkdir()
    folder = store.store_folder(tmp_path / "data", tmp_path, {"model": "tiny", "dtype": "fp32", "taps": []})
    [made] = store.stored_features(target, [examples], folder)
    again = store.stored_features(target, [examples[::-1], examples[:3]], folder)
    direct = answer_features(target, examples, whole=True)
    for f, g, d in zip(made, again[0][::-1], direct):
        assert f.shape == d.shape and torch.allclose(f, d, atol=1e-5)
        assert torch.equal(f, g)
    assert all(torch.equal(f, g) for f, g in zip(made[:3], again[1]))
    answers = answer_features(target, examples)                         # what Medusa trained on before the store
    assert all(torch.allclose(f[e.first - 1:], a, atol=1e-5) for f, e, a in zip(made, examples, answers))
    damaged = next(folder.glob("shard-*.pt"))
    damaged.write_bytes(b"not a tensor file")
    [mended] = store.stored_features(target, [examples], folder)
    assert all(torch.allclose(f, d, atol=1e-5) for f, d in zip(mended, direct))
    shard = examples[0].shard
    torch.save({k: f[:, :8] for k, f in store.read_shard(folder / shard).items()}, folder / shard)   # other shape
    [reshaped] = store.stored_features(target, [examples], folder)
    assert all(torch.allclose(f, d, atol=1e-5) for f, d in zip(reshaped, direct))


def test_the_key_names_the_targets_files_dtype_and_taps(tmp_path, tiny_dir):
    """New weights at the same path, another dtype or other tapped layers: another store."""
    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    first = store.target_settings(str(model), "fp32", ())
    assert store.target_settings(str(model), "fp32", ()) == first
    assert store.target_settings(str(model), "bf16", ()) != first
    assert store.target_settings(str(model), "fp32", (1,)) != first
    weights = next(model.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes())                                  # rewritten in place
    assert store.target_settings(str(model), "fp32", ()) != first


def test_a_read_only_data_folder_keeps_its_features_in_the_work_folder(tmp_path, tiny_dir, tiny_distill_dir,
                                                                       monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(tiny_distill_dir, data, ignore=shutil.ignore_patterns("features"))
    monkeypatch.setattr(store, "writable", lambda folder: not str(folder).startswith(str(data)))
    assert eagle(data, tmp_path / "h", tiny_dir) == 0
    assert not (data / "features").exists()
    assert list((tmp_path / "h.work" / "features").glob("*/shard-*.pt"))
    monkeypatch.setattr(store, "writable", lambda folder: False)
    assert eagle(data, tmp_path / "i", tiny_dir) == 2                  # nowhere to write: one line, no traceback
