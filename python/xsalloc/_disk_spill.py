"""Disk backup for xsalloc.memory_saver: torch_memory_saver's enable_disk_backup.

Design: written in Python over the C calls, not in the allocator. A pool
with disk backup is tagged without host backup, so xsa_pause drops its
pages; before that, save() waits for the device (torch.cuda.synchronize),
lists the pool's live blocks (xsa_mempool_checkpoint) and writes each one's
requested bytes to a file of its own under the backup directory
(set_disk_backup_dir, else $TMS_DISK_BACKUP_DIR, else /tmp), through one
pinned staging buffer of $TMS_DISK_BACKUP_CHUNK_MB MiB (default 256, as
torch_memory_saver), reused. After xsa_resume, restore() reads the files
back into the blocks still live at the same address and size (a block
freed while paused is skipped) and deletes them. Host memory stays bounded
by the staging buffer, which is the point of disk backup. A pool counts as
paused when the snapshot marks its segments so (elastic.paused_pools), so
a pause or resume that failed on some device leaves exactly that device's
files: dropped when its pause failed, kept for the next resume when its
resume failed.
"""

import ctypes
import os
import tempfile

from . import elastic
from ._lib import XsallocError

MiB = 1 << 20


class _DeviceBytes:
    """n bytes of device memory at ptr, as torch.as_tensor takes them (__cuda_array_interface__)."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "strides": None,
                                         "version": 2}


def chunk_bytes():
    """The staging buffer's size: $TMS_DISK_BACKUP_CHUNK_MB MiB (unset or 0: 256)."""
    text = os.environ.get("TMS_DISK_BACKUP_CHUNK_MB", "")
    try:
        mb = int(text) if text else 0
    except ValueError:
        raise ValueError(f"TMS_DISK_BACKUP_CHUNK_MB={text!r}: expected a whole number of MiB") from None
    if mb < 0:
        raise ValueError(f"TMS_DISK_BACKUP_CHUNK_MB={text!r}: expected a whole number of MiB")
    return (mb or 256) * MiB


class DiskSpill:
    """The disk-backed pools' saved blocks: pool key -> (device, pool id, [(address, bytes, file)])."""

    def __init__(self):
        self.directory = None  # set_disk_backup_dir's
        self._saved = {}
        self._staging = None

    def backup_dir(self):
        return self.directory or os.environ.get("TMS_DISK_BACKUP_DIR") or "/tmp"

    def saved(self):
        """The pool keys whose blocks are on disk now."""
        return set(self._saved)

    def save(self, torch, pools, tag):
        """Writes the live blocks of the disk-backed pools (key[2]) of `pools`
        tagged `tag` (None: all) that are neither saved nor paused; returns their keys."""
        paused = elastic.paused_pools()  # paused already (e.g. through xsalloc.elastic): nothing to read
        keys = [k for k, pool in pools.items() if k[2] and (tag is None or k[0] == tag) and k not in self._saved
                and (k[4], tuple(pool.id)) not in paused]
        for device in sorted({k[4] for k in keys}):
            torch.cuda.synchronize(device)
        try:
            for key in keys:
                device, pool_id = key[4], tuple(pools[key].id)
                entries = []
                self._saved[key] = (device, pool_id, entries)
                for ptr, n in elastic.live_blocks(device, pool_id):
                    entries.append((ptr, n, self._write(torch, device, ptr, n)))
        except BaseException:
            self.drop(keys)
            raise
        return keys

    def drop(self, keys):
        """Forgets the saved blocks of `keys` and deletes their files."""
        for key in keys:
            _, _, entries = self._saved.pop(key, (None, None, ()))
            for _, _, path in entries:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass

    def drop_unpaused(self, keys):
        """After a pause that failed: drops the saved `keys` whose pool is not paused."""
        paused = elastic.paused_pools()
        self.drop([k for k in keys if k in self._saved and self._saved[k][:2] not in paused])

    def restore(self, torch, tag):
        """Reads back the saved pools tagged `tag` (None: all) that are no
        longer paused, into their blocks still live, and deletes their files."""
        paused = elastic.paused_pools()
        for key, (device, pool_id, entries) in list(self._saved.items()):
            if (tag is not None and key[0] != tag) or (device, pool_id) in paused:
                continue
            try:
                try:
                    live = set(elastic.live_blocks(device, pool_id))
                except XsallocError:  # the pool went away (released, its memory all freed)
                    live = set()
                for ptr, n, path in entries:
                    if (ptr, n) in live:
                        self._read(torch, device, ptr, n, path)
                torch.cuda.synchronize(device)
            finally:
                self.drop([key])

    def _staging_buffer(self, torch):
        """(pinned uint8 tensor, its bytes as a writable memoryview), made once."""
        if self._staging is None:
            n = chunk_bytes()
            buf = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            self._staging = (buf, memoryview((ctypes.c_ubyte * n).from_address(buf.data_ptr())).cast("B"))
        return self._staging

    def _device_view(self, torch, device, ptr, n):
        return torch.as_tensor(_DeviceBytes(ptr, n), device=f"cuda:{device}")

    def _write(self, torch, device, ptr, n):
        directory = self.backup_dir()
        os.makedirs(directory, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="xsalloc_backup_", dir=directory)
        staging, view = self._staging_buffer(torch)
        src = self._device_view(torch, device, ptr, n)
        with os.fdopen(fd, "wb") as f:
            for off in range(0, n, len(view)):
                k = min(len(view), n - off)
                staging[:k].copy_(src[off:off + k])  # synchronous (non_blocking=False): staging is ready
                f.write(view[:k])
        return path

    def _read(self, torch, device, ptr, n, path):
        staging, view = self._staging_buffer(torch)
        dst = self._device_view(torch, device, ptr, n)
        with open(path, "rb") as f:
            for off in range(0, n, len(view)):
                k = min(len(view), n - off)
                if f.readinto(view[:k]) != k:
                    raise OSError(f"xsalloc: disk backup {path} ended early ({off} of {n} bytes read)")
                dst[off:off + k].copy_(staging[:k])  # synchronous: staging can take the next chunk
