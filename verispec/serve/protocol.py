"""The request bodies the API accepts (pydantic): OpenAI's fields plus `speculative` ({"method", "k"})."""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

# OpenAI fields this server does not implement, refused (400) unless absent or at the value that changes nothing.
# `logprobs` is accepted and answered with null; `user` and other unknown fields are ignored.
UNSUPPORTED = {"echo": (False,), "best_of": (1,), "suffix": ("",), "logit_bias": ({},), "presence_penalty": (0,),
               "frequency_penalty": (0,), "repetition_penalty": (1,), "top_k": (0, -1), "min_p": (0,),
               "tools": ([],), "tool_choice": ("none",), "functions": ([],), "function_call": ("none",),
               "response_format": ({"type": "text"},), "top_logprobs": (0,)}


def lone_surrogate(value) -> bool:
    """Whether a decoded JSON value holds a string that is not valid Unicode (a lone surrogate, from "\\ud800").
    Walked without recursion: JSON nested a few hundred deep, which the parser takes, must not exhaust the stack."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return False


class Strict(BaseModel):
    """JSON types as written: "4" is not a number, 1 is not true, 4.0 is not an integer."""
    model_config = ConfigDict(strict=True)


class Speculative(Strict):
    model_config = ConfigDict(extra="forbid", strict=True)
    method: str | None = None
    k: Union[int, Literal["auto"], None] = None


class StreamOptions(Strict):
    include_usage: bool = False


class Common(Strict):
    model: str
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = Field(None, ge=-(2 ** 63), lt=2 ** 64)     # what torch.Generator.manual_seed takes
    stop: Union[str, list[str], None] = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=16)              # choices per prompt; choice j samples with seed + j
    speculative: Speculative | None = None

    @model_validator(mode="before")
    @classmethod
    def supported(cls, data):
        if isinstance(data, dict):
            for name, harmless in UNSUPPORTED.items():
                if data.get(name) is not None and data[name] not in harmless:
                    raise ValueError(f"{name} is not supported by this server")
            if lone_surrogate(data):
                raise ValueError("the request holds text that is not valid Unicode (a lone surrogate)")
        return data

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class CompletionRequest(Common):
    prompt: Union[str, list[str]]

    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


class TextPart(Strict):
    type: Literal["text"]                      # the only kind of part this server reads (no images, no audio)
    text: str


class Message(Strict):
    role: Literal["system", "user", "assistant"]
    content: Union[str, Annotated[list[TextPart], Field(min_length=1)]]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class ChatRequest(Common):
    messages: list[Message] = Field(min_length=1)
