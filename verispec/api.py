"""Python entry points: load a target, build a proposer by name, generate text.

    from verispec import Speculator
    spec = Speculator(method="ngram")                  # the embedded default target, bf16 on CPU
    result = spec.generate("Summarise: ...", max_new_tokens=64, temperature=0)
    print(result.text, result.stats["mean_accepted_tokens"])
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .autok import CostProfile
from .engine import Engine, GenerationConfig
from .errors import VerispecError
from .flags import DRAFT_WEIGHTS
from .model import catalog, loader
from .model.llama import Llama
from .model.tokenizer import StreamDecoder, Tokenizer
from .proposers.base import Proposer
from .sampling import SamplingConfig

METHODS = ("plain", "ngram", "draft", "draft-tree", "medusa", "eagle")
ROLES = ("system", "user", "assistant")     # a chat message's (as the server takes them)
TREE_METHODS = ("draft-tree", "medusa", "eagle")      # the methods --tree shapes
DEFAULT_DRAFT = Path(__file__).parent / "drafts" / "smollm2-135m-instruct-draft"
DEFAULT_MEDUSA = Path(__file__).parent / "drafts" / "smollm2-135m-instruct-medusa"
GRAFT_NGRAM = 6    # longest prompt-lookup path grafted onto a tree ("--tree SHAPE+ngram")
DEFAULT_EAGLE = Path(__file__).parent / "drafts" / "smollm2-135m-instruct-eagle"
SHIPPED_PROFILES = Path(__file__).parent / "profiles"
HEADS = {"eagle": (DEFAULT_EAGLE, "eagle"), "medusa": (DEFAULT_MEDUSA, "medusa")}   # heads' shipped folders
DRAFT_HEADS = Path(__file__).parent / "heads"         # named drafts' reduced output heads (token id lists)


def pick_device(device: str | None) -> str:
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise VerispecError("--device cuda asked for, but no CUDA device is available")
    return device


@dataclass
class Target:
    model: Llama
    tokenizer: Tokenizer
    folder: str
    dtype: str
    is_default: bool = False      # the embedded default model (which has a shipped default draft)
    name: str | None = None       # its catalog name, for a named model (`verispec fetch --model NAME`)
    draft_weights: str = "auto"   # its drafts' and heads' weights: DRAFT_WEIGHTS (`draft_weights`)

    @classmethod
    def load(cls, model: str | None = None, dtype: str = "bf16", device: str | None = None,
             draft_weights: str = "auto") -> "Target":
        if draft_weights not in DRAFT_WEIGHTS:
            raise VerispecError(f"unknown draft weights {draft_weights!r}: choose from {', '.join(DRAFT_WEIGHTS)}")
        m, tok, folder = loader.load(model, dtype, pick_device(device))
        if tok.vocab_size > m.cfg.vocab_size:
            raise VerispecError(f"tokenizer has {tok.vocab_size} tokens but the model only {m.cfg.vocab_size}")
        name, is_default = identity(model)
        return cls(m, tok, str(folder), dtype, is_default, name, draft_weights)

    def profile(self) -> CostProfile:
        """The cost model behind `--k auto`: this machine's `verispec profile` output if there is one, else the
        profile shipped for this named model and dtype with this machine's verify costs (measured once, cached),
        else built-in conservative defaults."""
        from .profile import default_profile_path
        mine = default_profile_path(self.folder, self.dtype, self.model.device)
        if mine.exists():
            return CostProfile.load(mine)
        from .profile import machine_costs
        dtype = "bf16" if self.dtype == "bf16a" else self.dtype   # the same acceptance: bf16a's measured apart
        shipped = SHIPPED_PROFILES / f"{'default' if self.is_default else self.name}-{dtype}-" \
                                     f"{self.model.device.type}.json"
        if self.name and shipped.exists():   # the named model's shipped acceptance, this machine's verify costs
            return machine_costs(self.model, CostProfile.load(shipped), Path(self.folder).name, self.dtype)
        return CostProfile()


def identity(model: str | None) -> tuple[str | None, bool]:
    """A --model value's catalog name (None for a folder or file), and whether it is the embedded default."""
    named = catalog.DEFAULT if model in (None, "default") else str(model).lower()
    return (named if catalog.entry(named) is not None else None), named == catalog.DEFAULT


def default_draft(target: Target | str | None, shipped: Path = DEFAULT_DRAFT, what: str = "draft") -> str:
    """The shipped distilled draft (or Medusa heads, or EAGLE head) of the default target; or for a named target,
    the catalog's: `draft` names its draft model (Qwen2.5-Coder-1.5B's is Qwen2.5-Coder-0.5B), `eagle` and
    `medusa` a folder in verispec/drafts. target: a loaded Target or a --model value."""
    name, is_default = (target.name, target.is_default) if isinstance(target, Target) else identity(target)
    paired = catalog.entry(name).get(what) if name and not is_default else None
    if paired and what == "draft":
        return paired
    if paired:                                         # a head shipped for this named model: drafts/FOLDER
        folder = DEFAULT_DRAFT.parent / paired
        if not (folder / "config.json").exists():
            raise VerispecError(f"the shipped {what} of {name} is missing from {folder}; pass --draft PATH")
        return str(folder)
    if not is_default and not isinstance(target, Target) and not Path(str(target)).expanduser().exists():
        raise VerispecError(f"model not found: {target} (nor a model name: {', '.join(catalog.names())})")
    if not is_default:
        raise VerispecError(f"--method {what} needs --draft PATH for this model (trained for it with `verispec "
                            f"train-{what}`); the shipped {what} only fits the default SmolLM2-135M-Instruct")
    if not (shipped / "config.json").exists():
        raise VerispecError(f"the shipped {what} is missing from {shipped}; pass --draft PATH")
    return str(shipped)


def make_proposer(method: str, target: Target, draft: str | None = None, ngram_max: int = 3,
                  ngram_min: int = 1, tree: str | None = None) -> Proposer | None:
    """Build the proposer called `method` for `target` (None for plain decoding)."""
    if tree is not None and method not in TREE_METHODS:
        raise VerispecError(f"--tree shapes the methods {', '.join(TREE_METHODS)}, not {method}")
    if method == "plain":
        return None
    if method == "ngram":
        from .proposers.ngram import NgramProposer
        return NgramProposer(ngram_max, ngram_min)
    if method == "draft":
        from .proposers.draft_model import DraftModelProposer
        return DraftModelProposer(load_draft(target, draft))
    if method == "draft-tree":
        from .proposers.draft_tree import DraftTreeProposer
        from .tree import parse_tree
        tree, graft = split_graft(tree)
        return DraftTreeProposer(load_draft(target, draft), parse_tree(tree) if tree else None, graft)
    if method == "medusa":
        return medusa_proposer(target, draft, tree)
    if method == "eagle":
        return eagle_proposer(target, draft, tree)
    raise VerispecError(f"unknown method {method!r}: choose from {', '.join(METHODS)}")


# A draft or head stored as safetensors, for a quantized target (--dtype gguf, gguf-q8): bf16 reads half fp32's
# bytes; its dtype changes only how often it is accepted, never the output.
UNQUANTIZED_DRAFT = "bf16"


def draft_weights(target: Target) -> str:
    """"q4" or "native": what `target.draft_weights` (`flags.DRAFT_WEIGHTS`) means here. native: the draft's GGUF
    blocks in the target's dtype, or heads in heads_dtype. Like the dtype, this changes acceptance and speed,
    never the output. auto: q4 wherever verispec's CPU kernels run. Drafting's few rows are bound by reading
    weights, and 4-bit proposers were faster end to end beside every target dtype measured side by side
    (`scripts/draft_weights_ab.py`, README "Session 38": the default model in bf16, bf16a and fp32 on an AMD EPYC
    with VNNI, with its integer product on AVX-512 or forced to AVX2; session 32 on an Intel Xeon with AMX; the
    Qwen pair, session 26)."""
    from . import kernels
    if target.draft_weights != "auto":
        return target.draft_weights
    module = kernels.load() if target.model.device.type == "cpu" else None
    return "native" if module is None else "q4"


def cheaper(target: Target, proposer_model: torch.nn.Module, heads: bool = False) -> torch.nn.Module:
    """A draft model, or Medusa or EAGLE heads (`heads`: their `out`, the target's output rows, too), with 4-bit
    weights where `draft_weights(target)` says so."""
    if draft_weights(target) == "q4":
        from .model import requant
        requant.to_q4(proposer_model)
        if heads:
            proposer_model.out_product = requant.product(proposer_model.out)
    return proposer_model


def heads_dtype(target: Target) -> torch.dtype:
    """The dtype of Medusa and EAGLE heads for `target`: its own, or UNQUANTIZED_DRAFT's under a quantized one."""
    return loader.DTYPES[UNQUANTIZED_DRAFT] if target.dtype in loader.QUANTIZED else target.model.dtype


def draft_head(draft: str) -> torch.Tensor | None:
    """The token ids a named draft's reduced output head keeps (`heads/NAME.json`, made by
    scripts/head_tokens.py), or None: its whole vocabulary. A draft given by path keeps its whole head."""
    path = DRAFT_HEADS / f"{draft}.json"
    if catalog.entry(draft) is None or not path.exists():
        return None
    import json
    return torch.tensor(json.loads(path.read_text())["ids"], dtype=torch.long)


def load_draft(target: Target, draft: str | None = None) -> Llama:
    """The draft model at `draft` (default: the shipped one), in the target's dtype and device (a draft with no
    GGUF file behind it takes UNQUANTIZED_DRAFT beside a quantized target). A named draft with a shipped token
    list drafts from that reduced vocabulary (`draft_head`): a drafted token is then always one of those, and the
    verifier's residual covers the rest, so the output is unchanged and only acceptance can move."""
    spec = draft or default_draft(target)
    model, tok, _ = loader.load(spec, target.dtype, target.model.device,
                                need_tokenizer=False, target_embedding=target.model.embed.weight,
                                unquantized=UNQUANTIZED_DRAFT, head_ids=draft_head(str(spec).lower()))
    check_same_vocab(target, model, tok)
    return cheaper(target, model)


def split_graft(tree: str | None) -> tuple[str | None, int]:
    """"SHAPE+ngram" -> (SHAPE, or None for the default shape; GRAFT_NGRAM): the prompt-lookup continuation
    grafted onto every drafted tree as one more path. Anything else -> (tree, 0)."""
    if tree is None or "+" not in tree or Path(tree).is_file():         # (a tree file's name may hold a "+")
        return tree, 0
    shape, _, extra = tree.rpartition("+")
    if extra != "ngram":
        raise VerispecError(f"--tree takes '+ngram' as its one addition, got '+{extra}'")
    return shape or None, GRAFT_NGRAM


def medusa_proposer(target: Target, heads: str | None = None, tree: str | None = None):
    """Medusa heads (default: the shipped ones) with `tree`: None or "auto" (the size the cost profile predicts
    fastest), a node count ("32": the best tree of that size from the heads' measured accuracies), per-depth
    widths ("3,2,1") or a JSON file of paths; any of them with "+ngram" (the n-gram path grafted on)."""
    from .model.medusa import load_heads
    from .proposers.medusa import MedusaProposer
    folder = heads or default_draft(target, DEFAULT_MEDUSA, "medusa")
    model, trees = load_heads(folder, target.model, heads_dtype(target))
    model = cheaper(target, model, heads=True)
    tree, graft = split_graft(tree)
    shape = tree_shape(target, trees["acceptance"], tree, "medusa")
    if shape.depth > model.num_heads:
        raise VerispecError(f"the tree is {shape.depth} deep but {folder} has only {model.num_heads} heads")
    make = lambda shape: MedusaProposer(model, shape, trees["acceptance"], graft)    # noqa: E731
    if tree in (None, "auto"):
        return measured_size(target, trees["acceptance"], make(shape), make, heads)
    return make(shape)


def tree_shape(target: Target, acceptance: list[list[float]], tree: str | None, method: str):
    """The token tree `tree` names, for a proposer whose per-depth, per-rank accuracy is `acceptance`: None or
    "auto" (the size the cost profile predicts fastest), a node count ("32": the best tree of that size), per-depth
    widths ("3,2,1") or a JSON file of paths."""
    from .proposers.medusa import auto_tree
    from .tree import parse_tree, tree_from_acceptance
    if tree in (None, "auto"):
        profile = target.profile()
        return auto_tree(acceptance, profile.tree_cost, profile.draft_cost.get(method, 0.0))[0]
    if tree.isdigit():
        if not 1 <= int(tree) <= 256:
            raise VerispecError(f"a tree takes 1 to 256 nodes, got {tree}")
        return tree_from_acceptance(acceptance, int(tree))[0]
    return parse_tree(tree)


def eagle_proposer(target: Target, head: str | None = None, tree: str | None = None):
    """The EAGLE head (default: the shipped one) drafting `tree`: "chain" (default: sampled, with q), "dynamic"
    or "dynamic:N" (EAGLE-2, verifying the N most confident drafted nodes; N defaults to the tree size the cost
    profile predicts fastest), or a static tree as for Medusa (a node count, per-depth widths, a JSON file); a
    tree with "+ngram" has the prompt-lookup continuation (up to GRAFT_NGRAM tokens) grafted on as one more
    path ("dynamic+ngram"), or verified alone where the context repeats at length (`ngram.lookup_first`)."""
    from .model.eagle import load_eagle
    from .proposers.eagle import EagleProposer
    model, cfg = load_eagle(head or default_draft(target, DEFAULT_EAGLE, "eagle"), target.model, heads_dtype(target))
    model = cheaper(target, model, heads=True)
    acceptance = cfg["acceptance"]
    tree, graft = split_graft(tree)
    if tree in (None, "chain"):
        if graft:
            raise VerispecError("the n-gram path is grafted onto trees, not EAGLE's chain: try dynamic+ngram")
        return EagleProposer(model)
    if tree == "dynamic" or tree.startswith("dynamic:"):
        size = tree.partition(":")[2]
        if size and not (size.isdigit() and 1 <= int(size) <= 64):
            raise VerispecError(f"--tree dynamic:N takes N from 1 to 64, got {size!r}")
        dynamic = lambda n: EagleProposer(model, "dynamic", nodes=n, depth=len(acceptance),  # noqa: E731
                                          expand=min(n, 8), graft=graft, acceptance=acceptance)
        if size:
            return dynamic(int(size))
        return measured_size(target, acceptance, dynamic(tree_shape(target, acceptance, "auto", "eagle").size),
                             lambda shape: dynamic(shape.size), head)
    make = lambda shape: EagleProposer(model, "static", shape, graft=graft, acceptance=acceptance)   # noqa: E731
    proposer = make(tree_shape(target, acceptance, tree, "eagle"))
    return measured_size(target, acceptance, proposer, make, head) if tree == "auto" else proposer


def measured_size(target: Target, acceptance: list[list[float]], proposer: Proposer, make, heads: str | None):
    """An auto-sized tree of heads, static or dynamic (`proposer`, sized with the profile's c), sized again with its
    c per cycle measured on this machine where the profile's c is not that (`cycle_measured_here`): heads cost
    0.07 of a pass on one CPU and 0.26-0.31 on another (session 50), and the best size turns on it.
    `make(shape)`: the proposer for another tree (a dynamic one: of that tree's size)."""
    from .proposers.medusa import auto_tree
    profile = target.profile()
    if not cycle_measured_here(profile, proposer):
        return proposer
    c = engine_profile(target, proposer, heads, profile).draft_cost[proposer.name]
    best = auto_tree(acceptance, profile.tree_cost, c)[0]
    same = best.choices == proposer.tree.choices if proposer.tree is not None else best.size == proposer.nodes
    return proposer if same else make(best)


def make_engine(method: str, target: Target, draft: str | None = None, ngram_max: int = 3,
                tree: str | None = None) -> Engine:
    """An engine for `method` on `target`, with the target's cost profile for k = "auto"."""
    proposer = make_proposer(method, target, draft, ngram_max, tree=tree)
    return Engine(target.model, proposer, lambda: engine_profile(target, proposer, draft))   # on first need


def engine_profile(target: Target, proposer: Proposer | None, draft: str | None = None,
                   profile: CostProfile | None = None) -> CostProfile:
    """The cost profile for `proposer` on `target` (`profile`, default the target's), with the proposer's c
    measured on this machine (`machine_draft_cost`) where the profile's is another machine's or of another kind:
    a draft model's where the profile is the shipped one (a draft's c differs by machine as much as the verify
    costs do), and a tree of heads' per cycle where `cycle_measured_here`."""
    profile = profile or target.profile()
    from .proposers.draft_model import DraftModelProposer
    if proposer is None:
        return profile
    from .profile import machine_draft_cost
    if isinstance(proposer, DraftModelProposer) and "verify_costs" in profile.meta:
        return machine_draft_cost(target, proposer, profile, draft or default_draft(target))
    if cycle_measured_here(profile, proposer):        # heads drafting a static or a dynamic tree
        return machine_draft_cost(target, proposer, profile, draft or default_draft(target, *HEADS[proposer.name]))
    return profile


def cycle_measured_here(profile: CostProfile, proposer: Proposer) -> bool:
    """Whether a tree of heads gets its c per cycle measured on this machine: where `profile` is the shipped one
    (its c was measured on another CPU), or where it is `verispec profile`'s but holds the heads' c per token
    (EAGLE is profiled as a chain: a tree's gate would read one token's drafting as a whole tree's). Not with the
    built-in defaults (no profile for this model, dtype and device), whose c is a guess either way."""
    from .profile import TREE_METHODS as PER_CYCLE
    return (proposer.makes_trees and proposer.name in HEADS
            and ("verify_costs" in profile.meta or (profile.measured and proposer.name not in PER_CYCLE)))


def check_same_vocab(target: Target, draft_model: Llama, draft_tok: Tokenizer | None) -> None:
    t_size, d_size = target.model.cfg.vocab_size, draft_model.cfg.vocab_size
    if t_size != d_size or (draft_tok is not None and target.tokenizer.vocab() != draft_tok.vocab()):
        raise VerispecError(f"the draft's vocabulary ({d_size} tokens) differs from the target's ({t_size}); "
                            "a draft must share the target's tokenizer")


@dataclass
class Result:
    text: str
    token_ids: list[int]
    stats: dict
    finish_reason: str


class Speculator:
    """A target plus one proposer, ready to generate text."""

    def __init__(self, model: str | None = None, method: str = "ngram", draft: str | None = None,
                 dtype: str = "bf16", device: str | None = None, target: Target | None = None,
                 tree: str | None = None, draft_weights: str = "auto", ngram_max: int = 3):
        self.target = target or Target.load(model, dtype, device, draft_weights)
        self.engine = make_engine(method, self.target, draft, ngram_max, tree=tree)

    def generate(self, prompt: str, max_new_tokens: int = 128, k: int | str = "auto", temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int = 0, seed: int = 0, chat: bool = True,
                 on_text=None, acceptance: str = "exact",
                 k_max: int = GenerationConfig.k_max) -> Result:
        """Decode after `prompt`: a user message in the model's chat template, or raw text with chat=False."""
        if not isinstance(prompt, str):
            raise VerispecError(f"the prompt must be text, not {type(prompt).__name__}")
        return self._run(self.target.tokenizer.prompt_ids(prompt, chat), False, max_new_tokens, k, temperature,
                         top_p, top_k, seed, on_text, acceptance, k_max)

    def chat(self, messages: list[dict], max_new_tokens: int = 128, k: int | str = "auto", temperature: float = 0.0,
             top_p: float = 1.0, top_k: int = 0, seed: int = 0, on_text=None, acceptance: str = "exact",
             k_max: int = GenerationConfig.k_max) -> Result:
        """The assistant's next message after `messages` ([{"role", "content"}], in the chat template; messages are
        text, special tokens' names included). A conversation's next turn starts from the keys and values (and
        the features EAGLE and Medusa read) of what it shares with the last call: the earlier turns and the last
        answer are not prefilled again, and the output is that of a fresh start."""
        if not messages:
            raise VerispecError("the conversation is empty")
        if not isinstance(messages, list) or not all(
                isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in messages):
            raise VerispecError(f"messages must be a list of {{'role': {' / '.join(ROLES)}, 'content': text}}")
        return self._run(self.target.tokenizer.chat_ids(messages), True, max_new_tokens, k, temperature, top_p,
                         top_k, seed, on_text, acceptance, k_max)

    def _run(self, ids: list[int], reuse: bool, max_new_tokens, k, temperature, top_p, top_k, seed, on_text,
             acceptance, k_max) -> Result:
        tok = self.target.tokenizer
        cfg = GenerationConfig(max_new_tokens=max_new_tokens, k=k, k_max=k_max, seed=seed, acceptance=acceptance,
                               sampling=SamplingConfig(temperature, top_k, top_p),
                               stop_token_ids=tok.stop_token_ids)
        stream = StreamDecoder(tok)
        on_tokens = None if on_text is None else (lambda ids: on_text(stream.push(ids)))
        g = self.engine.generate(ids, cfg, on_tokens, reuse_prefix=reuse)
        if on_text is not None:
            on_text(stream.flush())              # an output cut inside a character ends as the whole decode does
        return Result(tok.decode(g.token_ids), g.token_ids, g.stats.to_dict(), g.finish_reason)
