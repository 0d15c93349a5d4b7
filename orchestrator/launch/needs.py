"""What a models.yaml entry asks of llama-server that ``--help`` cannot show: the features of our
patch queue (``orchestrator.native.features``). A llama-server without them (a user's own, adopted
with ``build.llama_server``) serves everything else; an entry that depends on one is refused
before launch rather than served silently without it."""

from __future__ import annotations

from orchestrator.config.schema import Config, ModelConfig
from orchestrator.config.spec_types import drafters
from orchestrator.errors import UserError
from orchestrator.native.capabilities import ServerCapabilities


def check_patch_features(
    config: Config, i: int, model: ModelConfig, spec_type: str | None, capabilities: ServerCapabilities
) -> None:
    """Refuse ``speculative.adaptive`` (a draft length chosen per request) on a llama-server that
    lacks per-request draft length: it would ignore every choice and draft with the launch K.

    Raises:
        UserError: naming the models.yaml line and key and the two ways out.
    """
    _check_flags(config, i, model, spec_type, capabilities)
    if model.speculative.adaptive and "draft-mtp" in drafters(spec_type) and capabilities.lacks("draft-length"):
        raise UserError(
            f"{config.where('models', i, 'speculative', 'adaptive')}: model {model.name!r}: adaptive draft length "
            "needs per-request draft length, which this llama-server lacks (it was not built from native/patches)",
            hint="remove speculative.adaptive (K stays speculative.n_max), or serve through `orchestrator build`'s "
            "llama-server (drop build.llama_server)",
        )


def _check_flags(
    config: Config, i: int, model: ModelConfig, spec_type: str | None, capabilities: ServerCapabilities
) -> None:
    """Refuse a launch setting whose flag this llama-server's ``--help`` does not list (an older or
    adopted build): it would exit at start with "invalid argument"."""
    bs = model.speculative.backend_sampling
    wanted = [
        (("batch_size",), "-b", model.batch_size is not None),
        (("ubatch_size",), "-ub", model.ubatch_size is not None),
        (("speculative", "backend_sampling"), f"--{'' if bs else 'no-'}spec-draft-backend-sampling",
         bs is not None and spec_type is not None),
        (("cache_type_k",), "--cache-type-k", model.cache_type_k is not None),
        (("cache_type_v",), "--cache-type-v", model.cache_type_v is not None),
        (("cache_ram",), "--cache-ram", model.cache_ram is not None),
        (("speculative", "sampling"), "--spec-draft-sampling",
         model.speculative.sampling is not None and spec_type is not None),
    ]  # fmt: skip
    for key, flag, used in wanted:
        if used and capabilities.flags and flag not in capabilities.flags:
            raise UserError(
                f"{config.where('models', i, *key)}: model {model.name!r}: this llama-server has no {flag}",
                hint=f"remove {'.'.join(key)}, or serve through `orchestrator build`'s llama-server",
            )
