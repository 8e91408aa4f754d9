"""The node image, built without a registry (issue 6 item 1).

No image can be pulled on these machines, so the image is made from Debian's packages:

1. base: `debootstrap --variant=minbase` of the host's Debian suite into a folder, from the
   mirror the host's own apt sources name (read at run time, never written into the
   project), then `docker import`. Tagged by a hash of its inputs (suite, packages,
   mirror) and reused while they do not change.
2. node: the base plus the broker's code and the Python wheels it needs, downloaded on
   the host with `pip download` for the image's Python (cp311) and installed offline
   inside. Tagged by a hash of the base tag, the wheels' requirements and every file of
   the code that goes in.

Both steps print how long they took; a rebuild happens only when an input changed.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafkaesque_harness.clusters.broker import node_code_members

REPO_ROOT = Path(__file__).resolve().parent.parent  # the directory holding clusters/
BASE_REPO = "kafkaesque-base"
NODE_REPO = "kafkaesque-node"
LABEL = "kafkaesque"

# What the broker and the faults need inside a node.
BASE_PACKAGES = (
    "python3",
    "python3-pip",
    "iproute2",
    "iptables",
    "procps",
    "faketime",
    "fuse3",
    "openssh-server",
    "util-linux",
    "kmod",
)
# Python packages the broker imports (kafka-python's protocol classes and record codec), and the object
# store a node of role `storage` runs (clusters/examples/tansu-s3.toml): moto's S3 server, chosen for its
# conditional writes (If-None-Match: * and If-Match on PUT answer 412 when the condition fails, a GET with
# If-None-Match 304; a 4-thread compare-and-set race on one object kept every update, measured 2026-11-27)
# and because it installs from PyPI like the rest; it keeps objects in memory only (docs/analyses/tansu-0.6.0.md).
NODE_REQUIREMENTS = ("kafka-python==3.0.12", "crc32c>=2.9,<3", "pyfuse3==3.5.0", "uvloop==0.23.0",
                     "moto[s3,server]==5.2.5")
# Native helpers built on the host at image time and installed under /opt/kafkaesque/lib.
NODE_NATIVE = ("clusters/native/clock_offset.c",)
NODE_LIB_DIR = "/opt/kafkaesque/lib"


class ImageError(RuntimeError):
    """The image could not be built; the message says why and what to do."""


@dataclass
class AptSource:
    uri: str
    suite: str


def host_apt_source(paths: tuple[str, ...] = ("/etc/apt/sources.list.d", "/etc/apt/sources.list")) -> AptSource:
    """The host's main Debian mirror and suite, from its apt sources (deb822 or one-line format)."""
    candidates: list[AptSource] = []
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files += sorted(path.glob("*.sources")) + sorted(path.glob("*.list"))
        elif path.is_file():
            files.append(path)
    for f in files:
        text = f.read_text(errors="replace")
        if f.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(
                    (k.strip().lower(), v.strip())
                    for k, v in (line.split(":", 1) for line in stanza.splitlines()
                                 if ":" in line and not line.lstrip().startswith("#"))
                )
                if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
                    continue
                for uri in fields.get("uris", "").split():
                    for suite in fields.get("suites", "").split():
                        candidates.append(AptSource(uri, suite))
        else:
            for line in text.splitlines():
                m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m:
                    candidates.append(AptSource(m.group(1), m.group(2)))
    # The plain release suite of the main archive (not -updates, not -security).
    for c in candidates:
        if "-" not in c.suite and "security" not in c.uri:
            return c
    raise ImageError(
        "No Debian mirror found in the host's apt sources (/etc/apt/sources.list[.d]); "
        "add a 'deb' source for the release suite and try again."
    )


def _hash(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.hexdigest()[:12]


def _code_files() -> list[tuple[str, Path]]:
    """(path under the image's code dir, source file) of the node code (code_digest.node_code_members)."""
    return node_code_members(REPO_ROOT)


@dataclass
class ImagePlan:
    source: AptSource
    base_tag: str
    node_tag: str
    code_files: list[tuple[str, Path]] = field(default_factory=list)


def plan(source: AptSource | None = None) -> ImagePlan:
    """Compute both tags from the inputs, without building anything."""
    source = source or host_apt_source()
    base_hash = _hash([source.uri.encode(), source.suite.encode(), " ".join(BASE_PACKAGES).encode()])
    base_tag = f"{BASE_REPO}:{base_hash}"
    code = _code_files()
    node_hash = _hash(
        [base_tag.encode(), " ".join(NODE_REQUIREMENTS).encode(), _dockerfile(base_tag).encode()]
        + [name.encode() + b"\0" + f.read_bytes() for name, f in code]
        + [(REPO_ROOT / f).read_bytes() for f in NODE_NATIVE]
    )
    return ImagePlan(source, base_tag, f"{NODE_REPO}:{node_hash}", code)


def _dockerfile(base_tag: str) -> str:
    return (
        f"FROM {base_tag}\n"
        "COPY wheels /tmp/wheels\n"
        "RUN python3 -m pip install --no-index --find-links /tmp/wheels --break-system-packages "
        + " ".join(shlex.quote(r) for r in NODE_REQUIREMENTS)
        + " && rm -rf /tmp/wheels\n"
        "COPY code /opt/kafkaesque\n"
        f"COPY lib {NODE_LIB_DIR}\n"
        "ENV PYTHONPATH=/opt/kafkaesque PYTHONUNBUFFERED=1\n"
        "WORKDIR /opt/kafkaesque\n"
        'CMD ["sleep", "infinity"]\n'
    )


def _docker_client():
    try:
        import docker

        client = docker.from_env()
        client.ping()
        return client
    except Exception as e:  # noqa: BLE001 - any failure here means "no engine"
        raise ImageError(
            f"The Docker engine does not answer ({type(e).__name__}); start dockerd or use --cluster local."
        ) from None


def _image_exists(client, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_base(client, p: ImagePlan, log: Callable[[str], None]) -> bool:
    """Debootstrap and import the base image unless it exists; True if it was built."""
    if _image_exists(client, p.base_tag):
        return False
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed; run `apt-get install -y debootstrap` (make setup does).")
    if os.geteuid() != 0:
        raise ImageError("Building the base image needs root (debootstrap); run as root or build once with sudo.")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kafkaesque-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = [
            "debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
            p.source.suite, str(rootfs), p.source.uri,
        ]
        log(f"debootstrap {p.source.suite} from the host's mirror ({len(BASE_PACKAGES)} packages) ...")
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            raise ImageError(f"debootstrap failed ({' | '.join(tail)}); check the host's apt mirror and disk space.")
        # Trim what a node never needs.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(rootfs / sub, ignore_errors=True)
        log("docker import ...")
        _import_rootfs(client, rootfs, Path(tmp) / "rootfs.tar", p.base_tag)
    log(f"base image {p.base_tag} built in {time.monotonic() - t0:.1f} s")
    return True


def _import_rootfs(client, rootfs: Path, tar_path: Path, tag: str) -> None:
    """`docker import` through the engine's API (the docker SDK; no docker CLI needed): the root file
    system as a tar, imported as `tag` with our label. Owners, modes and device files are kept as they
    are (tar's numeric owners, as `tar -c` would)."""
    subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tar_path), "."], check=True,
                   capture_output=True)
    repository, _, version = tag.rpartition(":")
    try:
        answer = client.api.import_image_from_file(str(tar_path), repository=repository, tag=version,
                                                   changes=[f"LABEL {LABEL}=base"])
    except Exception as e:  # noqa: BLE001 - docker.errors.APIError and connection errors
        raise ImageError(f"importing the base image {tag} into the Docker engine failed ({type(e).__name__}: "
                         f"{e}); check that the engine runs and has disk space.") from None
    if not _image_exists(client, tag):
        raise ImageError(f"the Docker engine did not create {tag} from the imported root file system (it said: "
                         f"{str(answer).strip()[-300:]}); check the engine's log.")


def _download_wheels(dest: Path) -> None:
    # `pip wheel` with the host's CPython 3.11: pure wheels are downloaded, and pyfuse3 (source
    # only on PyPI) is compiled here against the host's libfuse3, which matches the image's
    # Debian release; the image itself then needs no compiler.
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(dest), *NODE_REQUIREMENTS]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise ImageError(f"building wheels for {', '.join(NODE_REQUIREMENTS)} failed: {r.stderr.strip()[-300:]}")


def build_node(client, p: ImagePlan, log: Callable[[str], None], force: bool = False) -> bool:
    """Build the node image (base + wheels + broker code) unless it exists (or `force`); True if built."""
    if _image_exists(client, p.node_tag) and not force:
        return False
    t0 = time.monotonic()
    # Wheels are cached per requirement set: pyfuse3 takes half a minute to compile.
    wheels = Path(tempfile.gettempdir()) / "kafkaesque-wheels" / _hash([" ".join(NODE_REQUIREMENTS).encode()])
    if not wheels.exists():
        partial = wheels.with_name(wheels.name + f".partial{os.getpid()}")
        partial.mkdir(parents=True, exist_ok=True)
        _download_wheels(partial)
        os.replace(partial, wheels)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        df = _dockerfile(p.base_tag).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(df)
        tar.addfile(info, io.BytesIO(df))
        for w in sorted(wheels.iterdir()):
            tar.add(w, arcname=f"wheels/{w.name}")
        for name, f in p.code_files:
            tar.add(f, arcname=f"code/{name}")
        # The clock preload is compiled with the host's compiler: the image's Debian
        # release matches the host's, and the image then needs no compiler at all.
        from kafkaesque_harness.clusters.clock_preload import LIBRARY_NAME, build_preload

        tar.add(build_preload(), arcname=f"lib/{LIBRARY_NAME}")
    buf.seek(0)
    log("docker build of the node image ...")
    try:
        # Forced: no layer cache either, or the "rebuild" would just re-tag the cached layers.
        client.images.build(fileobj=buf, custom_context=True, tag=p.node_tag, rm=True, forcerm=True,
                            labels={LABEL: "node"}, nocache=force)
    except Exception as e:  # noqa: BLE001 - docker.errors.BuildError and API errors
        raise ImageError(f"building {p.node_tag} failed: {e}") from None
    log(f"node image {p.node_tag} built in {time.monotonic() - t0:.1f} s")
    return True


def ensure_image(log: Callable[[str], None] = print, force: bool = False) -> str:
    """Build what is missing and return the node image tag (the one containers run). `force` rebuilds
    the node image even when its tag exists; the base is rebuilt only when its inputs change."""
    client = _docker_client()
    p = plan()
    t0 = time.monotonic()
    built = build_base(client, p, log)
    built = build_node(client, p, log, force=force) or built
    if built:
        log(f"image set-up took {time.monotonic() - t0:.1f} s")
    else:
        log(f"image {p.node_tag} is up to date")
    return p.node_tag


def main() -> int:
    try:
        tag = ensure_image()
    except ImageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
