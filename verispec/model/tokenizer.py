"""Tokenizer and chat template of a model folder (`tokenizer.json` + `tokenizer_config.json`)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import VerispecError
from .chat_template import TemplateFailed, TemplateProcess


WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"  # Unicode White_Space
WHITESPACE_START, WHITESPACE_END = re.compile(f"\\A[{WHITESPACE}]+"), re.compile(f"[{WHITESPACE}]+\\Z")


class Tokenizer:
    def __init__(self, folder: Path, eos_token_ids: list[int]):
        from tokenizers import Tokenizer as HFTokenizer
        try:
            self._tok = HFTokenizer.from_file(str(Path(folder) / "tokenizer.json"))
            cfg_path = Path(folder) / "tokenizer_config.json"
            self.config = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
            if not isinstance(self.config, dict):
                raise ValueError("tokenizer_config.json must hold a JSON object")
            eos_token_ids = [i for i in eos_token_ids if i is not None]           # (a config's null)
            if not all(type(i) is int for i in eos_token_ids):
                raise ValueError(f"eos_token_id must be token ids, got {eos_token_ids!r}")
        except Exception as e:
            raise VerispecError(f"cannot load tokenizer from {folder}: {e}") from None
        self.chat_template = default_template(self.config.get("chat_template"))
        self._template = None                       # compiled on first use
        self._as_text = None                        # a copy that reads special tokens' names as text (on first use)
        added = [t for t in self._tok.get_added_tokens_decoder().values() if t.special]
        specials = sorted((t.content for t in added), key=len, reverse=True)
        self._specials = re.compile("|".join(map(re.escape, specials))) if specials else None
        self._strips = {t.content: (t.lstrip, t.rstrip) for t in added
                        if t.lstrip or t.rstrip}                  # markers that eat the whitespace beside them
        stops = set(eos_token_ids)
        for name in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>"):
            if (i := self._tok.token_to_id(name)) is not None:
                stops.add(i)
        self.stop_token_ids = frozenset(stops)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def vocab(self) -> dict[str, int]:
        return self._tok.get_vocab(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(checked(text), add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def chat_prompt(self, user_message: str) -> str:
        """Render a single-turn conversation with the model's own chat template, ready for the reply."""
        return self.render_chat([{"role": "user", "content": user_message}])

    def render_chat(self, messages: list[dict]) -> str:
        """Render a conversation ([{"role": ..., "content": ...}]) with the model's chat template, ready for the
        assistant's reply."""
        if not self.chat_template:
            raise VerispecError("this model has no chat template; pass --no-chat")
        try:
            if self._template is None:
                self._template = TemplateProcess(self.chat_template)
            return self._template.render(sum(len(str(m.get("content") or "")) for m in messages),
                                         messages=messages, add_generation_prompt=True,
                                         bos_token=self.config.get("bos_token", ""),
                                         eos_token=self.config.get("eos_token", ""))
        except (TemplateFailed, TypeError, ValueError) as e:    # (TypeError, ValueError: messages JSON cannot hold)
            raise VerispecError(f"the model's chat template failed: {e} (or pass --no-chat)") from None

    def chat_ids(self, messages: list[dict]) -> list[int]:
        """The token ids of a conversation rendered for the assistant's reply. Messages are text: a special token's
        name typed in a message ("<|im_end|>") is encoded as the characters it is, never as the token, so no message
        can end its turn or open another role's. Only the template's own markers are special tokens."""
        if self._specials is None or not any(self._specials.search(m.get("content") or "") for m in messages
                                             if isinstance(m.get("content"), str)):
            return self.encode(self.render_chat(messages))          # nothing to hide: the plain path, same ids
        typed: list[str] = []                                       # what each placeholder stands for

        def hide(m: re.Match) -> str:
            typed.append(m.group(0))
            return f"\ue000{len(typed) - 1}\ue001"
        hider = re.compile(self._specials.pattern + "|\ue000")    # the placeholder's own mark is hidden too
        rendered = checked(self.render_chat([{**m, "content": hider.sub(hide, m["content"])}
                                             if isinstance(m.get("content"), str) else m for m in messages]))
        if self._as_text is None:                                   # (set only once it reads names as text)
            from tokenizers import Tokenizer as HFTokenizer
            as_text = HFTokenizer.from_str(self._tok.to_str())
            as_text.encode_special_tokens = True
            self._as_text = as_text
        ids, start, eat_left = [], 0, False
        for marker in [*self._specials.finditer(rendered), None]:  # every special token left is the template's
            text = rendered[start:marker.start() if marker else len(rendered)]
            lstrip, rstrip = self._strips.get(marker.group(0), (False, False)) if marker else (False, False)
            text = WHITESPACE_END.sub("", text) if lstrip else text     # as the tokenizer's own split does
            text = WHITESPACE_START.sub("", text) if eat_left else text
            text = re.sub("\ue000(\\d+)\ue001", lambda m: typed[int(m.group(1))], text)
            ids += self._as_text.encode(text, add_special_tokens=False).ids if text else []
            if marker:
                ids.append(self._tok.token_to_id(marker.group(0)))
                start, eat_left = marker.end(), rstrip
        return ids

    def prompt_ids(self, prompt: str, chat: bool = True) -> list[int]:
        if not prompt.strip():
            raise VerispecError("the prompt is empty")
        return self.chat_ids([{"role": "user", "content": prompt}]) if chat else self.encode(prompt)


def default_template(template):
    """The chat template of a tokenizer config: a string, or Hugging Face's list of named templates (the one named
    "default"); anything else is no template."""
    if isinstance(template, list):
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    return template if isinstance(template, str) else None


def checked(text: str) -> str:
    """`text`, if it is valid Unicode; else a one-line error (a lone surrogate: what undecodable bytes on a command
    line or a JSON "\\ud800" escape become), where the tokenizer would raise a TypeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise VerispecError(f"the text is not valid Unicode: {e.reason} at character {e.start} "
                            f"({text[max(0, e.start - 20):e.start]!r} before it)") from None
    return text


class StreamDecoder:
    """Turns a growing list of token ids into text increments, holding back incomplete UTF-8 sequences until
    they complete or the output ends (`flush`).

    O(1) a token: only a short window is decoded each time, from `prefix` (a few tokens before the text not yet
    returned, so that a token's leading space or merged bytes decode as they do in context) to the end. The
    increment is the window's text past what the same window gave before the new tokens came."""

    CONTEXT = 5                                  # tokens of context kept before the unreturned ones

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer, self.ids = tokenizer, []
        self.prefix = self.read = 0              # ids[prefix:read] decoded already; ids[read:] not yet returned

    def _window(self) -> tuple[str, str]:
        """The window's text as returned so far, and with every id pushed."""
        decode = self.tokenizer.decode
        return decode(self.ids[self.prefix:self.read]), decode(self.ids[self.prefix:])

    def push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        before, text = self._window()
        if len(text) <= len(before) or text.endswith("\ufffd"):
            return ""                            # nothing new yet, or an incomplete UTF-8 sequence: wait
        self.prefix, self.read = max(0, len(self.ids) - self.CONTEXT), len(self.ids)
        return text[len(before):]

    def flush(self) -> str:
        """The text held back at the end of the output (an incomplete UTF-8 sequence, as U+FFFD, the way decoding
        the whole output gives it), so that the pushed pieces and this add up to that decode."""
        before, text = self._window()
        self.prefix = self.read = len(self.ids)
        return text[len(before):]
