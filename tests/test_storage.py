"""Output folders (:class:`stackedheads.state.write.RunFolder`): what a folder holds is checked
before anything is written there, and a done marker is trusted only while every file it
vouches for is there and parses."""

from __future__ import annotations

import json

import pytest

from stackedheads.errors import UsageError
from stackedheads.state.write import FolderLock, RunFolder, check_seeds, folder_kinds


def test_folder_kinds_from_marker_files_and_config_keys(tmp_path):
    assert folder_kinds(tmp_path / "missing") == set() and folder_kinds(tmp_path) == set()
    (tmp_path / "sweep.json").write_text("{}")
    assert folder_kinds(tmp_path) == {"figure4 sweep"}
    for keys, kind in (({"task": {}, "seeds": [0]}, "training run"), ({"identity": {}}, "llm-bench run"),
                       ({"preset": {}}, "reproduce run")):
        folder = tmp_path / kind.replace(" ", "-")
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(keys))
        assert folder_kinds(folder) == {kind}
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "config.json").write_text("{not json")
    assert folder_kinds(tmp_path / "damaged") == set()  # its owner says it is damaged


def test_a_folder_of_another_kind_is_refused_and_left_as_it_was(tmp_path):
    (tmp_path / "sweep.json").write_text("{}")
    (tmp_path / "summary.csv").write_text("x\n")
    with pytest.raises(UsageError, match="holds another kind of output \\(figure4 sweep\\)"):
        with RunFolder(tmp_path, "depth sweep").lock("a depth sweep"):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.csv", "sweep.json"]  # not even a .lock
    RunFolder(tmp_path, "figure4 sweep").check()
    RunFolder(tmp_path, "llm-bench run", shares=("figure4 sweep",)).check()
    RunFolder(tmp_path / "new", "depth sweep").check()
    assert not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is not a folder"):
        RunFolder(tmp_path / "file", "depth sweep").check()


def test_a_done_marker_is_trusted_only_while_its_files_exist_and_parse(tmp_path):
    stage = RunFolder(tmp_path)
    (tmp_path / "seed0").mkdir()
    (tmp_path / "seed0" / "summary.json").write_text('{"a": 1}')
    (tmp_path / "rows.jsonl").write_text('{"r": 1}\n{"r": 2}\n')
    (tmp_path / "figure.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0\0\0\0IEND\xaeB`\x82")  # whole as far as a PNG shows
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step_000010.safetensors").write_bytes(b"x")
    (tmp_path / ".lock").write_text("")
    assert stage.done("the stage") is None and stage.missing is None
    stage.mark_done({"wall_s": 1.5})
    assert stage.done("the stage") == {"wall_s": 1.5}
    # Checkpoints are the training's state, not the stage's results: a user may free the space.
    (tmp_path / "checkpoints" / "step_000010.safetensors").unlink()
    assert stage.done("the stage") == {"wall_s": 1.5}
    for damage in ("{cut", None):
        if damage is None:
            (tmp_path / "seed0" / "summary.json").unlink()
        else:
            (tmp_path / "seed0" / "summary.json").write_text(damage)
        assert stage.done("the stage") is None and stage.missing == tmp_path / "seed0" / "summary.json"
    (tmp_path / "seed0" / "summary.json").write_text('{"a": 1}')
    (tmp_path / "rows.jsonl").write_text('{"r": 1}\n{"r": ')
    assert stage.done("the stage") is None and stage.missing == tmp_path / "rows.jsonl"
    (tmp_path / "rows.jsonl").unlink()
    (tmp_path / "figure.png").unlink()
    assert stage.done("the stage") is None and stage.missing == tmp_path / "figure.png"


def test_a_done_marker_from_before_it_listed_files_is_trusted(tmp_path):
    (tmp_path / "done.json").write_text('{"wall_s": 2.0}')
    assert RunFolder(tmp_path).done("the stage") == {"wall_s": 2.0}
    (tmp_path / "done.json").write_text('{"wall_s": 2.0, "vouches": "all"}')
    with pytest.raises(UsageError, match="done.json is damaged"):
        RunFolder(tmp_path).done("the stage")


def test_the_lock_message_offers_another_folder_only_where_there_is_one(tmp_path):
    with FolderLock(tmp_path, "a"):
        with pytest.raises(UsageError, match="wait for it to finish or choose another 'out'") as e:
            FolderLock(tmp_path, "b").__enter__()
        assert e.value.fields == ("out",)  # the command line writes it as --out
        with pytest.raises(UsageError) as e:
            FolderLock(tmp_path, "b", elsewhere=None).__enter__()
    assert str(e.value).endswith("wait for it to finish") and "out'" not in str(e.value) and not e.value.fields


@pytest.mark.parametrize("seeds", [[-1], [2**63], [0, "1"], [], [True]])
def test_one_rule_for_seeds(seeds):
    with pytest.raises(UsageError, match="integers from 0 to 2\\*\\*63-1"):
        check_seeds(seeds, "--seeds")
    assert check_seeds([0, 2**63 - 1], "--seeds") == (0, 2**63 - 1)


# --- Secrets, atomic writes and locks

import errno  # noqa: E402

from helpers import SECRET  # noqa: E402

from stackedheads.state import write  # noqa: E402
from stackedheads.errors import register_secret  # noqa: E402


def test_state_files_never_hold_a_registered_secret(tmp_path):
    register_secret(SECRET)
    write.atomic_write_json(tmp_path / "x.json", {"note": f"key {SECRET}"})
    assert SECRET not in (tmp_path / "x.json").read_text()


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    write.atomic_write_json(path, {"v": 1})

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(write.os, "fsync", full)
    with pytest.raises(OSError):
        write.atomic_write_json(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary left behind


def test_lock_held_by_another_process(tmp_path, held):
    p = held(tmp_path / "x")
    with pytest.raises(UsageError, match=f"in use by pid {p.pid}"):
        with write.FolderLock(tmp_path / "x"):
            pass
    with write.FolderLock(tmp_path / "y", reentrant=True):  # a job runner around train()
        with write.FolderLock(tmp_path / "y"):
            pass
        assert (tmp_path / "y" / ".lock").exists()
    with write.FolderLock(tmp_path / "z"):  # by default even this process is refused
        with pytest.raises(UsageError, match="in use by pid"):
            with write.FolderLock(tmp_path / "z"):
                pass
    with write.FolderLock(tmp_path / "z"):  # and every lock was released
        pass


def test_recorded_settings_are_checked_in_one_message_naming_what_differs(tmp_path):
    folder = RunFolder(tmp_path / "run", "figure4 sweep")
    assert folder.recorded("sweep.json", "the spec") is None
    folder.settle("sweep.json", {"layers": (1, 2), "optim": {"lr": 0.001}}, "the spec", "another specification")
    folder.settle("sweep.json", {"layers": [1, 2], "optim": {"lr": 0.001}}, "the spec", "another specification")  # the same: resumed
    assert folder.recorded("sweep.json", "the spec") == {"layers": [1, 2], "optim": {"lr": 0.001}}
    with pytest.raises(UsageError) as e:
        folder.settle("sweep.json", {"layers": [1, 2], "optim": {"lr": 0.002}, "seeds": [0]}, "the spec", "another specification")
    assert str(e.value) == (
        f"{tmp_path / 'run'} holds a figure4 sweep of another specification (optim.lr: 0.001 there, 0.002 asked; "
        "seeds: (none) there, [0] asked); resume it with the same settings, or choose another 'out'"
    )
    assert json.loads((tmp_path / "run" / "sweep.json").read_text())["optim"]["lr"] == 0.001  # a refusal writes nothing
