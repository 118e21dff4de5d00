"""``reward-gateway-client score``: score a JSONL file with a served reward model, resumably.

``--input`` and ``--output`` are local paths or S3 URIs (``s3://bucket/key``, ``s3://bucket/prefix``: the
``s3`` extra, with the environment KServe's storage initializer reads; ``reward_gateway_client.batch.s3``);
``--input`` may also be an ``https://`` URI (``reward_gateway_client.batch.web``). ``--input-format parquet``
reads a Parquet file's rows as JSON lines (the ``parquet`` extra; ``reward_gateway_client.batch.parquet``).

Exit codes: 0 the shard is done; 2 it cannot go on and running it again will not help (the input unreadable,
the output holding another batch, S3 credentials refused, a bad argument); 3 the gateway or the object store
failed after their retries, and running the same command again goes on from the last chunk; 143 stopped by
SIGTERM (``stop_on_terminate``), the same.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from reward_gateway_client.batch import store
from reward_gateway_client.batch.rows import Fields
from reward_gateway_client.batch.selection import Selection
from reward_gateway_client.batch.worker import BatchError, Job, ShardWorker, Summary
from reward_gateway_client.http import GatewaySettings

DONE, REFUSED, GATEWAY_FAILED = 0, 2, 3


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="reward-gateway-client", description=__doc__.splitlines()[0])
    commands = top.add_subparsers(dest="command", required=True)
    score = commands.add_parser("score", help="score a JSONL file through the reward gateway, resumably")
    score.add_argument("--url", help="the gateway's base URL (a RewardModel's status.url); else $REWARD_GATEWAY_URL")
    score.add_argument(
        "--input",
        required=True,
        type=_location,
        help="a JSONL file (a row a line), s3://bucket/key or https://host/path",
    )
    score.add_argument(
        "--input-format",
        choices=store.FORMATS,
        default="jsonl",
        help="jsonl (default), or parquet: a Parquet file's rows, each read as a JSON object (pyarrow: the "
        "parquet extra)",
    )
    score.add_argument(
        "--output",
        required=True,
        type=_location,
        help="the output directory or s3://bucket/prefix (chunks, checkpoint, manifest)",
    )
    score.add_argument("--token-file", help="a file whose first line is the gateway's bearer token")
    score.add_argument("--client", help="this batch's name for the gateway's fair share (X-Reward-Client)")
    for name, default in vars(Fields()).items():
        score.add_argument(f"--{name}-field", default=default, help=f"the input's {name} field (default: {default})")
    score.add_argument("--best-of-group", action="store_true", help="select the highest reward of each group")
    score.add_argument("--threshold", type=float, help="select rows whose reward is at least this")
    score.add_argument("--shards", type=int, default=1, help="how many shards the input is split into")
    score.add_argument("--shard", type=int, default=0, help="which shard this run scores (0-based)")
    score.add_argument("--chunk-rows", type=int, default=256, help="rows per committed chunk (at least)")
    score.add_argument("--max-in-flight", type=int, default=8, help="calls to the gateway at once")
    score.add_argument("--max-items-per-call", type=int, default=64, help="items in one call (a group's at most)")
    score.add_argument(
        "--result-file",
        type=Path,
        help="also write the result, or why the run stopped, as one JSON object to this file (a Job pod's "
        "termination message, which the RewardBatch's status reads)",
    )
    score.add_argument(
        "--attempts",
        type=int,
        default=GatewaySettings.attempts,
        help="tries per call while the gateway answers 502 to 504",
    )
    return top


def _location(text: str) -> Path | str:
    """A local path, or an S3 or https:// URI kept as written (a Path would fold its ``//``)."""
    return text if store.is_uri(text) else Path(text)


def main(argv: list[str] | None = None) -> int:
    arguments = parser().parse_args(argv)
    if not 0 <= arguments.shard < arguments.shards:
        print(f"reward-gateway-client: --shard {arguments.shard} is not in 0..{arguments.shards - 1}", file=sys.stderr)
        return REFUSED
    if min(arguments.chunk_rows, arguments.max_in_flight, arguments.max_items_per_call, arguments.attempts) < 1:
        print(
            "reward-gateway-client: --chunk-rows, --max-in-flight and --max-items-per-call are at least 1",
            file=sys.stderr,
        )
        return REFUSED
    fields = Fields(**{name: getattr(arguments, f"{name}_field") for name in vars(Fields())})
    job = Job(
        arguments.input,
        arguments.output,
        fields,
        Selection(arguments.best_of_group, arguments.threshold),
        arguments.shard,
        arguments.shards,
        arguments.chunk_rows,
        arguments.max_in_flight,
        arguments.max_items_per_call,
        arguments.input_format,
    )
    settings = GatewaySettings(
        url=arguments.url, token_file=arguments.token_file, client=arguments.client, attempts=arguments.attempts
    )
    stop_on_terminate(arguments.result_file)
    try:
        summary = asyncio.run(ShardWorker(job, settings).run())
    except BatchError as error:
        again = "; run the same command again to go on from the last chunk" if error.retry else ""
        return _stopped(arguments.result_file, f"{error}{again}", GATEWAY_FAILED if error.retry else REFUSED)
    except ValueError as error:  # no URL
        return _stopped(arguments.result_file, str(error), REFUSED)
    result = json.dumps(_result(summary), sort_keys=True)
    print(result)
    _write_result(arguments.result_file, result)
    return DONE


def stop_on_terminate(result_file: Path | None) -> None:
    """SIGTERM (a pod deleted, evicted or its node drained) stops the run at once, as SIGKILL would: every file is
    written whole, so the next run goes on from the last chunk. Said here because a container's first process gets
    no default action for SIGTERM: without a handler the worker would go on scoring until the grace period's
    SIGKILL, with its pod already leaving."""

    def terminate(signum: int, _frame: object) -> None:
        code = 128 + signum
        message = "stopped by SIGTERM; the next run goes on from the last chunk"
        _write_result(result_file, json.dumps({"error": message, "exit_code": code}, sort_keys=True))
        print(f"reward-gateway-client: {message}", file=sys.stderr, flush=True)
        os._exit(code)

    signal.signal(signal.SIGTERM, terminate)


def _stopped(result_file: Path | None, message: str, code: int) -> int:
    print(f"reward-gateway-client: {message}", file=sys.stderr)
    _write_result(result_file, json.dumps({"error": message, "exit_code": code}, sort_keys=True))
    return code


def _write_result(result_file: Path | None, text: str) -> None:
    """The result where --result-file names it; a file that cannot be written is said, and changes no exit code."""
    if result_file is None:
        return
    try:
        result_file.write_text(text + "\n", encoding="utf-8")
    except OSError as error:
        print(f"reward-gateway-client: the result was not written to {result_file}: {error}", file=sys.stderr)


def _result(summary: Summary) -> dict[str, object]:
    """What the run did, one JSON line on stdout (the progress lines go to stderr)."""
    return {
        "rows": summary.rows,
        "scored": summary.scored,
        "failed": summary.failed,
        "failures": dict(summary.failures),
        "scored_now": summary.scored_now,
        "scored_twice": summary.scored_twice,
        "nothing_to_do": summary.nothing_to_do,
        # the models that scored the shard's rows (one, unless the shard predates a change of model)
        "models": [json.loads(key) for key in sorted(summary.models)],
    }


if __name__ == "__main__":
    sys.exit(main())
