"""Where a batch reads and writes (``reward_gateway_client.batch.store``): a local file and directory, or S3 on a
real S3-compatible server (versitygw, the ``s3`` fixture). The worker sees one interface; what a user relies
on is that both sides read the same lines, keep the same names, and clear the same files."""

from __future__ import annotations

import hashlib
import os

import pytest
from reward_gateway_client.batch import layout, s3, store
from reward_gateway_client.batch.errors import BatchError

from reward_testing import pki
from reward_testing.object_store import object_store

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
