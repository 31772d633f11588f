"""What commands write never replaces what a user made: a file, a folder that is not empty (without --force), a
folder verispec did not write (even with it), the file behind a symbolic link, a device; corrupt head folders and out-of-range
values get one line, never a traceback."""
import shutil
from pathlib import Path

import pytest
import torch

from verispec.cli import main
from verispec.errors import VerispecError
from verispec.files import atomic_file, check_new_folder
from verispec.sampling import SamplingConfig

DRAFTS = Path(__file__).resolve().parent.parent / "verispec" / "drafts"


def test_a_new_folder_never_replaces_a_file_a_full_folder_without_force_or_a_folder_of_folders(tmp_path):
    (tmp_path / "afile").write_text("precious")
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("mine")
    for dest, force, word in ((tmp_path / "afile", True, "is a file"), (full, False, "--force"),
                              (full, True, "no .verispec file"), ("", False, "name a new folder"),
                              (".", True, "name a new folder"), ("/", True, "name a new folder")):
        with pytest.raises(VerispecError, match=word):
            check_new_folder(dest, force)
    (full / "config.json").write_text("{}")              # a model folder of the user's: never replaced
    with pytest.raises(VerispecError, match="no .verispec file"):
        check_new_folder(full, True)
    from verispec.files import atomic_dir
    with atomic_dir(tmp_path / "written") as tmp:
        (tmp / "config.json").write_text("{}")
    check_new_folder(tmp_path / "written", True)        # a folder verispec wrote, with --force: may be replaced
    check_new_folder(tmp_path / "new", False)
    (tmp_path / "empty").mkdir()
    check_new_folder(tmp_path / "empty", False)


@pytest.mark.parametrize("command", ["train-draft", "train-medusa", "train-eagle"])
def test_training_refuses_an_existing_output_before_any_work(tmp_path, capsys, command):
    keep = tmp_path / "keepme"
    keep.mkdir()
    (keep / "mine.txt").write_text("mine")
    assert main([command, "--data", str(tmp_path / "no-such-data"), "--out", str(keep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err, err
    assert (keep / "mine.txt").read_text() == "mine"
    (tmp_path / "afile").write_text("precious")
    assert main([command, "--data", str(tmp_path / "no-such-data"), "--out", str(tmp_path / "afile"), "--force"]) == 2
    assert "is a file" in capsys.readouterr().err and (tmp_path / "afile").read_text() == "precious"


def test_file_outputs_write_through_links_and_refuse_devices(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    with atomic_file(link) as f:
        f.write("new")
    assert link.is_symlink() and real.read_text() == "new"
    with pytest.raises(VerispecError, match="not a regular file"):
        with atomic_file("/dev/null") as f:
            f.write("x")
    with pytest.raises(VerispecError, match="name a file"):
        with atomic_file("") as f:
            f.write("x")


def test_corrupt_head_folders_and_odd_values_get_one_line(tmp_path, target_fp32):
    from verispec.model.eagle import load_eagle
    from verispec.model.medusa import load_heads
    model, _ = target_fp32
    for name, weights, load in (("smollm2-135m-instruct-medusa", "medusa.safetensors", load_heads),
                                ("smollm2-135m-instruct-eagle", "eagle.safetensors", load_eagle)):
        folder = tmp_path / name
        shutil.copytree(DRAFTS / name, folder)
        data = (folder / weights).read_bytes()
        (folder / weights).write_bytes(data[:len(data) // 2])                  # truncated
        with pytest.raises(VerispecError, match="cannot load"):
            load(folder, model, torch.float32)
        (folder / weights).write_bytes(data)
        (folder / "config.json").write_text("[1, 2]")                          # not a config
        with pytest.raises(VerispecError, match="cannot load"):
            load(folder, model, torch.float32)
    for bad in (float("inf"), float("nan"), -1.0):
        with pytest.raises(VerispecError, match="temperature"):
            SamplingConfig(bad)
