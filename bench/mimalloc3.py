#!/usr/bin/env python3
"""mimalloc 3 as a peer allocator, without building it: the PyPI package
cmeel-mimalloc ships a prebuilt libmimalloc.so.3. `install` (run by
`scripts/deps.sh bench`) downloads the pinned wheel with pip and copies the
library to a stable place outside the repository:

    ${XDG_CACHE_HOME:-~/.cache}/hakmem-bench/mimalloc-<VERSION>/libmimalloc.so.3

so `make clean` does not remove it and every worktree shares it. The
runner finds it there (path()); `version` is the wheel's version.

    python3 bench/mimalloc3.py install|path
"""
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "3.4.3"
SONAME = "libmimalloc.so.3"


def directory():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "hakmem-bench" / f"mimalloc-{VERSION}"


def path():
    """The installed library, or None."""
    lib = directory() / SONAME
    return str(lib) if lib.exists() else None


def install():
    if path():
        return 0
    with tempfile.TemporaryDirectory(prefix="hakmem-mimalloc3-") as tmp:
        pip = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                              "--only-binary=:all:", "--dest", tmp, f"cmeel-mimalloc=={VERSION}"])
        if pip.returncode != 0:
            print(f"mimalloc3.py: pip download cmeel-mimalloc=={VERSION} failed", file=sys.stderr)
            return 1
        wheels = list(Path(tmp).glob("cmeel_mimalloc-*.whl"))
        if len(wheels) != 1:
            print(f"mimalloc3.py: expected one wheel in the download, found {len(wheels)}", file=sys.stderr)
            return 1
        with zipfile.ZipFile(wheels[0]) as wheel:
            member = next((m for m in wheel.namelist() if m.endswith("/lib/" + SONAME)), None)
            if member is None:
                print(f"mimalloc3.py: {SONAME} not in {wheels[0].name}", file=sys.stderr)
                return 1
            target = directory()
            target.mkdir(parents=True, exist_ok=True)
            partial = target / (SONAME + ".part")
            with wheel.open(member) as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst)
            partial.rename(target / SONAME)  # atomic: a half-copied library is never found
    print(f"hakmem: mimalloc {VERSION} installed as {path()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) == 2 else ""
    if command == "install":
        sys.exit(install())
    if command == "path":
        print(path() or "")
        sys.exit(0 if path() else 1)
    sys.exit(__doc__)
