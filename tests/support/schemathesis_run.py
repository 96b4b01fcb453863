"""Schemathesis over Engram's own OpenAPI document (/docs/openapi.json), against a real
`engram serve`, with valid wallet auth injected: shared by tests/http/test_schemathesis.py (a short
bounded run) and bench/schemathesis_run.py (a long one).

Auth: a hooks module (`tests.support.schemathesis_hooks`) signs a fresh x-wallet-auth header for
one wallet every 30 s, so runs longer than the header's window stay authenticated. The checks
(CHECKS): no answer may be a 5xx, each status must be one the operation declares, and each JSON
body must match the schema declared for its status (the typed answers and ErrorBody). Counts
come from schemathesis's JSON report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from eth_account import Account

PROJECT = Path(__file__).resolve().parents[2]
ST = Path(sys.executable).with_name("st")
HOOKS = "tests.support.schemathesis_hooks"
CHECKS = "not_a_server_error,status_code_conformance,response_schema_conformance"


@dataclass
class RunResult:
    mode: str
    exit_code: int
    generated: int
    with_failures: int
    errored: int
    operations_tested: int
    seconds: float
    failures: list[object]
    output: str

    def summary(self) -> str:
        return (
            f"schemathesis {self.mode}: {self.generated} test cases on"
            f" {self.operations_tested} operations in {self.seconds:.0f} s,"
            f" {self.with_failures} with failures, {self.errored} errored"
        )


def run(base_url: str, mode: str, max_examples: int, max_seconds: int, report_dir: Path,
        workers: int = 1) -> RunResult:  # fmt: skip
    """`st run` in `mode` (positive or negative) with the coverage and fuzzing phases; fuzzing
    goes on until `max_seconds` is spent.

    One worker by default: with two, hypothesis's threads render strategy reprs through
    `ast.parse` at once, and CPython 3.11's AST builder keeps its recursion depth in
    interpreter-wide state, so the run sometimes errors with "AST constructor recursion depth
    mismatch" (a SystemError in the tool, not an answer of Engram's)."""
    report = report_dir / f"{mode}.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(PROJECT),
        "SCHEMATHESIS_HOOKS": HOOKS,
        "ENGRAM_ST_KEY": Account.create().key.hex(),
    }
    args = [
        str(ST), "run", f"{base_url}/docs/openapi.json", "--phases=coverage,fuzzing",
        "--mode", mode, "--max-examples", str(max_examples), "--max-time", str(max_seconds),
        "--checks", CHECKS, "--workers", str(workers), "--no-color",
        "--report", "json", "--report-json-path", str(report), "--request-timeout", "60",
        # negative mode for GET /v1/memories/by-key/{key} (a path-format parameter, `/` allowed)
        # sometimes draws mostly values no URL can carry, which hypothesis's health check then
        # calls a generator problem (CI10): a check on the tool's generator, not on Engram
        "--suppress-health-check", "filter_too_much",
    ]  # fmt: skip
    # run in the report directory: schemathesis keeps a cache (.schemathesis/) where it runs
    proc = subprocess.run(args, env=env, cwd=report_dir, capture_output=True, text=True,
                          timeout=max_seconds * 3 + 120)  # fmt: skip
    data = json.loads(report.read_text())
    cases = data["test_cases"]
    return RunResult(
        mode, data["exit_code"], cases["generated"], cases["with_failures"], cases["errored"],
        data["operations"]["tested"], data["running_time"], data["failures"],
        proc.stdout[-4000:] + proc.stderr[-2000:],
    )  # fmt: skip
