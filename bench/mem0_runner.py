"""The mem0 side of bench/mem0_side.py: runs in mem0's own virtualenv (bench/.venv-mem0), never
imports app.

Speaks JSON lines: the first line on stdin is the configuration (database, collection, embeddings
endpoint, ...); after it answers {"ready": true}, each line is a command, answered by one line:
- {"op": "add", "user_id", "turns": [{"dia_id", "content"}]}: every turn added with `infer=False`
  (no LLM call: the text is stored as is), the turn id in metadata -> {"seconds"}
- {"op": "search", "user_id", "question"}: Memory.search, timed around that call alone
  -> {"seconds", "dia_ids", "texts"}
Turn texts and questions only: the runner never sees answers or evidence. Anything mem0 itself
prints goes to stderr, so stdout carries nothing but answers.

Run by bench/mem0_side.py as: bench/.venv-mem0/bin/python bench/mem0_runner.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

os.environ.setdefault("MEM0_TELEMETRY", "False")  # before mem0 is imported: it reads it then


def build_memory(config: dict[str, Any]) -> Any:
    from mem0 import Memory

    return Memory.from_config(
        {
            "vector_store": {
                "provider": "pgvector",
                "config": {
                    "connection_string": config["database_url"],
                    "collection_name": config["collection"],
                    "embedding_model_dims": config["dims"],
                    "hnsw": True,
                },
            },
            "embedder": {
                "provider": "openai",
                "config": {
                    "model": config["embed_model"],
                    "api_key": "unused",
                    "openai_base_url": config["embed_base_url"],
                    "embedding_dims": config["dims"],
                },
            },
            # add(infer=False) and search() never call the LLM; if mem0 ever tried, it would hit a
            # closed local port and fail loudly instead of reaching any provider.
            "llm": {
                "provider": "openai",
                "config": {"api_key": "unused", "openai_base_url": config["unused_llm_url"]},
            },
            "history_db_path": config["history_db_path"],
        }
    )


def add(memory: Any, command: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    for turn in command["turns"]:
        memory.add(
            [{"role": "user", "content": turn["content"]}],
            user_id=command["user_id"],
            metadata={"dia_id": turn["dia_id"]},
            infer=False,
        )
    return {"seconds": time.perf_counter() - started}


def search(memory: Any, command: dict[str, Any], limit: int) -> dict[str, Any]:
    started = time.perf_counter()
    found = memory.search(command["question"], filters={"user_id": command["user_id"]}, top_k=limit)
    seconds = time.perf_counter() - started
    results = found["results"]
    return {
        "seconds": seconds,
        "dia_ids": [(r.get("metadata") or {}).get("dia_id") for r in results],
        "texts": [r["memory"] for r in results],
    }


def serve(commands: TextIO, answers: TextIO) -> None:
    config = json.loads(commands.readline())
    memory = build_memory(config)
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in commands:
        command = json.loads(line)
        if command["op"] == "quit":
            break
        if command["op"] == "add":
            answer = add(memory, command)
        elif command["op"] == "search":
            answer = search(memory, command, config["limit"])
        else:
            answer = {"error": f"unknown op {command['op']!r}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    memory.close()


def main() -> None:
    # Keep the real stdout for answers; point file descriptor 1 (and sys.stdout) at stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main()
