"""Scoring a dataset with a served reward model: best-of-N selection, rejection sampling, filtering, evals.

A dataset (JSONL or Parquet rows) is read in shards and scored through the reward gateway's ``/v1/rewards``, a group
(the completions of one prompt) in one call, so vLLM's prefix cache serves the group; the answers are written
in chunks, each committed with a checkpoint, so a worker killed at any moment starts again from its last
chunk and the finished output is row for row the same. Every output row carries the input's id, its reward
or its failure (never a number), and the identity of the model that scored it.

``rows`` reads and checks the input, ``selection`` marks the best of each group or the rows over a
threshold, ``layout`` is the output directory (chunks, checkpoint, manifest), ``store`` where the input and
the output are (a local file and directory, or S3 through ``s3``: the ``s3`` extra; an input also over
https through ``web``, and as Parquet through ``parquet``: the ``parquet`` extra), ``worker`` scores a shard, and
``cli`` is ``reward-gateway-client score``.
"""
