"""Types of the prompt-cache keys of models.yaml (``warm_prefixes``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class WarmPrefixFile(BaseModel):
    """A warm prefix read from a file (UTF-8 text), relative to models.yaml."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(min_length=1, description="text file whose content is the system message")


#: One ``warm_prefixes`` entry: inline text, or ``{file: path}``; rendered as a system message.
WarmPrefix = Annotated[str, Field(min_length=1)] | WarmPrefixFile
