"""What the model lifecycle refuses, in its own terms: :class:`ModelRefused` with a :class:`Refusal`.

The scheduler raises these to a caller that asked for a replica, a load or an unload it cannot
have now; it knows nothing of HTTP. ``orchestrator.serve.routing.refused_to_http`` maps each
refusal to the status a client gets (429 for a full queue, 404 for a removed model, else 503),
keeping the message, the code and ``Retry-After``.
"""

from __future__ import annotations

from enum import StrEnum


class Refusal(StrEnum):
    """Why a model refused; the value is the error code a client sees."""

    QUEUE_FULL = "queue_full"  # it already holds queue_limit waiting requests: retry later
    LOADING = "model_loading"  # not ready (when_loading: reject, or the wait timed out): retry later
    LOAD_FAILED = "model_load_failed"  # the load the request waited for failed
    REMOVED = "model_not_found"  # a reload removed it
    UNAVAILABLE = "model_unavailable"  # FAILED: a person must act
    TOO_LARGE = "model_too_large"  # it cannot fit, whatever is evicted
    SHUTTING_DOWN = "draining"  # the scheduler is stopping


class ModelRefused(Exception):
    """A request for a model that the lifecycle refuses now.

    Attributes:
        refusal: why (:class:`Refusal`).
        message: what happened and what to do, for the person who sent the request.
        retry_after: seconds after which a retry may succeed, or None when only a person can help.
        param: the request field at fault (``model``), if any.
    """

    def __init__(
        self, refusal: Refusal, message: str, *, retry_after: float | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.refusal, self.message, self.retry_after, self.param = refusal, message, retry_after, param
