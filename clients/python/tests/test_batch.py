"""Scoring a dataset through the real gateway process and the fake vLLM (``reward-gateway-client score``):
every row's reward or its failure, best-of-N, a worker killed with SIGKILL resumed row for row, a re-run that
does no work until the model changes, and the errors a user meets; the same from an ``s3://`` input into an
``s3://`` prefix on a real S3-compatible server (versitygw), from an ``http://`` input on a real HTTP server,
and from a Parquet file (local, S3, HTTP), each row for row what the same rows in a local JSONL file give."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow
import pyarrow.parquet
import pytest
import reward_gateway_client.batch
from reward_gateway_client.batch import layout
from reward_gateway_client.batch.cli import main
from reward_gateway_client.batch.rows import Fields
from reward_gateway_client.batch.selection import Selection
from reward_gateway_client.batch.worker import Job, ShardWorker
from reward_gateway_client.http import GatewaySettings

from reward_testing.fake_vllm import MAX_CHARS, conversation_text, logit
from reward_testing.paths import REPO
from reward_testing.ports import free_port
from reward_testing.waiting import wait_until

CLIENT_SOURCE = REPO / "clients" / "python"


def dataset(path: Path, prompts: int = 12, bad_rows: bool = True) -> list[dict]:
    """Prompts with 4 to 8 responses each (a group per prompt); with ``bad_rows``, a malformed row, a line
    that is not JSON, and one response over the model's context."""
    rows: list[dict | str] = []
    for p in range(prompts):
        for r in range(4 + p % 5):
            rows.append({"id": f"p{p}-r{r}", "group": f"p{p}", "prompt": f"question {p}", "response": f"answer {r}"})
    if bad_rows:
        rows.insert(3, {"id": "no-response", "group": "p0", "prompt": "question 0"})
        rows.insert(10, "{not json")
        rows.append({"id": "too-long", "prompt": "q", "response": "x" * (MAX_CHARS + 1)})
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return [row for row in rows if isinstance(row, dict)]


def reward_of(row: dict) -> float:
    return logit(
        conversation_text(
            [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": row["response"]}]
        )
    )


def output_rows(directory: Path) -> list[dict]:
    return [
        json.loads(line) for part in sorted(directory.glob("part-*.jsonl")) for line in part.read_text().splitlines()
    ]


def score(url: str, source: Path | str, out: Path | str, *extra: str) -> int:
    return main(["score", "--url", url, "--input", str(source), "--output", str(out), *extra])


def worker_process(url: str, source: Path | str, out: Path | str, *extra: str) -> subprocess.Popen:
    """``score`` as a process of its own (one the test can kill), in chunks of 40 rows."""
    command = [sys.executable, "-m", "reward_gateway_client.batch.cli", "score", "--url", url,
               "--input", str(source), "--output", str(out), "--chunk-rows", "40", *extra]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CLIENT_SOURCE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)


def test_every_row_has_its_reward_or_its_failure_and_the_best_of_each_group_is_selected(gateway, tmp_path, capsys):
    running = gateway(model_revision="s3://models/rm-v1")
    source = tmp_path / "data.jsonl"
    good = [row for row in dataset(source) if "response" in row and row["id"] != "too-long"]
    assert score(running.url, source, tmp_path / "out", "--best-of-group", "--chunk-rows", "16") == 0

    rows = output_rows(tmp_path / "out")
    assert [row["row"] for row in rows] == list(range(len(rows))), "every input row, once, in input order"
    by_id = {row["id"]: row for row in rows}
    for row in good:
        assert by_id[row["id"]]["reward"] == pytest.approx(reward_of(row), abs=1e-6)
        assert by_id[row["id"]]["failure"] is None
        assert by_id[row["id"]]["model"] == {"model": "rm", "revision": "s3://models/rm-v1"}
    assert by_id["no-response"]["reward"] is None and by_id["no-response"]["failure"]["reason"] == "invalid"
    (not_json,) = [row for row in rows if row["id"] is None]
    assert "is not JSON" in not_json["failure"]["message"]
    assert by_id["too-long"]["failure"]["reason"] == "too_long" and by_id["too-long"]["reward"] is None
    for group in {row["group"] for row in good}:
        members = [row for row in good if row["group"] == group]
        best = max(members, key=reward_of)
        assert [m["id"] for m in members if by_id[m["id"]]["selected"]] == [best["id"]], group

    manifest = layout.read_json(tmp_path / "out" / layout.MANIFEST)
    assert manifest["rows"] == len(rows) and manifest["scored"] == len(good)
    assert manifest["failures"] == {"invalid": 2, "too_long": 1} and manifest["selected"] == 12
    # the rows the model answered: its rewards, and the over-long row it refused
    assert manifest["models"] == [{"identity": {"model": "rm", "revision": "s3://models/rm-v1"}, "rows": len(good) + 1}]
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["scored_now"] == len(rows) and result["scored_twice"] == 0


def test_a_worker_killed_mid_way_resumes_row_for_row_scoring_one_chunk_again(gateway, backend, tmp_path):
    running = gateway()
    source = tmp_path / "data.jsonl"
    dataset(source, prompts=120)
    assert score(running.url, source, tmp_path / "whole", "--chunk-rows", "40") == 0

    backend.delay_s = 0.05  # slow enough to be caught between two chunks
    worker = worker_process(running.url, source, tmp_path / "killed")
    checkpoint = tmp_path / "killed" / layout.CHECKPOINT
    wait_until("three chunks committed", lambda: (layout.read_json(checkpoint) or {}).get("chunks", 0) >= 3,
               timeout=120, interval=0.01)  # fmt: skip
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    left = layout.read_json(checkpoint)
    assert not left.get("done")

    log = io.StringIO()
    job = Job(source, tmp_path / "killed", chunk_rows=40)
    summary = asyncio.run(ShardWorker(job, GatewaySettings(url=running.url), log).run())
    assert output_rows(tmp_path / "killed") == output_rows(tmp_path / "whole")
    assert summary.scored_twice <= 48, "at most the chunk in flight: 40 rows and the rest of its last group"
    assert summary.scored_now + left["counted"]["rows"] == summary.rows, "every row the killed run committed kept"
    print(f"killed after {left['chunks']} chunks; scored again: {summary.scored_twice} rows")


def test_sigterm_stops_the_worker_at_once_saying_so_and_the_next_run_goes_on(gateway, backend, tmp_path):
    """A pod deleted or evicted gets SIGTERM, which a container's first process has no default action for: the
    worker stops at once (143) and says why in its result file, and the next run finishes the same output."""
    running = gateway()
    source = tmp_path / "data.jsonl"
    dataset(source, prompts=120)
    assert score(running.url, source, tmp_path / "whole", "--chunk-rows", "40") == 0
    backend.delay_s = 0.05
    result = tmp_path / "termination-log"
    worker = worker_process(running.url, source, tmp_path / "stopped", "--result-file", str(result))
    checkpoint = tmp_path / "stopped" / layout.CHECKPOINT
    wait_until("a chunk committed", lambda: (layout.read_json(checkpoint) or {}).get("chunks", 0) >= 1,
               timeout=120, interval=0.01)  # fmt: skip
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 128 + signal.SIGTERM
    assert not layout.read_json(checkpoint).get("done"), "stopped mid-way, not run to its end"
    said = json.loads(result.read_text())
    assert said == {"error": "stopped by SIGTERM; the next run goes on from the last chunk", "exit_code": 143}
    assert score(running.url, source, tmp_path / "stopped", "--chunk-rows", "40") == 0
    assert output_rows(tmp_path / "stopped") == output_rows(tmp_path / "whole")


def test_a_finished_batch_does_no_work_until_the_model_changes(gateway, backend, tmp_path):
    source = tmp_path / "data.jsonl"
    dataset(source, bad_rows=False)
    first = gateway(model_revision="s3://models/rm-v1")
    assert score(first.url, source, tmp_path / "out") == 0
    calls = len(backend.calls)
    log = io.StringIO()
    summary = asyncio.run(ShardWorker(Job(source, tmp_path / "out"), GatewaySettings(url=first.url), log).run())
    assert summary.nothing_to_do and len(backend.calls) == calls + 1, "one call: which model answers now"

    second = gateway(model_revision="s3://models/rm-v2")
    summary = asyncio.run(ShardWorker(Job(source, tmp_path / "out"), GatewaySettings(url=second.url), log).run())
    assert not summary.nothing_to_do and summary.scored_now == summary.rows
    assert "the model changed" in log.getvalue()
    assert {json.dumps(row["model"]) for row in output_rows(tmp_path / "out")} == {
        json.dumps({"model": "rm", "revision": "s3://models/rm-v2"})
    }


def test_shards_split_the_input_by_group_and_together_hold_every_row_once(gateway, tmp_path):
    running = gateway()
    source = tmp_path / "data.jsonl"
    rows = dataset(source)
    for shard in range(3):
        assert score(running.url, source, tmp_path / "out", "--shards", "3", "--shard", str(shard)) == 0
    parts = [output_rows(layout.shard_directory(tmp_path / "out", shard, 3)) for shard in range(3)]
    positions = sorted(row["row"] for part in parts for row in part)
    assert positions == list(range(len(rows) + 1))  # the line that is not JSON is a row too
    groups = [{row["id"].split("-")[0] for row in part if row["id"] and "-r" in str(row["id"])} for part in parts]
    assert not (groups[0] & groups[1] or groups[1] & groups[2] or groups[0] & groups[2]), "a group in one shard"


def test_the_rows_of_a_group_must_be_adjacent(gateway, tmp_path):
    running = gateway()
    source = tmp_path / "data.jsonl"
    lines = [{"id": i, "group": g, "prompt": "q", "response": str(i)} for i, g in enumerate("aaba")]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert score(running.url, source, tmp_path / "out", "--best-of-group") == 0
    rows = output_rows(tmp_path / "out")
    assert [row["failure"] is None for row in rows] == [True, True, True, False]
    assert "group 'a' ended at row 1" in rows[3]["failure"]["message"]


def test_what_cannot_go_on_says_why_and_whether_running_it_again_helps(gateway, backend, tmp_path, capsys):
    running = gateway()
    source = tmp_path / "data.jsonl"
    dataset(source, bad_rows=False)
    assert score(running.url, tmp_path / "missing.jsonl", tmp_path / "out") == 2
    assert "cannot read the input" in capsys.readouterr().err

    assert score(running.url, source, tmp_path / "out") == 0
    other = tmp_path / "other.jsonl"
    dataset(other, prompts=3, bad_rows=False)
    assert score(running.url, other, tmp_path / "out") == 2
    assert "holds another batch's output" in capsys.readouterr().err

    backend.misbehaviour = "429"  # vLLM's queue full: the gateway's 503, retried by the client, then given up
    assert score(running.url, source, tmp_path / "fresh", "--chunk-rows", "8", "--attempts", "2") == 3
    assert "run the same command again" in capsys.readouterr().err
    backend.misbehaviour = None
    assert score(running.url, source, tmp_path / "fresh", "--chunk-rows", "8") == 0


@pytest.mark.parametrize(
    ("selection", "rewards", "chosen"),
    [
        (Selection(best_of_group=True), [0.1, 0.7, None, 0.7], [False, True, False, False]),
        (Selection(threshold=0.5), [0.1, 0.7, None, 0.5], [False, True, False, True]),
        (Selection(best_of_group=True, threshold=0.9), [0.1, 0.7], [False, False]),
        (Selection(best_of_group=True), [None, None], [False, False]),
    ],
)
def test_selection_keeps_the_best_of_a_group_or_what_reaches_the_threshold(selection, rewards, chosen):
    assert selection.of_group(rewards) == chosen


def test_a_job_is_another_batch_when_what_decides_its_rows_changes():
    base = Job(Path("in.jsonl"), Path("out"))
    assert base.settings_digest() == Job(Path("in.jsonl"), Path("out"), max_in_flight=64).settings_digest()
    assert base.settings_digest() != Job(Path("in.jsonl"), Path("out"), fields=Fields(id="key")).settings_digest()
    assert base.settings_digest() != Job(Path("in.jsonl"), Path("out"), chunk_rows=7).settings_digest()


def test_finished_text_is_scored_as_given(gateway, tmp_path):
    running = gateway()
    source = tmp_path / "data.jsonl"
    texts = ["question 1 answer 1", "question 1 answer 2"]
    source.write_text(
        "".join(json.dumps({"id": i, "group": "q1", "text": text}) + "\n" for i, text in enumerate(texts))
    )
    assert score(running.url, source, tmp_path / "out") == 0
    assert [row["reward"] for row in output_rows(tmp_path / "out")] == pytest.approx([logit(text) for text in texts])


# s3:// input and output, against a real S3-compatible server (versitygw: the ``s3`` fixture, whose keys are the
# environment a Job pod's worker reads, as KServe's storage initializer reads them)


def s3_rows(store, bucket: str, prefix: str) -> list[dict]:
    keys = [key for key in store.keys_under(bucket, prefix + "/") if key.rsplit("/", 1)[-1].startswith("part-")]
    return [json.loads(line) for key in keys for line in store.get(bucket, key).decode().splitlines()]


def test_a_dataset_read_from_s3_and_written_to_s3_is_a_local_runs_output_object_for_object(gateway, s3, tmp_path):
    running = gateway(model_revision="s3://models/rm-v1")
    source = tmp_path / "data.jsonl"
    dataset(source, prompts=40)
    uri = s3.put(s3.bucket("datasets"), "samples/data.jsonl", source.read_bytes())
    s3.bucket("scored")
    for shard in range(2):
        extra = ("--best-of-group", "--chunk-rows", "16", "--shards", "2", "--shard", str(shard))
        assert score(running.url, source, tmp_path / "local", *extra) == 0
        assert score(running.url, uri, "s3://scored/run-1", *extra) == 0

    for shard in range(2):
        directory = layout.shard_directory(tmp_path / "local", shard, 2)
        prefix = f"run-1/{layout.shard_name(shard, 2)}"
        local = {path.name: path.read_bytes() for path in directory.iterdir()}
        remote = {key.removeprefix(prefix + "/"): s3.get("scored", key) for key in s3.keys_under("scored", prefix)}
        assert local.keys() == remote.keys() and len([name for name in local if name.startswith("part-")]) > 1
        for name in local.keys() - {layout.MANIFEST}:
            assert remote[name] == local[name], f"{prefix}/{name}: the chunk or checkpoint a local run writes"
        local_manifest, remote_manifest = json.loads(local[layout.MANIFEST]), json.loads(remote[layout.MANIFEST])
        assert remote_manifest["input"] == {"path": uri, "sha256": local_manifest["input"]["sha256"], "format": "jsonl"}
        assert {**remote_manifest, "input": None} == {**local_manifest, "input": None}


def test_a_worker_killed_mid_way_resumes_against_s3_row_for_row(gateway, backend, s3, tmp_path):
    running = gateway()
    source = tmp_path / "data.jsonl"
    dataset(source, prompts=120)
    uri = s3.put(s3.bucket("datasets"), "data.jsonl", source.read_bytes())
    s3.bucket("scored")
    assert score(running.url, source, tmp_path / "whole", "--chunk-rows", "40") == 0

    backend.delay_s = 0.05  # slow enough to be caught between two chunks
    worker = worker_process(running.url, uri, "s3://scored/killed")

    def checkpoint() -> dict:
        if "killed/_checkpoint.json" not in s3.keys_under("scored", "killed/"):
            return {}
        return json.loads(s3.get("scored", "killed/_checkpoint.json"))

    wait_until("three chunks committed", lambda: checkpoint().get("chunks", 0) >= 3, timeout=120, interval=0.02)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    left = checkpoint()
    assert not left.get("done")

    log = io.StringIO()
    job = Job(uri, "s3://scored/killed", chunk_rows=40)
    summary = asyncio.run(ShardWorker(job, GatewaySettings(url=running.url), log).run())
    assert s3_rows(s3, "scored", "killed") == output_rows(tmp_path / "whole")
    assert summary.scored_twice <= 48, "at most the chunk in flight: 40 rows and the rest of its last group"
    assert summary.scored_now + left["counted"]["rows"] == summary.rows, "every row the killed run committed kept"


def test_what_s3_refuses_names_the_uri_and_the_cause_never_a_secret(gateway, s3, tmp_path, monkeypatch, capsys):
    running = gateway()
    source = tmp_path / "data.jsonl"
    dataset(source, prompts=2, bad_rows=False)
    uri = s3.put(s3.bucket("datasets"), "data.jsonl", source.read_bytes())

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong" + s3.keys.secret[5:])
    assert score(running.url, uri, tmp_path / "out") == 2
    said = capsys.readouterr()
    assert f"cannot read the input {uri}" in said.err and "SignatureDoesNotMatch" in said.err
    assert s3.keys.secret[5:] not in said.err + said.out, "neither the wrong secret nor the right one"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.keys.secret)

    assert score(running.url, "s3://datasets/missing.jsonl", tmp_path / "out") == 2
    assert "cannot read the input s3://datasets/missing.jsonl: no such object" in capsys.readouterr().err
    assert score(running.url, uri, "s3://no-such-bucket/out") == 2
    assert "s3://no-such-bucket/out/_checkpoint.json: no such bucket" in capsys.readouterr().err

    # the store away: running again may help (exit 3), after boto3's own retries
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("S3_MAX_ATTEMPTS", "1")
    assert score(running.url, uri, tmp_path / "out") == 3
    assert f"cannot read the input {uri}" in capsys.readouterr().err


def test_s3_without_boto3_says_which_extra_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "boto3", None)  # as where the s3 extra is not installed
    monkeypatch.delitem(sys.modules, "reward_gateway_client.batch.s3", raising=False)
    monkeypatch.delattr(reward_gateway_client.batch, "s3", raising=False)
    assert score("http://127.0.0.1:9", "s3://datasets/data.jsonl", tmp_path / "out") == 2
    assert "pip install 'reward-gateway-client[s3]'" in capsys.readouterr().err


# https:// input (a real HTTP server on loopback: the ``files`` fixture) and Parquet input (pyarrow), each scored as
# the same rows in a local JSONL file are


def conversations(path: Path) -> list[dict]:
    """``dataset``'s rows with a group of conversations (``messages``) after them, as JSONL (no line that is not
    JSON: a Parquet file holds rows only); returns the rows."""
    dataset(path, prompts=30)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{") and line.endswith("}")]
    for r in range(5):
        turns = [{"role": "user", "content": "question m"}, {"role": "assistant", "content": f"answer {r}"}]
        rows.append({"id": f"m-r{r}", "group": "m", "messages": turns})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


def test_a_jsonl_file_over_http_is_scored_as_the_local_file_never_saying_its_secrets(gateway, files, tmp_path, capsys):
    running = gateway()
    source = tmp_path / "data.jsonl"
    dataset(source, prompts=20)
    files.credentials = ("reader", "pa55word")
    files.put("/round-3/data.jsonl", source.read_bytes())
    port = files.url.rpartition(":")[2]
    uri = f"http://reader:pa55word@127.0.0.1:{port}/round-3/data.jsonl?token=s3cr3t"
    extra = ("--best-of-group", "--chunk-rows", "16")
    assert score(running.url, source, tmp_path / "local", *extra) == 0
    assert score(running.url, uri, tmp_path / "remote", *extra) == 0

    assert output_rows(tmp_path / "remote") == output_rows(tmp_path / "local")
    manifest = layout.read_json(tmp_path / "remote" / layout.MANIFEST)
    assert manifest["input"]["path"] == f"http://127.0.0.1:{port}/round-3/data.jsonl"
    assert manifest["input"]["sha256"] == layout.read_json(tmp_path / "local" / layout.MANIFEST)["input"]["sha256"]
    said = capsys.readouterr()
    written = "".join(path.read_text() for path in (tmp_path / "remote").iterdir())
    assert "pa55word" not in said.out + said.err + written and "s3cr3t" not in said.out + said.err + written
    assert all(sent is None for sent in files.gets("/round-3/data.jsonl")), "each pass a whole GET, no ranges"


def test_a_parquet_dataset_is_scored_as_its_jsonl_locally_from_s3_and_over_http(gateway, s3, files, tmp_path, capsys):
    running = gateway(model_revision="s3://models/rm-v1")
    jsonl, parquet = tmp_path / "data.jsonl", tmp_path / "data.parquet"
    rows = conversations(jsonl)
    # small row groups: a group of rows, and a chunk, across two of them
    pyarrow.parquet.write_table(pyarrow.Table.from_struct_array(pyarrow.array(rows)), parquet, row_group_size=7)
    assert pyarrow.parquet.ParquetFile(parquet).num_row_groups > 10
    s3_uri = s3.put(s3.bucket("datasets"), "round-3/data.parquet", parquet.read_bytes())
    http_uri = files.put("/round-3/data.parquet", parquet.read_bytes())
    extra = ("--best-of-group", "--chunk-rows", "16")
    assert score(running.url, jsonl, tmp_path / "jsonl", *extra) == 0
    expected = output_rows(tmp_path / "jsonl")
    assert len(expected) == len(rows) and sum(row["selected"] for row in expected) == 30 + 1
    by_id = {row["id"]: row for row in expected}
    for r in range(5):  # the conversations: scored as their text, as the gateway's chat template writes it
        turns = [{"role": "user", "content": "question m"}, {"role": "assistant", "content": f"answer {r}"}]
        assert by_id[f"m-r{r}"]["reward"] == pytest.approx(logit(conversation_text(turns)), abs=1e-6)

    for name, source in (("local", parquet), ("s3", s3_uri), ("http", http_uri)):
        assert score(running.url, source, tmp_path / name, "--input-format", "parquet", *extra) == 0, name
        assert output_rows(tmp_path / name) == expected, f"{name}: ids, groups, selection and rewards row for row"
        manifest = layout.read_json(tmp_path / name / layout.MANIFEST)
        assert manifest["input"]["format"] == "parquet" and manifest["rows"] == len(rows)
        assert manifest["input"]["sha256"] == hashlib.sha256(parquet.read_bytes()).hexdigest()
    assert any(sent for sent in files.gets("/round-3/data.parquet")), "read at random, by ranged GETs"

    # the same bytes read as the other format are another batch: never resumed into the Parquet one's output
    assert score(running.url, parquet, tmp_path / "local", *extra) == 2
    assert "holds another batch's output" in capsys.readouterr().err


def test_an_http_input_replaced_between_two_passes_stops_the_run(gateway, files, tmp_path, capsys):
    running = gateway()
    source = tmp_path / "data.jsonl"
    dataset(source, prompts=4, bad_rows=False)
    uri = files.put("/data.jsonl", source.read_bytes())

    def replace_after_the_first_pass(path: str, gets: int) -> None:
        if gets == 1:  # the run's sha256 read: the next pass meets another file
            files.put(path, source.read_bytes().replace(b"answer", b"ANSWER"))

    files.after_get = replace_after_the_first_pass
    assert score(running.url, uri, tmp_path / "out") == 2
    assert f"cannot read the input {uri}: the file was replaced while this run read it" in capsys.readouterr().err


def test_an_http_input_missing_or_an_http_output_exits_2_naming_no_query(gateway, files, tmp_path, capsys):
    running = gateway()
    missing = f"{files.url}/missing.jsonl?X-Amz-Signature=s3cr3t"
    assert score(running.url, missing, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert f"cannot read the input {files.url}/missing.jsonl: no such file" in err and "404" in err
    assert "s3cr3t" not in err

    source = tmp_path / "data.jsonl"
    dataset(source, prompts=2, bad_rows=False)
    assert score(running.url, source, f"{files.url}/out") == 2
    assert "https:// and http:// are for the input only" in capsys.readouterr().err


def test_parquet_without_pyarrow_says_which_extra_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as where the parquet extra is not installed
    monkeypatch.delitem(sys.modules, "reward_gateway_client.batch.parquet", raising=False)
    monkeypatch.delattr(reward_gateway_client.batch, "parquet", raising=False)
    assert score("http://127.0.0.1:9", tmp_path / "data.parquet", tmp_path / "out", "--input-format", "parquet") == 2
    assert "pip install 'reward-gateway-client[parquet]'" in capsys.readouterr().err
