"""``reward-gateway-client score``: score a JSONL file with a served reward model, resumably.

Exit codes: 0 the shard is done; 2 it cannot go on and running it again will not help (the input unreadable,
the output holding another batch, a bad argument); 3 the gateway failed after its retries, and running the
same command again goes on from the last chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

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
    score.add_argument("--input", required=True, type=Path, help="a JSONL file, one row per line")
    score.add_argument("--output", required=True, type=Path, help="the output directory (chunks, checkpoint, manifest)")
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
        "--attempts",
        type=int,
        default=GatewaySettings.attempts,
        help="tries per call while the gateway answers 502 to 504",
    )
    return top


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
    )
    settings = GatewaySettings(
        url=arguments.url, token_file=arguments.token_file, client=arguments.client, attempts=arguments.attempts
    )
    try:
        summary = asyncio.run(ShardWorker(job, settings).run())
    except BatchError as error:
        again = "; run the same command again to go on from the last chunk" if error.retry else ""
        print(f"reward-gateway-client: {error}{again}", file=sys.stderr)
        return GATEWAY_FAILED if error.retry else REFUSED
    except ValueError as error:  # no URL
        print(f"reward-gateway-client: {error}", file=sys.stderr)
        return REFUSED
    print(json.dumps(_result(summary), sort_keys=True))
    return DONE


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
    }


if __name__ == "__main__":
    sys.exit(main())
