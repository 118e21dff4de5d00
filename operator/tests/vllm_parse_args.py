"""Run by a vLLM interpreter: parse each JSON argument list with the parser of the runtimes' entry
point (`python -m vllm.entrypoints.openai.api_server`, which `vllm serve` shares)."""

import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
# where vLLM 0.32 keeps it (0.33, which this was first written for, has it in vllm.entrypoints.common.cli_args)
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = make_arg_parser(FlexibleArgumentParser())
results = {}
for name, args in json.load(sys.stdin).items():
    try:
        parsed = parser.parse_args(args)
        results[name] = {
            "ok": True,
            "runner": parsed.runner,
            "convert": parsed.convert,
            "enforce_eager": parsed.enforce_eager,
            "dtype": parsed.dtype,
            "kv_cache_memory_bytes": parsed.kv_cache_memory_bytes,
        }
    except SystemExit:
        results[name] = {"ok": False}
print("RESULTS " + json.dumps(results))
