# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""How a staged copy becomes the one vLLM reads, and stays that way: the `.partial` directory,
the atomic rename to `<commit>`, the link switch, and the swap of an adopted directory.

Atomic renames (a renameat2 exchange where the kernel has it), each followed by an fsync of
the directory, so the link never names an incomplete copy. Stdlib only, no Ansible imports.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil

from ansible_collections.gpuserve.vllm.plugins.module_utils._atomic import fsync_dir
from ansible_collections.gpuserve.vllm.plugins.module_utils._env._store import replace_symlink, temp_link
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._layout import META_DIR, META_MANIFEST, Layout, StageError
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._manifest import Manifest
from ansible_collections.gpuserve.vllm.plugins.module_utils._weights._manifest import write as write_manifest


def _open_partial(final: str, partial: str, move_final: bool) -> None:
    """<store>/<name>/<commit>.partial ready for fetching: the broken copy moved there, or new."""
    os.makedirs(os.path.dirname(final), mode=0o755, exist_ok=True)
    if move_final:
        if os.path.isdir(partial):
            shutil.rmtree(partial)
        os.rename(final, partial)
    elif not os.path.isdir(partial):
        os.mkdir(partial, 0o755)
    fsync_dir(os.path.dirname(final))


def _delete_broken(partial: str, paths: list[str]) -> list[str]:
    for rel in paths:
        path = os.path.join(partial, rel)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    return paths


def _publish(partial: str, final: str, manifest: Manifest) -> None:
    """The manifest beside the files (which commit a directory holds), then <commit> appears."""
    meta = os.path.join(partial, META_DIR)
    if os.path.lexists(meta) and not os.path.isdir(meta):
        os.unlink(meta)
    os.makedirs(meta, mode=0o755, exist_ok=True)
    write_manifest(os.path.join(partial, META_MANIFEST), manifest)
    os.rename(partial, final)
    fsync_dir(os.path.dirname(final))


def _link_files(src: str, dest: str, paths: list[str]) -> None:
    """Hard links of src's files under a new dest (made here, so nothing in it is anyone else's)."""
    os.mkdir(dest, 0o755)
    for rel in paths:
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        os.link(os.path.join(src, rel), target, follow_symlinks=False)
    fsync_dir(os.path.dirname(dest))


RENAME_EXCHANGE = 2  # renameat2(2)
AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE); False where the kernel or the
    filesystem cannot (then the caller does it in two renames)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), a)


def _adoption_leftovers(lay: Layout) -> list[str]:
    """The old directory a run killed between an adoption's swap and its removal left beside the
    link (a real directory, never a link; its good files live on in the published copy)."""
    return [path for path in (temp_link(lay.link), lay.link + ".gpuserve-adopted")
            if os.path.isdir(path) and not os.path.islink(path) and os.path.islink(lay.link)]


def _replace_dir_with_link(lay: Layout) -> None:
    """The adopted directory at the link's path becomes the link to the published copy in one
    step, so the path vLLM reads never goes missing; the old directory is removed after."""
    tmp = temp_link(lay.link)
    if os.path.isdir(tmp) and not os.path.islink(tmp):
        shutil.rmtree(tmp)  # an old directory a run killed right after the swap left
    elif os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(lay.link_target, tmp)
    if not _exchange(tmp, lay.link):
        aside = lay.link + ".gpuserve-adopted"
        os.rename(lay.link, aside)  # a gap of two renames where the kernel cannot swap
        os.rename(tmp, lay.link)
        tmp = aside
    fsync_dir(os.path.dirname(lay.link))
    shutil.rmtree(tmp)  # the directory (its good files live on in the published copy)


def _switch_link(lay: Layout) -> None:
    if os.path.isdir(lay.link) and not os.path.islink(lay.link):
        raise StageError(f"{lay.link} is a real directory, not the link this role manages; move "
                         f"it aside (or into {lay.partial} to reuse its files), then re-run")
    replace_symlink(lay.link, lay.link_target)
