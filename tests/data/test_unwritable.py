"""Writing into a folder without write permission is refused with a clear
PermissionError naming the folder and the fix, before any work where it can be told;
never h5py's raw "Unable to synchronously create file ... errno = 13".

As root, chmod does not take write permission away, so besides the real chmod'ed
folder (skipped there) the refusal is tested through ``os.access`` and through the
OSError h5py raises in the real case."""

import os

import h5py
import numpy as np
import pytest

import simsci.data as sd
import simsci.data._writer as writer_module
from simsci._io import atomic_path, write_json

EPISODE = {"t": [0.0, 1.0], "x": [[1.0], [2.0]]}


def _h5py_permission_error(name):
    """What h5py raises when the folder of ``name`` is not writable."""
    return PermissionError(
        13,
        "Unable to synchronously create file (unable to open file: name = "
        f"'{name}', errno = 13, error message = 'Permission denied', flags = 13, "
        "o_flags = 242)",
    )


def _assert_clear(err, folder):
    text = str(err)
    assert f"folder {str(folder)!r} is not writable" in text
    assert "choose an output folder you can write to" in text and "chmod u+w" in text
    assert "errno" not in text and ".tmp-" not in text  # no raw h5py text, no temp name


@pytest.fixture
def readonly(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    os.chmod(folder, 0o555)
    try:
        probe = folder / "probe"
        try:
            probe.write_text("")
        except PermissionError:
            yield folder
        else:
            probe.unlink()
            pytest.skip("chmod does not take write permission away here (running as root)")
    finally:
        os.chmod(folder, 0o755)


@pytest.fixture
def access_denied(tmp_path, monkeypatch):
    """A folder that ``os.access`` reports unwritable (what it says for a chmod'ed folder
    of another user)."""
    folder = tmp_path / "denied"
    folder.mkdir()
    real = os.access

    def access(path, mode, *args, **kwargs):
        if os.path.abspath(path) == str(folder) and mode & os.W_OK:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    return folder


def test_chmod_folder(readonly):
    with pytest.raises(PermissionError) as info:
        sd.TrajectoryWriter(readonly / "a.h5", kind="state", system="x")
    _assert_clear(info.value, readonly)
    with pytest.raises(PermissionError) as info:
        write_json(readonly / "a.json", {})
    _assert_clear(info.value, readonly)


def test_writer_refuses_before_any_work(access_denied):
    with pytest.raises(PermissionError) as info:
        sd.TrajectoryWriter(access_denied / "a.h5", kind="state", system="x")
    _assert_clear(info.value, access_denied)
    with pytest.raises(PermissionError) as info:
        sd.write(access_denied / "b.h5", [EPISODE], kind="state", system="x")
    _assert_clear(info.value, access_denied)
    assert list(access_denied.iterdir()) == []  # not even a temporary file


def test_atomic_writes_refuse_before_any_work(access_denied):
    with pytest.raises(PermissionError) as info:
        write_json(access_denied / "summary.json", {"a": 1})
    _assert_clear(info.value, access_denied)
    ran = []
    with pytest.raises(PermissionError), atomic_path(access_denied / "c.bin") as tmp:
        ran.append(tmp)
    assert ran == [] and list(access_denied.iterdir()) == []


def test_h5py_permission_error_is_made_clear(tmp_path, monkeypatch):
    """When os.access cannot tell (ACLs, network file systems), h5py's error is
    replaced by the same clear one (with h5py's as its cause)."""
    real = h5py.File

    def file(name, mode="r", *args, **kwargs):
        if mode == "w":
            raise _h5py_permission_error(name)
        return real(name, mode, *args, **kwargs)

    monkeypatch.setattr(writer_module.h5py, "File", file)
    with pytest.raises(PermissionError) as info:
        sd.write(tmp_path / "a.h5", [EPISODE], kind="state", system="x")
    _assert_clear(info.value, tmp_path)
    assert "errno = 13" in str(info.value.__cause__)
    assert list(tmp_path.iterdir()) == []


def test_permission_error_inside_an_atomic_write(tmp_path):
    """A body that fails to create the temporary file gets the clear error too; other
    permission errors (another file) pass through unchanged."""
    with pytest.raises(PermissionError) as info, atomic_path(tmp_path / "d.h5") as tmp:
        raise _h5py_permission_error(tmp)
    _assert_clear(info.value, tmp_path)
    other = PermissionError(13, "Permission denied", "/elsewhere/input.csv")
    with pytest.raises(PermissionError) as info, atomic_path(tmp_path / "e.h5"):
        raise other
    assert info.value is other


def test_other_open_errors_pass_through(tmp_path, monkeypatch):
    def file(name, mode="r", *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_module.h5py, "File", file)
    with pytest.raises(OSError, match="No space left"):
        sd.TrajectoryWriter(tmp_path / "a.h5", kind="state", system="x")


def test_writable_folder_still_writes(tmp_path):
    path = sd.write(tmp_path / "ok.h5", [EPISODE], kind="state", system="x")
    assert np.array_equal(sd.open(path)[0]["x"], np.array([[1.0], [2.0]]))
