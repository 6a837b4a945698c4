"""schemathesis against rag-serve's own /openapi.json, over real HTTP on loopback.

Every operation gets generated requests, valid and not; every response must be one the
schema declares (status, content type, body), and none a 5xx. One check is left out,
that every schema-valid request succeeds: a rule across parameters (not both retrievers
off) cannot be said in an OpenAPI parameter list, and such a request gets a 400 saying why. Bounded: FUZZ_EXAMPLES
examples an operation (RAG_SERVE_FUZZ_EXAMPLES raises it for a longer run by hand).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from corpora import build_index
from serving import Server, serving

schemathesis = pytest.importorskip("schemathesis", reason="the fuzz test needs schemathesis: pip install -e '.[serve-test]'")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

pytestmark = [pytest.mark.serve, pytest.mark.fuzz]
FUZZ_EXAMPLES = int(os.environ.get("RAG_SERVE_FUZZ_EXAMPLES", "30"))


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory: pytest.TempPathFactory) -> Server:
    base: Path = tmp_path_factory.mktemp("fuzz")
    with serving(build_index(base), "--quiet") as s:
        yield s


def test_no_5xx_and_every_response_fits_the_schema(fuzzed_server: Server) -> None:
    from hypothesis import given

    api = schemathesis.openapi.from_url(fuzzed_server.url + "/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert {op.label for op in operations} >= {"GET /health", "GET /search", "POST /search", "GET /answer", "POST /answer", "GET /explain"}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
        def fuzz(case) -> None:
            response = case.call_and_validate(excluded_checks=[positive_data_acceptance])
            assert response.status_code < 500, f"{case.method} {case.path}: {response.status_code}"

        fuzz()
    assert "Traceback" not in fuzzed_server.log()
