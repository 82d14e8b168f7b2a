"""Output paths: never empty or the root, atomic writes (through a FIFO, never through a
symbolic link), a refused command leaves no folder and no lock, a full disk names the file,
a dangling link or a folder where a file goes is named plainly."""

from __future__ import annotations

import json
import os
import stat

import pytest
from helpers import one_error, refused

from stackedheads import presets
from stackedheads.state import write
from stackedheads.errors import UsageError

PUBLISH = ("--title", "t", "--command", "c", "--commit", "0123abc")


# --- 43.1: an empty output path ----------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["train", "--preset", "smoke", "--out", ""],
    ["sweep", "figure4", "--preset", "smoke", "--out", ""],
    ["sweep", "depth", "--preset", "smoke", "--out", ""],
    ["reproduce", "--preset", "smoke", "--out", ""],
    ["llm-bench", "--backend", "openai", "--model", "m", "--out", ""],
    ["llm-compare", "A", "B", "-o", ""],
    ["circuit", "discover", "RUN", "--out", ""],
    ["attention", "RUN", "--out", ""],
    ["emergence", "RUN", "--out", ""],
    ["theory", "--out", ""],
    ["theory", "--out", "/"],
    ["prompts", "-f", "equations", "--out", ""],
    ["prompts", "-f", "equations", "--export", ""],
    ["publish", "RUN", "--name", "x", *PUBLISH, "--results", ""],
])
def test_an_empty_output_path_is_refused_by_every_verb(cli, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    r = cli(*args)
    refused(r, "--" if "--export" not in args else "--export")
    assert "empty" in r.err or "root" in r.err
    assert list(tmp_path.iterdir()) == []  # nothing written where the user stands

# --- 44.1: atomic writes and special files --------------------------------------------------------


def test_an_atomic_write_refuses_a_fifo_and_writes_through_dev_null(cli, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # No reader: a writer that opened the FIFO would wait for ever; it is refused before that.
    r = cli("prompts", "-f", "equations", "--out", fifo)
    refused(r, "FIFO")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # left as it was, not replaced by a regular file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temp file left
    with pytest.raises(UsageError, match="FIFO"):
        write.atomic_write_json(fifo, {})
    r = cli("prompts", "-f", "equations", "--out", os.devnull)  # the one device written through
    assert r.code == 0, r.err
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_an_atomic_write_refuses_a_symbolic_link(cli, tmp_path):
    target = tmp_path / "target.jsonl"
    target.write_text("mine\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    refused(cli("prompts", "-f", "equations", "--out", link), "symbolic link")
    assert link.is_symlink() and target.read_text() == "mine\n"
    with pytest.raises(UsageError, match="symbolic link"):
        write.atomic_write_json(link, {})

# --- 43.11: a refused input leaves no lock and no folder ------------------------------------------


def test_discover_and_emergence_leave_nothing_when_they_refuse_their_input(cli, tmp_path):
    run = tmp_path / "run"  # a run's config, but no checkpoint
    run.mkdir()
    (run / "config.json").write_text(json.dumps(presets.SEC9_SMOKE.to_dict()))
    refused(cli("circuit", "discover", run, "--out", tmp_path / "c"), "no checkpoint")
    refused(cli("emergence", run, "--out", tmp_path / "e" / "deep"), "no checkpoint")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    kept = tmp_path / "kept"  # a folder that was there stays, without a .lock
    kept.mkdir()
    refused(cli("emergence", run, "--out", kept), "no checkpoint")
    assert list(kept.iterdir()) == []

def test_a_full_disk_names_the_file_being_written(tmp_path, monkeypatch, cli):
    """A full disk's "[Errno 28]" names the file, though the write happens on a descriptor."""
    import errno
    import os as os_mod

    from stackedheads.state import write

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os_mod, "fsync", full)
    with pytest.raises(OSError) as e:
        write.atomic_write_bytes(tmp_path / "state.json", b"{}")
    assert e.value.filename == str(tmp_path / "state.json") and e.value.errno == errno.ENOSPC
    assert not list(tmp_path.iterdir())  # no temp file left behind
    r = cli("prompts", "-f", "equations", "--n", "1", "--out", tmp_path / "q.jsonl")
    assert r.code == 1 and str(tmp_path / "q.jsonl") in r.err and "free some space" in r.err


def test_an_output_that_is_a_dangling_link_or_a_folder_is_named_plainly(tmp_path, cli):
    """A dangling-symlink --out is named as such, not "File exists"; `prompts --out DIR` names DIR, not a temp file."""
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    r = cli("train", "--preset", "smoke", "--out", tmp_path / "link")
    assert r.code == 2 and one_error(r.err) and "symbolic link to a path that does not exist" in r.err
    (tmp_path / "d").mkdir()
    r = cli("prompts", "-f", "equations", "--n", "1", "--out", tmp_path / "d")
    assert r.code == 2 and one_error(r.err) and f"{tmp_path / 'd'} is a folder" in r.err and ".tmp" not in r.err


@pytest.mark.parametrize("name", ["theory.jsonl", "README.md"])
def test_a_fifo_where_a_verb_writes_a_state_file_is_one_line_not_a_hang(cli_process, tmp_path, name):
    """A FIFO at theory.jsonl (`theory --out D`) or at a results folder's README.md
    (`results-index`) hung the writer until a reader came."""
    folder = tmp_path / "D"
    folder.mkdir()
    os.mkfifo(folder / name)
    args = ("theory", "--out", folder) if name == "theory.jsonl" else ("results-index", "--results", folder)
    r = cli_process(*args, timeout=120)  # a writer waiting on the FIFO would time out here
    assert r.code == 2 and one_error(r.err) and "FIFO" in r.err and str(folder / name) in r.err, r.err
    assert stat.S_ISFIFO((folder / name).lstat().st_mode)
