import json
import subprocess

from stackedheads.state.provenance import SEGMENTS_FILE, git_commit, git_dirty, machine, read_segments, record_segment


def test_machine_names_cpu_cores_and_os():
    text = machine()
    assert " cores, " in text and text.split(" cores, ")[0].rsplit(" ", 1)[-1].isdigit()


def test_git_outside_a_repository_is_unknown(tmp_path):
    assert git_commit(tmp_path) == "unknown" and git_dirty(tmp_path) is None


def test_git_commit_and_dirty_of_a_repository(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.txt").write_text("1")
    git("add", "a.txt")
    git("commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert git_commit(tmp_path) == head and git_dirty(tmp_path) is False
    (tmp_path / "b.txt").write_text("untracked")  # not the run's code: still clean
    assert git_dirty(tmp_path) is False
    (tmp_path / "a.txt").write_text("2")
    assert git_dirty(tmp_path) is True


def test_segments_append_and_survive_a_torn_line(tmp_path):
    first = record_segment(tmp_path, 0, {"threads": 1, "dtype": "float32", "device": "cpu"})
    assert read_segments(tmp_path) == [first]
    # A line torn by a crash of an older writer (no newline at the end) costs only that line.
    with open(tmp_path / SEGMENTS_FILE, "a") as f:
        f.write('{"from_step": 4')
    second = record_segment(tmp_path, 8, {"threads": 2, "dtype": "bfloat16", "device": "cpu"})
    assert read_segments(tmp_path) == [first, second]
    assert [json.loads(x)["from_step"] for x in (tmp_path / SEGMENTS_FILE).read_text().splitlines()[::2]] == [0, 8]
    assert second["threads"] == 2 and second["from_step"] == 8 and second["started"].endswith("Z")
    assert read_segments(tmp_path / "none") == []
