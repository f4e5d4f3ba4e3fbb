"""`xeoncluster tensorboard` merges the fetched event folders into the results folder without following
links: two links back to the folder made 21,129 copies in 4 s, on the way to 2^40."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MERGE = ("import json, sys; from pathlib import Path; from xeoncluster.commands.tensorboard import _merge; "
         "print(json.dumps(_merge(Path(sys.argv[1]), Path(sys.argv[2]))))")


def test_links_to_the_folder_are_left_out_and_named(tmp_path: Path) -> None:
    """Run apart, with a deadline: following the links would copy without end."""
    source, target = tmp_path / "fetched", tmp_path / "board"
    (source / "train").mkdir(parents=True)
    (source / "events.out.tfevents.1").write_bytes(b"scalars")
    (source / "train" / "events.out.tfevents.2").write_bytes(b"more")
    (source / "loop").symlink_to(source)
    (source / "train" / "up").symlink_to("..")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", MERGE, str(source), str(target)], cwd=REPO, capture_output=True,
                          text=True, timeout=20)
    assert done.returncode == 0, done.stderr[-2000:]
    assert time.monotonic() - started < 20
    assert sorted(json.loads(done.stdout)) == ["loop", "train/up"]
    copied = sorted(str(p.relative_to(target)) for p in target.rglob("*"))
    assert copied == ["events.out.tfevents.1", "train", "train/events.out.tfevents.2"]
    assert not any(p.is_symlink() for p in target.rglob("*"))
