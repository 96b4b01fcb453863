"""Schemathesis, long form: positive (coverage + fuzzing) and negative runs over
/docs/openapi.json against `engram serve` on its own embedded PostgreSQL, with valid wallet auth
injected (tests/support/schemathesis_hooks.py). Prints the request counts and the 5xx count
(must be 0) per mode, and writes bench/results/schemathesis.json.

Run: .venv/bin/python bench/schemathesis_run.py [--max-examples 100] [--max-seconds 600]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from throughput import Server, free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.schemathesis_run import run

RESULTS = Path(__file__).parent / "results" / "schemathesis.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=100, help="per operation and mode")
    parser.add_argument("--max-seconds", type=int, default=600, help="per mode")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="engram-schemathesis-") as tmp:
        server = Server(Path(tmp), free_port(), pool_max=None)
        server.start()
        try:
            for mode in ("positive", "negative"):
                result = run(server.url, mode, args.max_examples, args.max_seconds, Path(tmp))
                print(result.summary())
                if result.with_failures or result.errored:
                    print(result.output)
                results[mode] = {
                    "test_cases": result.generated, "with_failures": result.with_failures,
                    "errored": result.errored, "operations": result.operations_tested,
                    "seconds": result.seconds, "failures": result.failures,
                }  # fmt: skip
        finally:
            server.stop()
        tracebacks = server.log_path.read_text(errors="replace").count("Traceback")
    results["server_tracebacks"] = tracebacks  # type: ignore[assignment]
    print(f"server log: {tracebacks} tracebacks")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
