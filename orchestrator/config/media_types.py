"""The media keys of one model in models.yaml (``ModelConfig`` takes them from ``ModelMediaKeys``):
its vision projector and whether llama-server may download media URLs."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator, model_validator

from orchestrator.config.model_paths import HF_PREFIX, parse_hf_source
from orchestrator.config.problems import located


class ModelMediaKeys(BaseModel):
    """``mmproj`` (the projector: images, MTP drafting on), ``multimodal`` (true with one),
    ``fetch_media_urls``."""

    mmproj: str | None = Field(
        None,
        description="vision projector GGUF (--mmproj): a path relative to this file, or hf:REPO[:FILE_OR_PRECISION] "
        "(up pulls it; without a file the repository's F16 projector): the model takes images, MTP drafting stays on",
    )
    multimodal: bool = Field(False, description="takes image content: true when mmproj is set (set mmproj)")
    fetch_media_urls: bool = Field(
        False,
        description="let llama-server download http(s) image URLs itself (10 MB, 10 s each); false: such a "
        "part is a 400 naming it (send images inline as data: URLs)",
    )

    @field_validator("mmproj")
    @classmethod
    def _source_known(cls, value: str | None) -> str | None:
        if value is not None and value.startswith(HF_PREFIX):
            parse_hf_source(value)  # a malformed hf: source is a config error with its line
        return value

    @model_validator(mode="after")
    def _projector_means_images(self) -> ModelMediaKeys:
        if self.mmproj is not None:
            self.multimodal = True  # images need nothing but the projector
        elif self.multimodal:
            raise located(
                "multimodal",
                "is true but no projector is set; set mmproj to the model's vision projector GGUF "
                "(mmproj-*.gguf beside the model)",
            )
        return self
