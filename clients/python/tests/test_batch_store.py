"""Where a batch reads and writes (``reward_gateway_client.batch.store``): a local file and directory, or S3 on a
real S3-compatible server (versitygw, the ``s3`` fixture); an input also over HTTP (a real server on loopback,
the ``files`` fixture), and a Parquet file's rows as JSON lines. The worker sees one interface; what a user relies
on is that every side reads the same lines, keeps the same names, and clears the same files."""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import os

import pyarrow
import pyarrow.parquet
import pytest
from reward_gateway_client.batch import layout, s3, store, web
from reward_gateway_client.batch.errors import BatchError
from reward_gateway_client.batch.rows import Fields, read_rows

from reward_testing import pki
from reward_testing.object_store import object_store
from reward_testing.ports import free_port

# Lines as editors and scripts write them: CRLF, a lone CR, blank lines, characters of 2 to 4 bytes in UTF-8,
# no newline at the end
AWKWARD = '{"a": "é"}\r\n{"b": "日本"}\r\n\n{"c": "🙂"}\r{"d": 1}\n\n   \n{"e": "last"}'.encode()


def test_an_s3_object_reads_as_the_same_file_read_locally_in_blocks_of_any_size(s3_input, tmp_path, monkeypatch):
    local = tmp_path / "data.jsonl"
    local.write_bytes(AWKWARD)
    expected = list(store.open_input(local).lines())
    assert len(expected) == 8
    for block in (1, 3, len(AWKWARD) - 1, s3.BLOCK):  # a block boundary inside a character, a CRLF, none
        monkeypatch.setattr(s3, "BLOCK", block)
        source = store.open_input(s3_input(AWKWARD))
        assert list(source.lines()) == expected, f"blocks of {block} bytes"
        assert source.digest() == hashlib.sha256(AWKWARD).hexdigest() == store.open_input(local).digest()


def test_an_input_replaced_while_a_run_reads_it_stops_the_run(s3, s3_input):
    source = store.open_input(s3_input(b'{"id": 1}\n'))
    source.digest()  # the run's first read: what every later one must read again
    s3.put("datasets", "data.jsonl", b'{"id": 2}\n')
    with pytest.raises(BatchError, match=r"s3://datasets/data.jsonl: the object was replaced") as stopped:
        list(source.lines())
    assert not stopped.value.retry, "the next run finds another input's sha256 and refuses the output"


def test_an_s3_prefix_holds_the_names_a_directory_holds_and_clears_alike(s3, tmp_path):
    s3.bucket("scored")
    outputs = {
        "local": (store.open_output(tmp_path / "out", 0, 2), tmp_path / "out"),
        "s3": (store.open_output("s3://scored/out/", 0, 2), None),
    }
    for output, _ in outputs.values():
        assert output.read_json(layout.CHECKPOINT) is None
        for chunk in range(3):
            output.write_part(chunk, [{"row": chunk}])
        output.write_json(layout.CHECKPOINT, {"chunks": 3})
        output.write_json(layout.MANIFEST, {"rows": 3})
        assert output.read_json(layout.CHECKPOINT) == {"chunks": 3}
    # beside the shard: another shard's chunk, and a file of the user's
    (tmp_path / "out" / "shard-00001-of-00002").mkdir()
    (tmp_path / "out" / "shard-00001-of-00002" / "part-00000.jsonl").write_text("{}\n")
    (tmp_path / "out" / "shard-00000-of-00002" / "notes.txt").write_text("mine")
    s3.put("scored", "out/shard-00001-of-00002/part-00000.jsonl", b"{}\n")
    s3.put("scored", "out/shard-00000-of-00002/notes.txt", b"mine")

    def names_locally() -> list[str]:
        return sorted(str(path.relative_to(tmp_path / "out")) for path in (tmp_path / "out").rglob("*.*"))

    assert [f"out/{name}" for name in names_locally()] == s3.keys_under("scored", "out/")
    for output, _ in outputs.values():
        output.clear()
        assert output.read_json(layout.CHECKPOINT) is None and output.read_json(layout.MANIFEST) is None
    assert names_locally() == ["shard-00000-of-00002/notes.txt", "shard-00001-of-00002/part-00000.jsonl"]
    assert [f"out/{name}" for name in names_locally()] == s3.keys_under("scored", "out/")


def test_an_s3_chunk_is_the_bytes_a_local_chunk_is(s3, tmp_path):
    rows = [{"row": 0, "id": "é", "reward": 1.5, "failure": None}, {"row": 1, "id": None, "reward": None}]
    store.open_output(tmp_path, 0, 1).write_part(7, rows)
    store.open_output(f"s3://{s3.bucket('scored')}", 0, 1).write_part(7, rows)  # the bucket's top
    assert s3.get("scored", "part-00007.jsonl") == (tmp_path / "part-00007.jsonl").read_bytes()


def test_addressing_follows_kserves_environment(s3, monkeypatch):
    def style() -> str:
        return store.open_input("s3://datasets/data.jsonl").s3.meta.config.s3["addressing_style"]

    assert style() == "path", "path style: what every S3-compatible server takes"
    for value in ("true", "1"):
        monkeypatch.setenv("S3_USER_VIRTUAL_BUCKET", value)
        assert style() == "virtual"


@pytest.mark.filterwarnings("ignore:Unverified HTTPS request")  # S3_VERIFY_SSL=0 asks for it
def test_tls_is_verified_with_aws_ca_bundle_or_not_at_all_with_s3_verify_ssl_0(versitygw, tmp_path, monkeypatch):
    keys = pki.create(tmp_path / "pki")  # a CA of its own, and a certificate for 127.0.0.1
    with object_store(versitygw, tmp_path / "store", tls=(keys.serving_cert, keys.serving_key)) as tls_store:
        uri = tls_store.put(tls_store.bucket("datasets"), "data.jsonl", b'{"id": 1}\n')
        for name in list(os.environ):
            if name.startswith(("AWS_", "S3_")):
                monkeypatch.delenv(name)
        for name, value in tls_store.env().items():
            monkeypatch.setenv(name, value)

        def digest() -> str:
            return store.open_input(uri).digest()

        monkeypatch.setenv("S3_MAX_ATTEMPTS", "1")
        with pytest.raises(BatchError, match=r"TLS with https://127.0.0.1:\d+ failed") as refused:
            digest()
        assert not refused.value.retry
        monkeypatch.setenv("AWS_CA_BUNDLE", str(keys.ca_cert))
        assert digest() == hashlib.sha256(b'{"id": 1}\n').hexdigest()
        monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "nowhere.crt"))
        with pytest.raises(BatchError, match=r"AWS_CA_BUNDLE names no file"):
            digest()
        monkeypatch.setenv("S3_VERIFY_SSL", "0")  # no verification: the bundle is not read, as in KServe
        assert digest() == hashlib.sha256(b'{"id": 1}\n').hexdigest()


@pytest.fixture
def s3_input(s3):
    """An object ``s3://datasets/data.jsonl`` holding ``body``; returns its URI."""
    s3.bucket("datasets")
    return lambda body: s3.put("datasets", "data.jsonl", body)


# https:// (and http://) input: a real HTTP server on loopback (the ``files`` fixture, reward_testing.file_server)


@pytest.mark.parametrize("etag", [True, False], ids=["etag", "last-modified"])
def test_an_http_file_reads_as_the_same_file_read_locally_in_pieces_of_any_size(files, tmp_path, monkeypatch, etag):
    files.etag = etag
    local = tmp_path / "data.jsonl"
    local.write_bytes(AWKWARD)
    expected = list(store.open_input(local).lines())
    for block in (1, 3, web.BLOCK):  # a piece boundary inside a character, a CRLF, none
        monkeypatch.setattr(web, "BLOCK", block)
        source = store.open_input(files.put("/data.jsonl", AWKWARD))
        assert list(source.lines()) == expected, f"pieces of {block} bytes"
        assert source.digest() == hashlib.sha256(AWKWARD).hexdigest() == store.open_input(local).digest()
        assert list(source.lines()) == expected, "a second pass: a new GET, from the first line"


@pytest.mark.parametrize("etag", [True, False], ids=["etag", "last-modified"])
def test_an_http_file_replaced_while_a_run_reads_it_stops_the_run(files, etag):
    files.etag = etag
    source = store.open_input(files.put("/data.jsonl", b'{"id": 1}\n'))
    source.digest()  # the run's first read: what every later one must read again
    files.put("/data.jsonl", b'{"id": 2}\n')  # the same size: only the ETag, or Last-Modified, tells
    with pytest.raises(BatchError, match=r"/data.jsonl: the file was replaced while this run read it") as stopped:
        list(source.lines())
    assert not stopped.value.retry, "the next run finds another input's sha256 and refuses the output"


def test_a_connection_lost_mid_way_goes_on_from_the_byte_it_reached(files, monkeypatch):
    body = b"".join(b'{"id": %d, "text": "%s"}\n' % (i, b"x" * i) for i in range(200))
    monkeypatch.setattr(web, "BLOCK", 512)
    uri = files.put("/data.jsonl", body)
    files.cut_after = 5000
    assert b"".join(line.encode() for line in store.open_input(uri).lines()) == body
    whole, resumed = files.gets("/data.jsonl")
    assert whole is None and resumed.startswith("bytes=") and 0 < int(resumed[6:-1]) <= 5000, "a ranged GET on"

    files.ranges, files.cut_after = False, 5000  # a server that takes no Range: the run stops; the next goes on
    with pytest.raises(BatchError, match=r"the connection was lost at byte \d+: peer closed connection") as lost:
        list(store.open_input(uri).lines())
    assert lost.value.retry


def test_what_an_http_server_refuses_names_the_uri_never_its_secrets(files, monkeypatch):
    monkeypatch.setattr(web, "BACKOFF_S", 0)  # the tries' pauses: none here
    files.put("/data.jsonl", b'{"id": 1}\n')
    port = files.url.rpartition(":")[2]
    presigned = f"{files.url}/missing.jsonl?X-Amz-Signature=s3cr3t&X-Amz-Credential=AKIDEXAMPLE#frag"
    with pytest.raises(BatchError) as refused:
        store.open_input(presigned).digest()
    message = str(refused.value)
    assert message.startswith(f"cannot read the input http://127.0.0.1:{port}/missing.jsonl: no such file")
    assert "404" in message and "s3cr3t" not in message and "AKIDEXAMPLE" not in message and not refused.value.retry

    files.credentials = ("reader", "pa55word")
    with pytest.raises(BatchError, match=r"asks for credentials .*answered 401") as refused:
        store.open_input(f"http://reader:wrong-pa55@127.0.0.1:{port}/data.jsonl").digest()
    assert "wrong-pa55" not in str(refused.value) and "reader" not in str(refused.value) and not refused.value.retry
    source = store.open_input(f"http://reader:pa55word@127.0.0.1:{port}/data.jsonl")
    assert source.name == f"http://127.0.0.1:{port}/data.jsonl" and list(source.lines()) == ['{"id": 1}\n']

    files.credentials, files.failing = None, 503  # the server failing: running again may help
    with pytest.raises(BatchError, match=r"answered 503 Service Unavailable \(3 tries\)") as failing:
        store.open_input(f"{files.url}/data.jsonl").digest()
    assert failing.value.retry and [status for _, _, status in files.served].count(503) == web.ATTEMPTS
    with pytest.raises(BatchError, match=r"did not answer") as away:
        store.open_input(f"http://127.0.0.1:{free_port()}/data.jsonl").digest()
    assert away.value.retry


def test_an_output_over_http_is_refused(tmp_path):
    with pytest.raises(BatchError, match=r"https:// and http:// are for the input only") as refused:
        store.open_output("https://user:pw@example.invalid/out?token=t", 0, 1)
    assert "pw" not in str(refused.value) and "token" not in str(refused.value) and not refused.value.retry


# Parquet input (pyarrow: the parquet extra)


def table_of(records: list[dict]) -> pyarrow.Table:
    """JSON rows as a table whose columns are every row's fields (a row without one: a null there)."""
    return pyarrow.Table.from_struct_array(pyarrow.array(records))


def test_a_parquet_row_is_the_json_object_its_jsonl_line_is(tmp_path):
    records = [
        {
            "id": "a",
            "group": "g",
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "é"}],
        },
        {"id": "b", "group": "g", "prompt": "q", "response": "r", "meta": {"score": 1.5, "tags": ["x"]}},
        {"id": "c", "text": "finished text", "reference": "ref"},
        {"group": "h", "prompt": "q", "response": "r"},  # no id: its position
    ]
    jsonl, parquet = tmp_path / "data.jsonl", tmp_path / "data.parquet"
    jsonl.write_text("".join(json.dumps(record) + "\n" for record in records))
    pyarrow.parquet.write_table(table_of(records), parquet, row_group_size=3)
    read = [json.loads(line) for line in store.open_input(parquet, "parquet").lines()]
    assert read == records, "the columns a row has no value in are absent, as in its JSON line"
    assert list(read_rows(store.open_input(parquet, "parquet").lines(), Fields())) == list(
        read_rows(store.open_input(jsonl).lines(), Fields())
    )
    assert store.open_input(parquet, "parquet").digest() == hashlib.sha256(parquet.read_bytes()).hexdigest()

    typed = pyarrow.table(
        {
            "when": pyarrow.array([datetime.datetime(2025, 1, 2, 3, 4, 5)], pyarrow.timestamp("ms")),
            "price": pyarrow.array([decimal.Decimal("1.25")], pyarrow.decimal128(5, 2)),
            "raw": pyarrow.array([b"bytes"], pyarrow.binary()),
            "labels": pyarrow.array([[("k", 1)]], pyarrow.map_(pyarrow.string(), pyarrow.int64())),
        }
    )
    pyarrow.parquet.write_table(typed, tmp_path / "typed.parquet")
    (line,) = store.open_input(tmp_path / "typed.parquet", "parquet").lines()
    assert json.loads(line) == {"when": "2025-01-02T03:04:05", "price": "1.25", "raw": "bytes", "labels": {"k": 1}}

    (tmp_path / "not.parquet").write_text('{"id": 1}\n')
    with pytest.raises(BatchError, match=r"not\.parquet: not a Parquet file pyarrow can read"):
        list(store.open_input(tmp_path / "not.parquet", "parquet").lines())
    with pytest.raises(BatchError, match=r"cannot read the input .*missing\.parquet"):
        list(store.open_input(tmp_path / "missing.parquet", "parquet").lines())


def test_a_parquet_file_over_http_needs_a_server_that_takes_range_requests(files, tmp_path):
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist([{"id": 1, "text": "t"}]), tmp_path / "data.parquet")
    uri = files.put("/data.parquet", (tmp_path / "data.parquet").read_bytes())
    assert [json.loads(line) for line in store.open_input(uri, "parquet").lines()] == [{"id": 1, "text": "t"}]
    ranged = [sent for sent in files.gets("/data.parquet") if sent]
    assert ranged and all(sent.startswith("bytes=") for sent in ranged), "the footer and the row group, by range"
    files.ranges = False
    with pytest.raises(BatchError, match=r"does not answer Range requests .* a Parquet file needs") as refused:
        list(store.open_input(uri, "parquet").lines())
    assert not refused.value.retry


def test_a_parquet_object_replaced_while_a_run_reads_it_stops_the_run(s3, s3_input, tmp_path):
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist([{"id": 1, "text": "t"}]), tmp_path / "one.parquet")
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist([{"id": 2, "text": "t"}]), tmp_path / "two.parquet")
    source = store.open_input(s3_input((tmp_path / "one.parquet").read_bytes()), "parquet")
    assert source.digest() == hashlib.sha256((tmp_path / "one.parquet").read_bytes()).hexdigest()
    assert [json.loads(line) for line in source.lines()] == [{"id": 1, "text": "t"}]
    s3.put("datasets", "data.jsonl", (tmp_path / "two.parquet").read_bytes())
    with pytest.raises(BatchError, match=r"s3://datasets/data.jsonl: the object was replaced") as stopped:
        list(source.lines())
    assert not stopped.value.retry
