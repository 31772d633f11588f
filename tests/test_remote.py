"""`verispec audit --url` and `verispec bench --url` against verispec's own server on 127.0.0.1: an exact
speculative server passes against a plain one, the same server with typical acceptance (lossy) fails, and the
benchmark reports side-by-side figures; bad endpoints are one-line errors."""
import json

import pytest

from tests.serving import serving
from verispec.cli import main
from verispec.errors import VerispecError
from verispec.remote import Endpoint, Sample, _logprobs
from verispec.remote_cmds import outcomes
from verispec.serve.app import Server
from verispec.serve.loadtest import free_port

K, TREE = 4, "8+ngram"        # fixed, not "auto": see three_servers
PROMPT = "Repeat this list three times: red, green, blue, red, green, blue."


def test_outcomes_are_tokens_where_returned_else_fixed_text_pieces():
    s = Sample("Hello, world  again", "length", ["Hel", "lo", ","], [-0.1, -0.2, -0.3])
    assert outcomes([s], 4, tokens=True) == [("Hel", "lo", ",", "<end>")]
    assert outcomes([s], 4, tokens=False) == [("Hello", ",", " ", "world")]
    assert _logprobs({"content": [{"token": "a", "logprob": -1.5}]}) == (["a"], [-1.5])
    assert _logprobs({"tokens": ["a", "b"], "token_logprobs": [-1.0, None]}) == (["a", "b"], [-1.0, 0.0])
    assert _logprobs(None) == (None, None)


def test_bad_endpoints_are_one_line_errors(capsys):
    dead = f"http://127.0.0.1:{free_port()}"
    assert main(["audit", "--url", dead, "--reference-url", dead, "--samples", "10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verispec: error: ") and err.count("\n") == 1 and "ConnectError" in err
    assert main(["audit", "--url", dead]) == 2
    assert "--reference-url" in capsys.readouterr().err
    assert main(["audit", "--reference-url", dead]) == 2
    assert "goes with --url" in capsys.readouterr().err
    assert main(["bench", "--prompts", "bench/dev_prompts.jsonl", "--url", "ftp://x"]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err
    with pytest.raises(VerispecError, match="not an http"):
        Endpoint("localhost:8000")


@pytest.fixture(scope="module")
def three_servers(target_bf16):
    """A plain server, an exact Medusa server and a Medusa server with typical acceptance (LOSSY), both Medusa
    servers drafting the heads' tree with the n-gram path grafted on (the list repeats: typical acceptance takes
    the repeat whenever it is likely enough, exact acceptance with its probability). k and the tree are fixed:
    with "auto" both follow this machine's measured costs, which may decide that drafting does not pay, and an
    audit of a server that drafts nothing tests nothing (CI failed so once)."""
    plain = Server(target_bf16, "plain", "auto", max_batch=16)
    exact = Server(target_bf16, "medusa", K, max_batch=16, tree=TREE)
    lossy = Server(target_bf16, "medusa", K, max_batch=16, tree=TREE, acceptance="typical")
    with serving(plain) as a, serving(exact) as b, serving(lossy) as c:
        yield a, b, c


AUDIT = ["--samples", "100", "--tokens", "4", "--concurrency", "16", "--prompt", PROMPT]


def test_remote_audit_passes_exact_speculation_and_fails_typical_acceptance(three_servers, capsys, monkeypatch):
    plain, exact, lossy = three_servers
    import verispec.remote_cmds as cmds
    drawn, draw = {}, cmds.sample

    def once(endpoint, prompt, samples, seed0, **kw):     # the plain server's seeded answers are drawn once: the
        key = (endpoint.base, samples, seed0)               # second audit gets the very same reference sample
        if key not in drawn:
            drawn[key] = draw(endpoint, prompt, samples, seed0, **kw)
        return drawn[key]
    monkeypatch.setattr(cmds, "sample", once)
    assert main(["audit", "--url", exact, "--reference-url", plain] + AUDIT) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "drafted" in out
    assert main(["audit", "--url", lossy, "--reference-url", plain] + AUDIT) == 1
    assert "FAIL" in capsys.readouterr().out


def test_remote_bench_compares_endpoints_side_by_side(three_servers, tmp_path, capsys):
    plain, exact, _ = three_servers
    out = tmp_path / "remote.json"
    assert main(["bench", "--prompts", "bench/dev_prompts.jsonl", "--limit", "1", "--max-new-tokens", "12",
                 "--url", plain, "--url", exact, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "vs 1st" in table and exact[7:] in table
    r = json.loads(out.read_text())
    first, second = (r["results"][n] for n in r["endpoints"])
    assert first["identical_to_first"] == 1.0 and second["identical_to_first"] == 1.0    # greedy: exact
    assert first["acceptance"] is None and second["acceptance"] is not None             # plain drafts nothing
    assert second["runs"] == first["runs"] >= 3 and second["tok_s"] > 0 and second["ttft_s"] > 0
