"""The ``build:`` block of models.yaml: defaults for ``orchestrator build``, and a llama-server the
user already has (``llama_server``), adopted instead of ours."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class BuildConfig(BaseModel):
    """Native build defaults for ``orchestrator build``; ``llama_server`` adopts an existing one."""

    model_config = ConfigDict(extra="forbid", validate_default=False)

    backend: Literal["auto", "cpu", "cuda"] = "auto"
    cuda_arch: str | None = Field(None, description="CUDA compute capabilities, e.g. '120' or '89;90'")
    llama_server: str | None = Field(
        None,
        min_length=1,
        description="a llama-server you already have (a llama.cpp release or your own build), relative to this "
        "file; `up` serves through it instead of `orchestrator build`'s, and `status` lists the features of our "
        "patches it lacks",
    )
