"""KServe's storage initializer as the test bed runs it: ``entrypoint.py <src_uri> <dest_path> ...``.

KServe's pod webhook (pkg/webhook/admission/pod/storage_initializer_injector.go) adds an init
container with this image and only args: one ``<storage uri> <mount path>`` pair per model. The
download itself is KServe's own code (``kserve_storage.Storage``): ``http(s)://`` archives
(``.tar.gz``, ``.zip``) are unpacked into the folder, ``s3://`` reads the S3 settings KServe puts in
the environment. Exit 1 with the reason on the log when a download fails (the pod shows
Init:Error, and the log is its termination message).
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import tarfile


def _data_member(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
    """PEP 706's "data" filter, for a Python without it: nothing outside the destination (absolute
    names, ``..``, links pointing out), no devices or FIFOs, no set-id bits or group/other write."""
    root = os.path.realpath(destination)

    def inside(path: str) -> bool:
        return os.path.commonpath([root, os.path.realpath(path)]) == root

    target = os.path.join(root, member.name)
    if os.path.isabs(member.name) or not inside(target):
        raise tarfile.TarError(f"{member.name}: outside the destination")
    if member.isdev() or member.isfifo():
        raise tarfile.TarError(f"{member.name}: a device or FIFO")
    if member.issym() and (
        os.path.isabs(member.linkname) or not inside(os.path.join(os.path.dirname(target), member.linkname))
    ):
        raise tarfile.TarError(f"{member.name}: a link out of the destination")
    if member.islnk() and (os.path.isabs(member.linkname) or not inside(os.path.join(root, member.linkname))):
        raise tarfile.TarError(f"{member.name}: a link out of the destination")
    member = copy.copy(member)
    # owned by whoever extracts (the archive's owners are ignored), as the "data" filter does
    member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
    member.mode = member.mode & 0o755 | (0o600 if member.isfile() else 0o700)
    return member


def _tar_data_filter_for_old_pythons() -> None:
    """Debian bookworm's Python is 3.11.2, older than tarfile's extraction filters (PEP 706,
    3.11.4); KServe's storage code unpacks archives with ``extractall(filter="data")``."""
    if hasattr(tarfile, "data_filter"):
        return
    extractall = tarfile.TarFile.extractall

    def extractall_with_filter(self, path=".", members=None, *, numeric_owner=False, filter=None):
        if filter not in (None, "data"):
            raise ValueError(f"extraction filter {filter!r} is not available on this Python")
        if filter == "data":
            members = [_data_member(m, str(path)) for m in (self.getmembers() if members is None else members)]
        return extractall(self, path, members, numeric_owner=numeric_owner)

    tarfile.TarFile.extractall = extractall_with_filter


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        print("usage: entrypoint.py <src_uri> <dest_path> [<src_uri> <dest_path> ...]", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    _tar_data_filter_for_old_pythons()
    from kserve_storage import Storage  # after the usage check: it imports the cloud SDKs it needs

    sources, destinations = argv[0::2], argv[1::2]
    for destination in destinations:
        os.makedirs(destination, exist_ok=True)
    try:
        for source, destination in zip(sources, destinations, strict=True):
            Storage.download(source, destination)
            logging.info("%s -> %s: %d entries", source, destination, len(os.listdir(destination)))
    except Exception as error:  # any failure is the init container's failure
        logging.error("storage initialization failed: %s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
