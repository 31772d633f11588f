"""Token ids to response text for one request: incremental UTF-8-safe decoding and OpenAI-style stop strings
(the text ends before the first match, which is not returned; a piece that might start a stop string is held
back until it is clear)."""
from __future__ import annotations

from ..model.tokenizer import StreamDecoder, Tokenizer


class TextStream:
    def __init__(self, tokenizer: Tokenizer, stops: list[str]):
        self.decoder, self.stops = StreamDecoder(tokenizer), [s for s in stops if s]
        self.text, self.sent, self.tokens, self.stopped = "", 0, 0, False

    def push(self, ids: list[int]) -> str:
        """Take new token ids (one at a time, so `tokens` counts exactly those up to a stop); return the text now
        safe to send."""
        for i in ids:
            if self.stopped:
                break
            self.tokens += 1
            self._add(self.decoder.push([i]))
        hold = 0 if self.stopped else max((n for s in self.stops for n in range(1, len(s))
                                           if self.text.endswith(s[:n])), default=0)
        piece = self.text[self.sent:len(self.text) - hold]
        self.sent += len(piece)
        return piece

    def _add(self, piece: str):
        self.text += piece
        hits = [at for at in (self.text.find(s, max(0, self.sent - len(s))) for s in self.stops) if at >= 0]
        if hits:
            self.text, self.stopped = self.text[:min(hits)], True

    def flush(self) -> str:
        """The rest, at the end of the output: what was held back for a possible stop string, and the end of an
        incomplete UTF-8 sequence (as U+FFFD, the way decoding the whole output gives it)."""
        if not self.stopped:
            self._add(self.decoder.flush())
        piece, self.sent = self.text[self.sent:], len(self.text)
        return piece
