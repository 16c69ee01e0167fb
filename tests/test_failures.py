"""Storage failures are judged by exception type and status code, SDK by SDK, never by
searching the message."""

from __future__ import annotations

import pytest
import requests
from google.api_core import exceptions as google_api

from spotproof.runtime.failures import Failure, classify


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        (google_api.PreconditionFailed("manifests/000000000412.json"), Failure.EXISTS),
        (google_api.Forbidden("no"), Failure.DENIED),
        (google_api.NotFound("no such bucket"), Failure.NOT_FOUND),
        (google_api.ServiceUnavailable("try later"), Failure.SERVER),
        (google_api.RequestRangeNotSatisfiable("past the end"), Failure.PAST_END),
        (requests.ConnectionError("refused"), Failure.UNREACHABLE),
        (requests.Timeout("slow"), Failure.UNREACHABLE),
    ],
)
def test_google_cloud_storage_errors_by_type(error: BaseException, failure: Failure) -> None:
    assert classify(error) is failure


def test_a_412_in_a_message_is_not_an_existing_object() -> None:
    assert classify(RuntimeError("PUT manifests/000000000412.json failed")) is Failure.OTHER


def test_the_outermost_translation_wins() -> None:
    try:
        try:
            raise google_api.ServiceUnavailable("upstream")
        except google_api.ServiceUnavailable as cause:
            raise FileExistsError("translated by the backend") from cause
    except FileExistsError as error:
        assert classify(error) is Failure.EXISTS
