"""Run by the pinned vLLM's interpreter (test_gateway_pipeline_vllm_contract.py): validates the gateway's
requests with vLLM's own request models and the fake's answers with its response models.

stdin: {"requests": [[path, body], ...], "answers": [[path, body], ...]}; prints one line
``RESULTS {"requests": [{"ok", "error", "ignored"}...], "answers": [...]}``: ``ignored`` are the
fields vLLM does not know (its models allow and drop them, so a misspelt field would pass unseen).
"""

import json
import sys

from vllm.entrypoints.openai.completion.protocol import CompletionRequest, CompletionResponse
from vllm.entrypoints.pooling.pooling.protocol import PoolingCompletionRequest, PoolingResponse
from vllm.entrypoints.serve.tokenize.protocol import TokenizeCompletionRequest, TokenizeResponse

REQUESTS = {
    "/v1/completions": CompletionRequest,
    "/pooling": PoolingCompletionRequest,
    "/tokenize": TokenizeCompletionRequest,
}
ANSWERS = {"/v1/completions": CompletionResponse, "/pooling": PoolingResponse, "/tokenize": TokenizeResponse}


def check(models, path, body):
    try:
        parsed = models[path].model_validate(body)
    except Exception as error:  # reported, not raised
        return {"ok": False, "error": str(error)[:2000], "ignored": []}
    return {"ok": True, "error": "", "ignored": sorted(parsed.model_extra or {})}


cases = json.load(sys.stdin)
results = {
    "requests": [check(REQUESTS, path, body) for path, body in cases["requests"]],
    "answers": [check(ANSWERS, path, body) for path, body in cases["answers"]],
}
print("RESULTS " + json.dumps(results))
