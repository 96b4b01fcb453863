"""Schemathesis, short form: positive (coverage + fuzzing phases) and negative runs over
/docs/openapi.json against a real `engram serve`, with valid wallet auth; no answer may be a 5xx
(and stopping the server checks its log holds no traceback). bench/schemathesis_run.py runs the
same longer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.schemathesis_run import run
from tests.support.server import serving

MAX_EXAMPLES = 5  # per operation and round of fuzzing
MAX_SECONDS = 25  # per mode: fuzzing repeats until it is spent (~600-1,900 cases each here)
# That fuzzing ran at all, not how fast: a loaded CI host made 994 cases in 40 s where an
# idle one makes about 3,000, and a count floor near that is a speed test in disguise.
MIN_CASES = 300


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(
        tmp_path_factory.mktemp("schemathesis"), ENGRAM_DATABASE_URL=database_url,
        ENGRAM_RATE_LIMIT_PER_MINUTE="0", ENGRAM_FREE_TIER_CALLS="100000000",
    ) as (url, _):  # fmt: skip
        yield url


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_generated_request_gets_a_5xx(
    server: str, mode: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    result = run(server, mode, MAX_EXAMPLES, MAX_SECONDS, tmp_path_factory.mktemp(mode))
    print(result.summary())
    assert result.with_failures == 0 and result.exit_code == 0, result.output
    assert result.errored == 0, result.output
    assert result.operations_tested >= 40, result.summary()
    assert result.generated >= MIN_CASES, result.summary()
