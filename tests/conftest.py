"""Shared fixtures: the real default model (fp32, loaded once) and tiny random models for fast CLI tests."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from verispec import kernels
from verispec.model import loader
from verispec.model.llama import Llama, LlamaConfig


@pytest.fixture(autouse=True)
def asked_instruction_set():
    """After each test, the kernels run at the instruction set VERISPEC_ISA asks for again (tests that force
    another put back the best one), so a suite run at VERISPEC_ISA=avx2 stays there."""
    yield
    lib = kernels.load()
    if lib is not None:
        lib.set_fp_isa(kernels.isa_asked())
        lib.set_q8_isa(kernels.isa_asked())


@pytest.fixture(scope="session")
def default_dir() -> Path:
    return loader.resolve(None)  # fetches and converts the default model on first use


@pytest.fixture(scope="session")
def target_fp32(default_dir):
    model, tok, _ = loader.load(default_dir, "fp32")
    return model, tok


def write_model_folder(folder: Path, cfg: LlamaConfig, tokenizer_from: Path | None, seed: int = 0,
                       state: dict | None = None) -> Path:
    """A Hugging Face-style model folder with random (or given) weights."""
    folder.mkdir(parents=True, exist_ok=True)
    if state is None:
        torch.manual_seed(seed)
        model = Llama(cfg)
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.05)
        state = loader.split_to_hf(model)
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(cfg.to_json())
    if tokenizer_from is not None:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tokenizer_from / name, folder / name)
    return folder


@pytest.fixture
def grafted(monkeypatch) -> list:
    """The n-gram paths grafted onto trees during a test (`proposers.ngram.graft`, recorded and still applied)."""
    from verispec.proposers import ngram
    real, chains = ngram.graft, []
    monkeypatch.setattr(ngram, "graft", lambda proposal, chain: chains.append(chain) or real(proposal, chain))
    return chains


@pytest.fixture
def copied(monkeypatch) -> list:
    """The continuations a tree proposer verified alone during a test (`proposers.ngram.lookup_first`: the
    context's last SURE or more tokens occurred before, followed by one token), recorded and still verified."""
    from verispec.proposers import ngram
    real, chains = ngram.longest_match, []

    def recording(context, k, cap=32):
        n, chain, agreed = real(context, k, cap)
        if n >= ngram.SURE and agreed:
            chains.append(chain)
        return n, chain, agreed
    monkeypatch.setattr(ngram, "longest_match", recording)
    return chains


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, default_dir) -> Path:
    """A 2-layer random model with the real tokenizer: fast to load, same vocabulary as the default target."""
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                      max_position=512)
    return write_model_folder(tmp_path_factory.mktemp("tiny"), cfg, default_dir)


@pytest.fixture(scope="session")
def truncated_draft_dir(tmp_path_factory, default_dir) -> Path:
    """The default target cut to its first 12 layers: a real, weak draft sharing the tokenizer."""
    cfg, hf = loader.read_config(default_dir)
    from safetensors import safe_open
    with safe_open(str(default_dir / "model.safetensors"), framework="pt") as st:
        state = {k: st.get_tensor(k) for k in st.keys()
                 if not k.startswith("model.layers.") or int(k.split(".")[2]) < 12}
    small = LlamaConfig(**{**cfg.__dict__, "num_layers": 12})
    return write_model_folder(tmp_path_factory.mktemp("draft12"), small, default_dir, state=state)


@pytest.fixture(scope="session")
def tiny_distill_dir(tmp_path_factory, tiny_dir) -> Path:
    """`verispec distill-data` output of the tiny model on 60 short prompts (shared by the training tests)."""
    import json

    from verispec.cli import main
    root = tmp_path_factory.mktemp("distill")
    prompts = root / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"t{i}", "prompt": f"Count to {i}"}) for i in range(60)))
    assert main(["distill-data", "--prompts", str(prompts), "--out", str(root / "data"), "--model", str(tiny_dir),
                 "--batch", "16", "--max-new-tokens", "8", "--dtype", "fp32"]) == 0
    return root / "data"


@pytest.fixture(scope="session")
def target_bf16(default_dir):
    """The default model as served on CPU (bf16, prepacked, row-invariant products), with its shipped draft and
    Medusa heads available through `make_proposer`."""
    from verispec.api import Target
    return Target.load(None, "bf16", "cpu")
