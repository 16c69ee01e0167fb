"""A ``file://`` store whose own folders are not what its writers made: a ``manifests/``
replaced by a file, a ``steps/`` or ``manifests/`` that links out of the root. Read as
missing, such a store would look as if nothing had ever been committed, and a trainer
would start from step 0 and write over the run; followed, it would read and write
somewhere else. The store is refused instead, in one line naming the path (exit 2 for the
trainer); and a store opened only to read creates nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotproof.runtime import exit_codes
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.storage import StorageURLError, open_store
from spotproof.smoke.processes.warm import Zygote, warm_trainers

pytestmark = pytest.mark.processes

STATE = {"state": b"committed " * 100}
TRAINER = {"CHECKPOINT_INTERVAL": "5", "TOTAL_STEPS": "20", "SEED": "7", "MODEL_MB": "0.1"}


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    with warm_trainers() as warm:
        yield warm


def _committed(root: Path) -> CheckpointStore:
    store = CheckpointStore(root.as_uri())
    assert store.save(5, STATE).committed
    return store


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _warm_exit(zygote: Zygote, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A smoke trainer forked warm (``smoke.processes.warm``), run to its exit."""
    trainer = zygote.spawn(env)
    out, err = trainer.stdout.read(), trainer.stderr.read()
    return subprocess.CompletedProcess([], trainer.wait(60), out, err)


# --- the store ------------------------------------------------------------------------


def test_a_manifests_folder_replaced_by_a_file_is_refused_not_read_as_empty(
    tmp_path: Path,
) -> None:
    store = _committed(tmp_path / "store")
    shutil.rmtree(tmp_path / "store" / "manifests")
    (tmp_path / "store" / "manifests").write_bytes(b"not a folder")
    with pytest.raises(StorageURLError, match=r"/store/manifests is no directory"):
        store.committed_steps()


def test_a_manifests_folder_linked_out_of_the_root_is_refused_not_followed(
    tmp_path: Path,
) -> None:
    store = _committed(tmp_path / "store")
    (tmp_path / "store" / "manifests").rename(tmp_path / "elsewhere")
    (tmp_path / "store" / "manifests").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StorageURLError, match=r"manifests resolves to .*outside the store's root"):
        store.committed_steps()


def test_a_store_opened_to_read_creates_no_directory(tmp_path: Path) -> None:
    url = (tmp_path / "never" / "made").as_uri()
    store = CheckpointStore(url, store=open_store(url, create=False))
    assert store.committed_steps() == []
    assert store.store.list("") == []
    assert list(tmp_path.iterdir()) == []


# --- the trainer ----------------------------------------------------------------------


def test_a_trainer_refuses_a_store_whose_manifests_folder_is_a_file(
    tmp_path: Path, zygote: Zygote
) -> None:
    root = tmp_path / "store"
    _committed(root)
    shutil.rmtree(root / "manifests")
    (root / "manifests").write_bytes(b"")
    before = _files(root)
    done = _warm_exit(zygote, {**TRAINER, "CHECKPOINT_URL": root.as_uri()})
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"{root}/manifests is no directory" in done.stderr
    assert '"resumed"' not in done.stdout and _files(root) == before  # nothing trained over


@pytest.mark.parametrize("folder", ["manifests", "steps"])
def test_a_trainer_refuses_a_store_whose_folder_links_out_of_its_root(
    tmp_path: Path, zygote: Zygote, folder: str
) -> None:
    """With checkpoints committed, the first look through the link (listing ``manifests/``,
    or the parts of the newest step under ``steps/``) is refused: nothing is skipped,
    trained or written."""
    root = tmp_path / "store"
    _committed(root)
    (root / folder).rename(tmp_path / "elsewhere")
    (root / folder).symlink_to(tmp_path / "elsewhere")
    before = _files(tmp_path)
    done = _warm_exit(zygote, {**TRAINER, "CHECKPOINT_URL": root.as_uri()})
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"{root}/{folder} resolves to {tmp_path}/elsewhere, outside" in done.stderr
    assert '"skipped"' not in done.stdout and _files(tmp_path) == before


def test_a_trainer_whose_steps_folder_links_out_of_the_store_exits_2_at_its_first_save(
    tmp_path: Path,
) -> None:
    """Started as the Job starts it (``python -m spotproof.smoke.train``), on a store with
    nothing committed: the listing of ``manifests/`` finds nothing, and the first save,
    which would write through the link, is refused."""
    root = tmp_path / "store"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "steps").symlink_to(tmp_path / "elsewhere")
    done = subprocess.run(
        [sys.executable, "-m", "spotproof.smoke.train"],
        env={**TRAINER, "CHECKPOINT_URL": root.as_uri(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == exit_codes.BAD_CONFIG, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if "event=exit" in line]
    assert f"{root}/steps resolves to {tmp_path}/elsewhere, outside the store's root" in line
    assert _files(tmp_path / "elsewhere") == []
