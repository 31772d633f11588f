"""The request bodies the API accepts (pydantic): OpenAI's fields plus `speculative` ({"method", "k"})."""
from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class Speculative(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: str | None = None
    k: Union[int, Literal["auto"], None] = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class Common(BaseModel):
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

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class CompletionRequest(Common):
    prompt: Union[str, list[str]]

    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: Union[str, list[dict]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.get("text", "") for part in self.content if part.get("type") == "text")


class ChatRequest(Common):
    messages: list[Message] = Field(min_length=1)
